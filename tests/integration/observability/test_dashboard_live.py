"""The Grafana dashboard and the alert rules against a live gateway (issue 14, item 4).

One real gateway (in this process, gRPC on 127.0.0.1:0, its Prometheus listener on
127.0.0.1:0) serves real traffic through the real client: a direct send, a group send, a
gather its members answer, and `Messages` streams that receive and acknowledge every
delivery. While the streams are still open the read gauges are refreshed and `/metrics` is
scraped over HTTP. The queries are read by `promql_support` exactly as the unit checks read
them, and then:

- every metric any panel, variable or alert names is in the live exposition;
- for the panels the issue lists (certification latency by op and kind, send outcomes,
  deliveries and acknowledgments, open streams and backlog, Router attachment, store commits
  and batch size) each selector picks live samples carrying every label the query matches on
  or groups by, and the panel's first query is not flat zero after the traffic (every closed
  series exists at 0 from the start, so "a sample exists" alone would prove nothing).

The data-source variable on every panel is checked in the unit file, which needs no gateway.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from typing import Any, Final

import harness_client
import pytest
import pytest_asyncio
from harness_client import (
    Accept,
    AskOperation,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResultItem,
    InboundDelivery,
    InboundItem,
    MessageInput,
    MulticastItem,
    ResponseInput,
)
from prometheus_client.samples import Sample

from gateway.settings import Settings
from gateway.testing import RunningGateway, run_gateway
from tests.support import eventually
from tests.unit.observability.promql_support import (
    SCRAPE_LABELS,
    Query,
    all_queries,
    missing_labels,
    panel_queries,
    panels,
    scrape_samples,
    select,
    series_labels,
    unknown_metrics,
)

pytestmark = pytest.mark.timeout(30)

ISSUE_PANELS: Final = {
    "certification latency by op and kind": (
        "Certification latency p50 by op and kind",
        "Certification latency p99 by op and kind",
    ),
    "send outcomes": ("Send outcomes",),
    "deliveries and acknowledgments": ("Published", "Acknowledged"),
    "open streams and backlog": ("Active streams", "Backlog"),
    "Router attachment": ("Router attachments",),
    "store commits and batch size": ("Commits", "Batch size"),
}
"""Issue 14's dashboard list, each entry with the panels that show it."""

SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"slot": {"type": "string", "enum": ["mon", "tue"]}},
    "required": ["slot"],
}
WITHIN: Final = 10.0
"""Seconds one delivery may take to arrive."""

AGENTS: Final = ("alice", "bob", "dave", "carol")
"""alice sends and asks; bob and dave read, acknowledge and answer; carol never connects, so
her share of the group send stays in the backlog of an agent without a stream."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveScrape:
    """What `/metrics` said after the traffic, while the streams were open."""

    exposition: str
    samples: list[Sample]
    acknowledged: int
    """Deliveries the agents acknowledged."""


def scrape(gw: RunningGateway) -> str:
    address = gw.gateway.metrics_address
    assert address is not None
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        return str(response.read().decode("utf-8"))


async def receive(stream: AsyncIterator[InboundDelivery]) -> InboundItem:
    """The next delivery's item, acknowledged."""
    delivery = await asyncio.wait_for(anext(stream), WITHIN)
    await delivery.acknowledge()
    return delivery.item


def total(samples: list[Sample], name: str) -> float:
    return sum(sample.value for sample in samples if sample.name == name)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def live() -> LiveScrape:
    """Serve the traffic, scrape, and stop the gateway: the tests read the one scrape."""
    settings = replace(Settings(), metrics_listen="127.0.0.1:0")
    async with run_gateway(settings) as gw, AsyncExitStack() as stack:
        tokens = {name: await gw.register(name) for name in AGENTS}
        endpoints = {
            name: await stack.enter_async_context(
                await harness_client.connect(gw.address, token=tokens[name])
            )
            for name in ("alice", "bob", "dave")
        }
        streams = {name: endpoint.messages() for name, endpoint in endpoints.items()}
        for stream in streams.values():
            stack.push_async_callback(stream.aclose)
        alice = endpoints["alice"]

        await alice.send(MessageInput(to="agent:bob", text="direct"))
        await alice.send(MessageInput(to="group:bob,carol", text="group"))
        asked = await alice.send(
            MessageInput(
                to="group:alice,bob,dave",
                text="Which day works?",
                collective=AskOperation(
                    op=CollectiveOp.GATHER, deadline=60, requested_schema=SCHEMA
                ),
            )
        )
        bob_items = [await receive(streams["bob"]) for _ in range(3)]
        assert [type(item) for item in bob_items] == [
            MulticastItem,
            MulticastItem,
            CollectiveRequestItem,
        ]
        assert isinstance(await receive(streams["dave"]), CollectiveRequestItem)
        for member, slot in (("bob", "tue"), ("dave", "mon")):
            await endpoints[member].send(
                ResponseInput(to="agent:alice", response=Accept(content={"slot": slot}))
            )
        result = await receive(streams["alice"])
        assert isinstance(result, CollectiveResultItem)
        assert result.id == asked.operation_id
        acknowledged = len(bob_items) + 2  # bob's three, dave's request, alice's result

        # Acknowledgments leave the client in batches: wait until the gateway counted all.
        await eventually(
            lambda: asyncio.to_thread(lambda: scrape_samples(scrape(gw))),
            lambda found: total(found, "harness_deliveries_acknowledged_total") == acknowledged,
        )
        # The read gauges refresh every few seconds; read them now, streams still open.
        await gw.gateway.components.gauges.refresh()
        exposition = await asyncio.to_thread(scrape, gw)
    return LiveScrape(
        exposition=exposition, samples=scrape_samples(exposition), acknowledged=acknowledged
    )


