"""The dashboard's and the alert rules' queries read as PromQL syntax trees, for the unit
check against the metrics registry (`test_dashboard_and_rules.py`) and the live check against
a scraped gateway (`tests/integration/observability/test_dashboard_live.py`).

A Grafana query is not PromQL until Grafana has replaced its variables, so `substitute` does
that with values of the shape Grafana sends (a multi-value selection becomes a regex
alternation, `$__rate_interval` a duration) and refuses any variable it does not know: a
typo such as `$namspace` would otherwise reach Prometheus as a literal string and select
nothing. `read_query` then parses the result with `promql_parser` (the Prometheus grammar)
and walks the tree for what the checks need: each selector's metric and label matchers, and
every label an aggregation groups by or a binary operator joins on, tied to the selectors
beneath it. Regexes over the query text cannot tell a metric from a label value or see which
selector a `by (...)` applies to; the tree can.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import promql_parser
import yaml
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

ROOT: Final = Path(__file__).resolve().parents[3]
DASHBOARD: Final = ROOT / "deploy/grafana/dashboards/harness-gateway.json"
RULES: Final = ROOT / "deploy/prometheus/harness-gateway.rules.yaml"

NAMESPACE_VALUE: Final = "(harness|harness-canary)"
"""What Grafana puts for `$namespace` when two namespaces are selected (a multi-value
variable in a regex matcher becomes an alternation)."""

INSTANCE_REGEX: Final = r"(10\.0\.0\.7:9464|10\.0\.0\.8:9464)"
"""The regex `$instance` stands for with two instances selected."""

INSTANCE_VALUE: Final = INSTANCE_REGEX.replace("\\", "\\\\")
"""What Grafana puts for `$instance`: the Prometheus data source escapes regex metacharacters
with a doubled backslash, since a PromQL string reads `\\\\` as one (`INSTANCE_REGEX`)."""

GRAFANA_VALUES: Final[Mapping[str, str]] = {
    "__rate_interval": "1m",  # four 15 s scrape intervals: Grafana's floor for rate()
    "__interval": "30s",  # the step of a 6 h range over some 700 points
    "__range": "21600s",  # the dashboard's default range, now-6h to now, as Grafana writes it
    "namespace": NAMESPACE_VALUE,
    "instance": INSTANCE_VALUE,
}
"""Every variable a dashboard query may use, with the value Grafana would substitute."""

VARIABLE: Final = re.compile(
    r"\$\{(?P<braced>\w+)(?::[\w-]+)?\}|\[\[(?P<bracketed>\w+)(?::[\w-]+)?\]\]|\$(?P<bare>\w+)"
)
"""Grafana's three reference forms: `${name}` (or `${name:format}`), `[[name]]` (deprecated)
and `$name`."""

SCRAPE_LABELS: Final = frozenset({"namespace", "instance", "job"})
"""Labels Prometheus attaches at scrape time (target labels and the Kubernetes service
discovery's namespace); the gateway never exports them itself."""

SCRAPE_SERIES: Final[Mapping[str, frozenset[str]]] = {"up": frozenset()}
"""Series Prometheus synthesises for every target, with their own labels (besides the
scrape labels)."""

RANGE_FUNCTIONS: Final = frozenset({"rate", "irate", "increase"})
"""Functions that only make sense over a counter's samples."""


class UnknownVariable(ValueError):
    """A query names a Grafana variable that `GRAFANA_VALUES` does not define."""


def substitute(query: str, values: Mapping[str, str] = GRAFANA_VALUES) -> str:
    """`query` with every Grafana variable replaced as Grafana would; UnknownVariable for a
    variable without a value (a query Prometheus would receive with `$name` still in it)."""

    def replace(match: re.Match[str]) -> str:
        name = match["braced"] or match["bracketed"] or match["bare"]
        if name not in values:
            raise UnknownVariable(f"{match[0]} in {query!r} is not a variable of the dashboard")
        return values[name]

    return VARIABLE.sub(replace, query)


@dataclass(frozen=True, slots=True, kw_only=True)
class Selector:
    """One vector selector: the metric (sample) name and its label matchers."""

    metric: str | None
    """The sample name, from `name{...}` or `{__name__="name"}`; None when a regex picks it."""
    matchers: tuple[promql_parser.Matcher, ...]
    """Every label matcher but `__name__`, the `or` alternatives included."""

    @property
    def labels(self) -> frozenset[str]:
        """The labels the selector matches on."""
        return frozenset(matcher.name for matcher in self.matchers)

    def matcher(self, label: str) -> promql_parser.Matcher | None:
        """The matcher on `label`, if any."""
        return next((m for m in self.matchers if m.name == label), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelUse:
    """A label a query relies on a metric having."""

    metric: str | None
    label: str
    how: str
    """`matches` (a selector's matcher), `groups by` (an aggregation's `by`/`without`) or
    `joins on` (a binary operator's `on`/`ignoring`/`group_left`/`group_right`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Query:
    """One query as written and what its syntax tree selects."""

    where: str
    """`dashboard: <panel> <refId>`, `variable: <name>` or `alert: <name>`."""
    text: str
    """The query as written (before substitution)."""
    expr: promql_parser.Expr
    selectors: tuple[Selector, ...]
    label_uses: tuple[LabelUse, ...]
    ranged: tuple[tuple[str, str | None], ...]
    """(function, metric) for every `rate`, `irate` and `increase` over a selector."""

    @property
    def metrics(self) -> frozenset[str]:
        """Every metric the query names (a selector without a name adds none)."""
        return frozenset(s.metric for s in self.selectors if s.metric is not None)


def _nodes(expr: promql_parser.Expr) -> list[promql_parser.Expr]:
    found: list[promql_parser.Expr] = []

    def visit(node: promql_parser.Expr) -> bool:
        found.append(node)
        return True

    promql_parser.walk(expr, visit)
    return found


def _selector(node: promql_parser.VectorSelector) -> Selector:
    matchers = [*node.matchers.matchers]
    for alternative in node.matchers.or_matchers:
        matchers.extend(alternative)
    name = node.name
    named = [m for m in matchers if m.name == "__name__"]
    if name is None and len(named) == 1 and named[0].op == promql_parser.MatchOp.Equal:
        name = named[0].value
    return Selector(metric=name, matchers=tuple(m for m in matchers if m.name != "__name__"))


def selectors_of(expr: promql_parser.Expr) -> tuple[Selector, ...]:
    """Every vector selector in `expr` (those of range selectors included), in order."""
    return tuple(
        _selector(node) for node in _nodes(expr) if isinstance(node, promql_parser.VectorSelector)
    )


def _grouping_uses(node: promql_parser.Expr) -> Iterator[LabelUse]:
    if isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
        for selector in selectors_of(node.expr):
            for label in node.modifier.labels:
                yield LabelUse(metric=selector.metric, label=label, how="groups by")
    if isinstance(node, promql_parser.BinaryExpr) and node.modifier is not None:
        modifier = node.modifier
        if modifier.matching is not None:
            for side in (node.lhs, node.rhs):
                for selector in selectors_of(side):
                    for label in modifier.matching.labels:
                        yield LabelUse(metric=selector.metric, label=label, how="joins on")
        # group_left(...) copies labels from the right ("one") side, group_right from the left.
        one_side = (
            node.rhs
            if modifier.card == promql_parser.VectorMatchCardinality.ManyToOne
            else node.lhs
        )
        for selector in selectors_of(one_side):
            for label in modifier.group_labels or ():
                yield LabelUse(metric=selector.metric, label=label, how="joins on")


def _ranged(node: promql_parser.Expr) -> Iterator[tuple[str, str | None]]:
    if isinstance(node, promql_parser.Call) and node.func.name in RANGE_FUNCTIONS:
        for arg in node.args:
            if isinstance(arg, promql_parser.MatrixSelector):
                yield node.func.name, _selector(arg.vector_selector).metric


def read_query(where: str, text: str, values: Mapping[str, str] = GRAFANA_VALUES) -> Query:
    """Substitute Grafana's variables in `text`, parse it, and read its tree.

    Raises UnknownVariable, or promql_parser's ValueError for a query that does not parse."""
    expr = promql_parser.parse(substitute(text, values))
    nodes = _nodes(expr)
    selectors = selectors_of(expr)
    uses = [
        LabelUse(metric=selector.metric, label=label, how="matches")
        for selector in selectors
        for label in sorted(selector.labels)
    ]
    for node in nodes:
        uses.extend(_grouping_uses(node))
    ranged = [pair for node in nodes for pair in _ranged(node)]
    return Query(
        where=where,
        text=text,
        expr=expr,
        selectors=selectors,
        label_uses=tuple(dict.fromkeys(uses)),
        ranged=tuple(ranged),
    )


def quantiles(expr: promql_parser.Expr) -> list[tuple[float, frozenset[str], frozenset[str]]]:
    """(quantile, `by` labels, metrics) of every `histogram_quantile(q, sum by (...) (...))`."""
    found = []
    for node in _nodes(expr):
        if not (isinstance(node, promql_parser.Call) and node.func.name == "histogram_quantile"):
            continue
        q, inner = node.args
        assert isinstance(q, promql_parser.NumberLiteral), node
        assert isinstance(inner, promql_parser.AggregateExpr), node
        assert inner.modifier is not None, node
        assert inner.modifier.type == promql_parser.AggModifierType.By, node
        metrics = frozenset(s.metric for s in selectors_of(inner.expr) if s.metric is not None)
        found.append((q.val, frozenset(inner.modifier.labels), metrics))
    return found


# --- the dashboard and the rules --------------------------------------------------------------

LABEL_VALUES: Final = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$")
"""A Grafana variable query `label_values(<selector>, <label>)` (not PromQL itself)."""


def load_dashboard() -> dict[str, Any]:
    """The dashboard JSON."""
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def load_rules() -> list[dict[str, Any]]:
    """The rules of the one rule group."""
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    groups = document["groups"]
    assert len(groups) == 1
    rules: list[dict[str, Any]] = groups[0]["rules"]
    return rules


def panels() -> list[dict[str, Any]]:
    """The dashboard's panels, rows left out."""
    return [panel for panel in load_dashboard()["panels"] if panel["type"] != "row"]


def panel_queries(panel: Mapping[str, Any]) -> list[Query]:
    """The read queries of one panel, by target."""
    return [
        read_query(f"dashboard: {panel['title']} {target['refId']}", target["expr"])
        for target in panel["targets"]
    ]


def variable_queries() -> list[Query]:
    """The selector of each `label_values(...)` variable, read as a query that must have
    the label it lists."""
    found = []
    for variable in load_dashboard()["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = LABEL_VALUES.match(variable["definition"])
        assert match is not None, variable["definition"]
        query = read_query(f"variable: {variable['name']}", match["selector"])
        listed = [
            LabelUse(metric=s.metric, label=match["label"], how="lists") for s in query.selectors
        ]
        found.append(
            Query(
                where=query.where,
                text=query.text,
                expr=query.expr,
                selectors=query.selectors,
                label_uses=(*query.label_uses, *listed),
                ranged=query.ranged,
            )
        )
    return found


def rule_queries() -> list[Query]:
    """The expression of every alert. Prometheus substitutes nothing in `expr`, so no
    variable is allowed there."""
    return [read_query(f"alert: {rule['alert']}", rule["expr"], {}) for rule in load_rules()]


def all_queries() -> list[Query]:
    """Every panel target, variable selector and alert expression."""
    return [
        *(query for panel in panels() for query in panel_queries(panel)),
        *variable_queries(),
        *rule_queries(),
    ]


# --- what a process exports ---------------------------------------------------------------------


def series_labels(exposition: str) -> dict[str, frozenset[str]]:
    """Each sample name of an exposition (`_bucket`, `_total`, ... included) with the union of
    its label names."""
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    return {name: frozenset(names) for name, names in labels.items()}


def counter_samples(exposition: str) -> frozenset[str]:
    """The sample names `rate()` may read: counters' `_total` and histograms' `_bucket`,
    `_sum` and `_count`."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    return frozenset(
        sample.name
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name.endswith(suffixes.get(family.type, ()))
    )


def unknown_metrics(queries: Iterable[Query], exported: Iterable[str]) -> list[tuple[str, str]]:
    """(query place, metric) of every metric a query names that is neither exported nor a
    series Prometheus synthesises, and of every selector without a metric name."""
    names = set(exported) | set(SCRAPE_SERIES)
    return [
        (query.where, selector.metric or f"<no name: {query.text}>")
        for query in queries
        for selector in query.selectors
        if selector.metric not in names
    ]


def missing_labels(
    queries: Iterable[Query], labels: Mapping[str, frozenset[str]]
) -> list[tuple[str, str, str, str]]:
    """(query place, metric, label, how) of every label a query matches on, groups by or
    joins on that its metric does not have (scrape labels aside; metrics not in `labels` are
    `unknown_metrics`' to report)."""
    known = {**labels, **SCRAPE_SERIES}
    return [
        (query.where, use.metric, use.label, use.how)
        for query in queries
        for use in query.label_uses
        if use.metric in known
        and use.label not in SCRAPE_LABELS
        and use.label not in known[use.metric]
    ]


def _matches(matcher: promql_parser.Matcher, value: str) -> bool:
    # Prometheus anchors its regexes at both ends (RE2; the dashboard's are plain enough for `re`).
    if matcher.op == promql_parser.MatchOp.Equal:
        return value == matcher.value
    if matcher.op == promql_parser.MatchOp.NotEqual:
        return value != matcher.value
    matched = re.fullmatch(matcher.value, value) is not None
    return matched if matcher.op == promql_parser.MatchOp.Re else not matched


def select(selector: Selector, samples: Sequence[Sample]) -> list[Sample]:
    """The samples of a scrape that `selector` picks, its matchers on scrape labels aside
    (one process's own scrape carries none of them). An absent label is the empty string,
    as in Prometheus."""
    relevant = [m for m in selector.matchers if m.name not in SCRAPE_LABELS]
    return [
        sample
        for sample in samples
        if sample.name == selector.metric
        and all(_matches(m, sample.labels.get(m.name, "")) for m in relevant)
    ]


def scrape_samples(exposition: str) -> list[Sample]:
    """Every sample of an exposition."""
    return [
        sample for family in text_string_to_metric_families(exposition) for sample in family.samples
    ]
