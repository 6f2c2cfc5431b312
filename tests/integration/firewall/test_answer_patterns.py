"""Content patterns on answers over a real gateway (firewall.md §4): a rule searches each
key and value of an answer as the text it is, so the JSON escaping of a newline (`\\n`) or
a quote (`\\"`) no longer carries past it what it refuses in a message; outbound on the
answering agent's send, inbound on the asking agent's result. A question's form is searched
beside the question."""

from __future__ import annotations

import pytest
from harness_client import (
    Accept,
    Answered,
    AskOperation,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResultItem,
    FirewallRefusal,
    FirewallSendError,
    InboundDelivery,
    JsonValue,
    MessageInput,
    ResponseInput,
    Withheld,
)

from tests.integration.firewall.conftest import SCHEMA, Agent, firewalled, item_as, write_config

pytestmark = pytest.mark.timeout(120)

SECRET_PLAN = "the secret\nplan"
"""Refused as a message by `secret\\s+plan`; its JSON form is `"the secret\\nplan"`."""


async def ask(asker: Agent, to: str) -> str:
    sent = await asker.endpoint.send(
        MessageInput(
            to=to,
            text="Which plan?",
            collective=AskOperation(op=CollectiveOp.GATHER, deadline=30, requested_schema=SCHEMA),
        )
    )
    assert sent.operation_id is not None
    return sent.operation_id


async def result_of(agent: Agent) -> InboundDelivery:
    while True:
        delivery = await agent.next()
        if isinstance(delivery.item, CollectiveResultItem):
            return delivery


async def test_an_outbound_answer_is_refused_for_what_its_text_would_be_refused_for(tmp_path):
    config = write_config(
        tmp_path / "firewall.yaml",
        r"""
        version: 1
        middlewares:
          - id: secrets
            kind: content-pattern
            direction: out
            rules:
              - id: secret-plan
                pattern: 'secret\s+plan'
                action: refuse
                instruction: "do not share the plan"
              - id: quoted-no
                pattern: 'say "no"'
                action: refuse
                instruction: "do not refuse outright"
        """,
    )
    async with firewalled(config, "alice", "bob") as (_, agents):
        bob = agents["bob"].endpoint
        with pytest.raises(FirewallSendError):
            await bob.send(MessageInput(to="agent:alice", text=SECRET_PLAN))
        operation_id = await ask(agents["alice"], "agent:bob")
        request = item_as(await agents["bob"].next(), CollectiveRequestItem)
        for content, rule in (
            ({"plan": SECRET_PLAN}, "secret-plan"),
            ({"plan": 'I say "no"'}, "quoted-no"),
        ):
            with pytest.raises(FirewallSendError) as refused:
                await bob.send(ResponseInput(to=request.to, response=Accept(content=content)))
            assert refused.value.refusal is FirewallRefusal.CONTENT_BLOCKED
            assert refused.value.rule_id == rule
        # Nothing was sent, the request is still open, and a harmless answer passes.
        answered = await bob.send(
            ResponseInput(to=request.to, response=Accept(content={"plan": "the public plan"}))
        )
        assert answered.operation_id == operation_id
        result = item_as(await result_of(agents["alice"]), CollectiveResultItem)
        assert result.outcomes[0].outcome == Answered(content={"plan": "the public plan"})


async def test_an_inbound_results_answer_is_withheld_for_a_value_its_json_used_to_hide(tmp_path):
    config = write_config(
        tmp_path / "firewall.yaml",
        r"""
        version: 1
        middlewares:
          - id: alices-filter
            kind: content-pattern
            agents: ["alice"]
            direction: in
            rules:
              - id: secret-plan
                pattern: 'secret\s+plan'
                action: withhold
                instruction: "alice may not read the plan"
        """,
    )
    async with firewalled(config, "alice", "bob", "carol") as (_, agents):
        operation_id = await ask(agents["alice"], "group:bob,carol")
        for name, plan in (("bob", SECRET_PLAN), ("carol", "plan B")):
            request = item_as(await agents[name].next(), CollectiveRequestItem)
            await agents[name].endpoint.send(
                ResponseInput(to=request.to, response=Accept(content={"plan": plan}))
            )
        result = item_as(await result_of(agents["alice"]), CollectiveResultItem)
        assert result.id == operation_id
        outcomes = {r.member: r.outcome for r in result.outcomes}
        withheld = outcomes["agent:bob"]
        assert isinstance(withheld, Withheld)
        assert withheld.reason is FirewallRefusal.CONTENT_BLOCKED
        assert outcomes["agent:carol"] == Answered(content={"plan": "plan B"})


async def test_a_gather_is_refused_for_what_its_forms_texts_say(tmp_path):
    config = write_config(
        tmp_path / "firewall.yaml",
        r"""
        version: 1
        middlewares:
          - id: secrets
            kind: content-pattern
            rules:
              - id: secret-plan
                pattern: 'secret\s+plan'
                action: refuse
                instruction: "do not share the plan"
        """,
    )
    hidden: dict[str, JsonValue] = {
        "type": "object",
        "properties": {"slot": {"type": "string", "description": SECRET_PLAN}},
        "required": ["slot"],
    }
    async with firewalled(config, "alice", "bob") as (_, agents):
        with pytest.raises(FirewallSendError) as refused:
            await agents["alice"].endpoint.send(
                MessageInput(
                    to="agent:bob",
                    text="Which slot?",
                    collective=AskOperation(
                        op=CollectiveOp.GATHER, deadline=30, requested_schema=hidden
                    ),
                )
            )
        assert refused.value.rule_id == "secret-plan"
        # The guidance shows the question, as ever; a harmless form is asked.
        assert refused.value.guidance.subjects[0].text == "Which slot?"
        assert await ask(agents["alice"], "agent:bob")