def issue_panel_queries() -> list[Query]:
    titles = {title for group in ISSUE_PANELS.values() for title in group}
    found = [(panel["title"], panel_queries(panel)) for panel in panels()]
    assert titles <= {title for title, _ in found}, titles - {title for title, _ in found}
    return [query for title, queries in found if title in titles for query in queries]


def test_the_dashboard_has_a_panel_for_each_entry_of_the_issue():
    titles = {panel["title"] for panel in panels()}
    for entry, shown_by in ISSUE_PANELS.items():
        assert set(shown_by) <= titles, entry


def test_every_metric_of_every_panel_variable_and_alert_is_exported(live: LiveScrape):
    labels = series_labels(live.exposition)
    assert unknown_metrics(all_queries(), labels) == []
    assert missing_labels(all_queries(), labels) == []


def test_the_issues_panels_select_live_samples_with_every_label_they_use(live: LiveScrape):
    problems = []
    for query in issue_panel_queries():
        used = {
            (use.metric, use.label) for use in query.label_uses if use.label not in SCRAPE_LABELS
        }
        for selector in query.selectors:
            selected = select(selector, live.samples)
            if not selected:
                problems.append((query.where, selector.metric, "no live sample"))
            for sample in selected:
                absent = {label for metric, label in used if metric == selector.metric} - set(
                    sample.labels
                )
                if absent:
                    problems.append((query.where, sample.name, f"lacks {sorted(absent)}"))
    assert problems == []


def test_the_first_query_of_each_of_the_issues_panels_shows_the_traffic(live: LiveScrape):
    flat = [
        (query.where, selector.metric)
        for query in issue_panel_queries()
        if query.where.endswith(" A")
        for selector in query.selectors
        if sum(sample.value for sample in select(selector, live.samples)) <= 0
    ]
    assert flat == []


def value(live: LiveScrape, name: str, **labels: str) -> float:
    return sum(
        sample.value
        for sample in live.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


def test_the_series_hold_what_the_traffic_did(live: LiveScrape):
    certified = "harness_certification_seconds_count"
    assert value(live, certified, op="multicast", kind="direct") == 1
    assert value(live, certified, op="multicast", kind="group") == 1
    # A gather asks each member in its direct conversation with the requester.
    assert value(live, certified, op="gather", kind="direct") == 2
    assert value(live, certified, op="answer", kind="direct") == 2
    assert value(live, "harness_sends_total", op="multicast", outcome="ok") == 2
    assert value(live, "harness_sends_total", op="gather", outcome="ok") == 1
    assert value(live, "harness_sends_total", op="answer", outcome="ok") == 2
    assert value(live, "harness_sends_total") == 5
    outcomes = "harness_collective_member_outcomes_total"
    assert value(live, outcomes, op="gather", outcome="answered") == 2
    assert value(live, "harness_deliveries_acknowledged_total") == live.acknowledged
    assert value(live, "harness_streams_active") == 3
    assert value(live, "harness_deliveries_unacknowledged", listener="detached") >= 1
    # Every hosted agent is counted under its Router feed's state, registered ones included.
    assert value(live, "harness_router_attachments", state="active") == len(AGENTS)
    assert value(live, "harness_router_attachments") == len(AGENTS)
    assert value(live, "harness_store_commit_batch_size_count", backend="sqlite") >= 1
    assert value(live, "harness_store_commit_batch_size_sum", backend="sqlite") >= value(
        live, "harness_store_commit_batch_size_count", backend="sqlite"
    )
