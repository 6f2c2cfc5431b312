"""The firewall file (firewall.md §4.1): what it becomes, and every way it is refused.

Each refusal is checked by its `line:col: message`, so a problem pointing at the wrong
place fails here as surely as a problem not found.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.firewall.config import (
    EMPTY_FILE,
    MAX_FILE_BYTES,
    FirewallConfigError,
    load_firewall,
    parse_firewall,
)
from gateway.firewall.spec import (
    ContentPatternSpec,
    Directions,
    ExternalSpec,
    FirewallSpec,
    OnError,
    PatternAction,
    PatternMatch,
    PatternRule,
    RateAction,
    RateLimitSpec,
    RecipientPolicySpec,
    RecipientRule,
    RuleAction,
    TurnGuidanceSpec,
)

EXAMPLE = """\
version: 1
content_logging: false            # log checked text (off by default)
middlewares:                      # run in this order
  - id: tenants                   # middlewareId in guidance and errors; unique
    kind: recipient-policy
    agents: ["*"]                 # whose sends this middleware checks (name globs)
    rules:                        # first match decides; no match = allow
      - id: acme-only
        from: ["acme-*"]          # sender name globs
        to: ["acme-*", "ops-*"]   # every recipient must match one glob
        action: allow
      - id: acme-out
        from: ["acme-*"]
        action: deny              # -> forbidden-recipient
        instruction: "acme agents may only message acme and ops agents"
  - id: flood
    kind: rate-limit
    agents: ["*"]
    rate_per_minute: 120
    burst: 20
    action: refuse                # or guide (a `wait` instruction saying until when)
  - id: secrets
    kind: content-pattern
    agents: ["*"]
    direction: out                # out | in | both
    rules:
      - id: aws-key
        pattern: "AKIA[0-9A-Z]{16}"   # RE2 syntax
        action: refuse            # out: refuse | flag; in: withhold | drop | flag
        instruction: "do not send credentials"
  - id: turns
    kind: turn-guidance
    agents: ["*"]
  - id: classifier
    kind: external
    agents: ["*"]
    direction: both
    target: grpc://127.0.0.1:7790  # grpcs:// with tls_ca for TLS
    deadline_ms: 200
    on_error: allow               # allow (fail open, noted in an instruction) | refuse
"""


def write(tmp_path: Path, text: str, name: str = "firewall.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load(tmp_path: Path, text: str) -> FirewallSpec:
    return load_firewall(write(tmp_path, text))


def problems(tmp_path: Path, text: str) -> list[str]:
    """The `line:col: message` problems of `text`, the file's path stripped."""
    path = write(tmp_path, text)
    with pytest.raises(FirewallConfigError) as raised:
        load_firewall(path)
    prefix = f"{path}:"
    assert all(problem.startswith(prefix) for problem in raised.value.problems)
    return [problem.removeprefix(prefix) for problem in raised.value.problems]


def only_problem(tmp_path: Path, text: str) -> str:
    found = problems(tmp_path, text)
    assert len(found) == 1, found
    return found[0]


def one_middleware(body: str) -> str:
    """A file holding one middleware whose keys are `body` (indented under `- `)."""
    lines = textwrap.dedent(body).strip("\n").splitlines()
    item = "\n".join(["  - " + lines[0], *("    " + line for line in lines[1:])])
    return f"version: 1\nmiddlewares:\n{item}\n"


# --- what a valid file becomes ---------------------------------------------------------------


def test_the_design_example_parses_into_the_expected_spec(tmp_path):
    path = write(tmp_path, EXAMPLE)
    assert load_firewall(path) == FirewallSpec(
        source=path,
        content_logging=False,
        middlewares=(
            RecipientPolicySpec(
                id="tenants",
                agents=("*",),
                rules=(
                    RecipientRule(
                        id="acme-only",
                        senders=("acme-*",),
                        recipients=("acme-*", "ops-*"),
                        action=RuleAction.ALLOW,
                        instruction="",
                    ),
                    RecipientRule(
                        id="acme-out",
                        senders=("acme-*",),
                        recipients=None,
                        action=RuleAction.DENY,
                        instruction="acme agents may only message acme and ops agents",
                    ),
                ),
            ),
            RateLimitSpec(
                id="flood",
                agents=("*",),
                rate_per_minute=120.0,
                burst=20,
                action=RateAction.REFUSE,
                instruction=None,
            ),
            ContentPatternSpec(
                id="secrets",
                agents=("*",),
                direction=Directions.OUT,
                rules=(
                    PatternRule(
                        id="aws-key",
                        pattern="AKIA[0-9A-Z]{16}",
                        action=PatternAction.REFUSE,
                        instruction="do not send credentials",
                    ),
                ),
            ),
            TurnGuidanceSpec(id="turns", agents=("*",)),
            ExternalSpec(
                id="classifier",
                agents=("*",),
                direction=Directions.BOTH,
                target="127.0.0.1:7790",
                tls=False,
                tls_ca=None,
                deadline_ms=200,
                on_error=OnError.ALLOW,
            ),
        ),
    )


def test_parse_firewall_reads_text_and_names_the_given_source():
    source = Path("/etc/harness/firewall.yaml")
    spec = parse_firewall(EXAMPLE, source)
    assert spec.source == source
    assert [m.id for m in spec.middlewares] == [
        "tenants",
        "flood",
        "secrets",
        "turns",
        "classifier",
    ]


def test_an_explicit_empty_list_is_an_empty_pipeline(tmp_path):
    spec = load(tmp_path, "version: 1\nmiddlewares: []\n")
    assert spec.middlewares == ()
    assert spec.content_logging is False


@pytest.mark.parametrize("text", ["", "\n\n", "# nothing configured yet\n"])
def test_an_empty_file_is_refused_as_cut_short_naming_the_explicit_empty_list(tmp_path, text):
    assert only_problem(tmp_path, text) == f"1:1: {EMPTY_FILE}"
    assert "'middlewares: []' runs no middleware" in EMPTY_FILE


def test_a_file_without_middlewares_is_refused_as_cut_short(tmp_path):
    assert only_problem(tmp_path, "version: 1\ncontent_logging: true\n") == (
        "1:1: the file: missing required key 'middlewares' (a file cut short?); "
        "'middlewares: []' runs no middleware"
    )


def test_middlewares_cut_off_after_the_key_is_refused(tmp_path):
    assert only_problem(tmp_path, "version: 1\nmiddlewares:\n") == (
        "3:1: middlewares: should be a valid list (got null)"
    )


def test_no_cut_of_a_policy_reads_as_a_policy_of_no_middlewares():
    """Whatever byte an interrupted write stops at, what is left is refused or still has
    middlewares: a cut file never silently removes the whole policy. (A cut that leaves a
    valid file with fewer middlewares or a shorter value cannot be told from an edit;
    the user guide, docs/firewall.md, says to write the file atomically.)"""
    policy = textwrap.dedent(
        """\
        version: 1
        content_logging: false
        middlewares:
          - id: secrets
            kind: content-pattern
            rules:
              - {id: key, pattern: "AKIA", action: refuse, instruction: "no keys"}
        """
    )
    emptied = []
    for cut in range(len(policy)):
        try:
            spec = parse_firewall(policy[:cut], Path("firewall.yaml"))
        except FirewallConfigError:
            continue
        if not spec.middlewares:
            emptied.append(cut)
    assert emptied == []


def test_content_logging_can_be_turned_on(tmp_path):
    text = "version: 1\ncontent_logging: true\nmiddlewares: []\n"
    assert load(tmp_path, text).content_logging is True


def test_omitted_keys_take_their_documented_defaults(tmp_path):
    spec = load(
        tmp_path,
        """\
        version: 1
        middlewares:
          - id: policy
            kind: recipient-policy
            rules:
              - {id: open, action: allow}
          - {id: rate, kind: rate-limit, rate_per_minute: 0.5, burst: 1}
          - id: patterns
            kind: content-pattern
            rules:
              - {id: p, pattern: "x", action: flag, instruction: "x seen"}
          - {id: turns, kind: turn-guidance}
          - {id: ext, kind: external, target: "grpc://classifier.internal:7790"}
        """,
    )
    policy, rate, patterns, turns, ext = spec.middlewares
    assert policy == RecipientPolicySpec(
        id="policy",
        agents=("*",),
        rules=(
            RecipientRule(
                id="open", senders=("*",), recipients=None, action=RuleAction.ALLOW, instruction=""
            ),
        ),
    )
    assert rate == RateLimitSpec(
        id="rate",
        agents=("*",),
        rate_per_minute=0.5,
        burst=1,
        action=RateAction.REFUSE,
        instruction=None,
    )
    assert isinstance(patterns, ContentPatternSpec)
    assert patterns.direction is Directions.OUT
    assert turns == TurnGuidanceSpec(id="turns", agents=("*",))
    assert ext == ExternalSpec(
        id="ext",
        agents=("*",),
        direction=Directions.BOTH,
        target="classifier.internal:7790",
        tls=False,
        tls_ca=None,
        deadline_ms=200,
        on_error=OnError.ALLOW,
    )


def test_yaml_1_2_keeps_no_and_yes_as_strings(tmp_path):
    spec = load(
        tmp_path,
        """\
        version: 1
        middlewares:
          - id: no
            kind: turn-guidance
            agents: [yes, off]
        """,
    )
    assert spec.middlewares == (TurnGuidanceSpec(id="no", agents=("yes", "off")),)


def test_a_yes_where_a_bool_is_wanted_is_a_string_and_refused(tmp_path):
    assert only_problem(tmp_path, "version: 1\ncontent_logging: yes\nmiddlewares: []\n") == (
        "2:18: content_logging: should be a valid boolean (got the string 'yes')"
    )


def test_grpcs_targets_use_tls_with_a_ca_relative_to_the_file(tmp_path):
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n", encoding="utf-8")
    spec = load(
        tmp_path,
        one_middleware(
            """\
            id: ext
            kind: external
            direction: in
            target: grpcs://[::1]:443
            tls_ca: certs/ca.pem
            deadline_ms: 60000
            on_error: refuse
            """
        ),
    )
    assert spec.middlewares == (
        ExternalSpec(
            id="ext",
            agents=("*",),
            direction=Directions.IN,
            target="[::1]:443",
            tls=True,
            tls_ca=(tmp_path / "certs" / "ca.pem").absolute(),
            deadline_ms=60000,
            on_error=OnError.REFUSE,
        ),
    )


def test_a_pattern_catastrophic_in_a_backtracking_engine_is_fine_in_re2(tmp_path):
    spec = load(
        tmp_path,
        one_middleware(
            """\
            id: p
            kind: content-pattern
            direction: in
            rules:
              - {id: nested, pattern: "(a+)+$", action: withhold, instruction: "x"}
            """
        ),
    )
    (middleware,) = spec.middlewares
    assert isinstance(middleware, ContentPatternSpec)
    assert middleware.rules[0].pattern == "(a+)+$"
    assert middleware.rules[0].action is PatternAction.WITHHOLD


@pytest.mark.parametrize(
    "glob", ["*", "acme-*", "ops-?", "agent-[a-c]", "[!x]*", "team-[0-9][0-9]", "a" * 64]
)
def test_globs_of_names_wildcards_and_classes_are_accepted(tmp_path, glob):
    spec = load(tmp_path, one_middleware(f'id: t\nkind: turn-guidance\nagents: ["{glob}"]'))
    assert spec.middlewares[0].agents == (glob,)


# --- where a refusal points ----------------------------------------------------------------


def test_an_unknown_top_level_key_points_at_the_key_and_lists_the_allowed_ones(tmp_path):
    assert only_problem(tmp_path, "version: 1\ncolour: red\nmiddlewares: []\n") == (
        "2:1: colour: unknown key 'colour'; allowed keys: version, content_logging, middlewares"
    )


def test_an_unknown_key_in_a_rule_lists_that_rule_kinds_keys(tmp_path):
    text = one_middleware(
        """\
        id: p
        kind: recipient-policy
        rules:
          - id: r
            action: allow
            senders: ["a*"]
        """
    )
    assert only_problem(tmp_path, text) == (
        "8:9: middlewares[0].rules[0].senders: unknown key 'senders'; "
        "allowed keys: id, from, to, action, instruction"
    )


def test_turn_guidance_accepts_only_id_kind_and_agents(tmp_path):
    text = one_middleware("id: t\nkind: turn-guidance\ndirection: in")
    assert only_problem(tmp_path, text) == (
        "5:5: middlewares[0].direction: unknown key 'direction'; allowed keys: id, kind, agents"
    )


def test_a_missing_key_points_at_the_mapping_that_lacks_it(tmp_path):
    text = one_middleware("kind: rate-limit\nrate_per_minute: 10\nburst: 5")
    assert only_problem(tmp_path, text) == "3:5: middlewares[0]: missing required key 'id'"


def test_a_missing_version_is_refused(tmp_path):
    assert only_problem(tmp_path, "middlewares: []\n") == (
        "1:1: the file: missing required key 'version'"
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("2", "version: version 2 is not supported; the only version is 1"),
        ("true", "version: should be a valid integer (got true)"),
        ('"1"', "version: should be a valid integer (got the string '1')"),
    ],
)
def test_the_version_must_be_the_integer_1(tmp_path, value, message):
    assert only_problem(tmp_path, f"version: {value}\nmiddlewares: []\n") == f"1:10: {message}"


def test_an_unknown_kind_is_one_problem_naming_the_five_kinds(tmp_path):
    text = one_middleware("id: x\nkind: firewall\nrules: []\nbogus: 1")
    assert only_problem(tmp_path, text) == (
        "4:11: middlewares[0].kind: unknown kind 'firewall'; allowed kinds: "
        "recipient-policy, rate-limit, content-pattern, turn-guidance, external"
    )


def test_a_missing_kind_is_one_problem_at_the_middleware(tmp_path):
    problem = only_problem(tmp_path, one_middleware("id: x\nagents: ['*']"))
    assert problem.startswith("3:5: middlewares[0]: missing required key 'kind'")


def test_a_middleware_that_is_not_a_mapping_is_refused(tmp_path):
    assert only_problem(tmp_path, "version: 1\nmiddlewares:\n  - turns\n") == (
        "3:5: middlewares[0]: should be a mapping, not the string 'turns'"
    )


def test_a_duplicate_middleware_id_points_at_the_second_one(tmp_path):
    text = """\
    version: 1
    middlewares:
      - {id: turns, kind: turn-guidance}
      - {id: other, kind: turn-guidance}
      - id: turns
        kind: turn-guidance
    """
    assert only_problem(tmp_path, text) == (
        "5:9: middlewares[2].id: duplicate middleware id 'turns' (first used by middlewares[0])"
    )


def test_a_duplicate_rule_id_within_a_middleware_points_at_the_second_one(tmp_path):
    text = one_middleware(
        """\
        id: p
        kind: content-pattern
        rules:
          - {id: r, pattern: a, action: flag, instruction: x}
          - {id: r, pattern: b, action: flag, instruction: y}
        """
    )
    assert only_problem(tmp_path, text) == (
        "7:14: middlewares[0].rules[1].id: duplicate rule id 'r' (first used by middlewares[0].rules[0])"
    )


def test_the_same_rule_id_in_two_middlewares_is_allowed(tmp_path):
    text = """\
    version: 1
    middlewares:
      - {id: a, kind: recipient-policy, rules: [{id: r, action: allow}]}
      - {id: b, kind: recipient-policy, rules: [{id: r, action: allow}]}
    """
    assert len(load(tmp_path, text).middlewares) == 2


@pytest.mark.parametrize("bad_id", ["Tenants", "-lead", ".x", "a b", "x" * 65, "é", '""'], ids=repr)
def test_ids_outside_the_grammar_are_refused(tmp_path, bad_id):
    problem = only_problem(tmp_path, one_middleware(f"id: {bad_id}\nkind: turn-guidance"))
    assert problem.startswith("3:9: middlewares[0].id: bad id ")


@pytest.mark.parametrize(
    ("glob", "why"),
    [
        ("Acme-*", "'A' is not allowed"),
        ("acme_x", "'_' is not allowed"),
        ("", "it is empty"),
        ("a" * 65, "it is longer than 64 characters"),
        ("[a-c", "'[' is not closed"),
        ("a]", "']' without an opening '['"),
        ("[]", "an empty [] class"),
        ("[!]", "an empty [] class"),
        ("[a[b]]", "'[' inside a [...] class (classes do not nest)"),
        ("!a", "'!' outside a [...] class (it only negates one, as in [!a])"),
        ("[a*]", "'*' inside a [...] class"),
    ],
)
def test_bad_globs_are_refused_with_the_reason(tmp_path, glob, why):
    problem = only_problem(
        tmp_path, one_middleware(f'id: t\nkind: turn-guidance\nagents: ["{glob}"]')
    )
    assert problem.startswith(f"5:14: middlewares[0].agents[0]: bad glob {glob!r}: {why}; ")


def test_an_empty_agents_list_is_refused(tmp_path):
    text = one_middleware("id: t\nkind: turn-guidance\nagents: []")
    assert only_problem(tmp_path, text) == "5:13: middlewares[0].agents: should be a non-empty list"


def test_a_glob_that_is_not_a_string_is_refused(tmp_path):
    text = one_middleware("id: t\nkind: turn-guidance\nagents: [7]")
    assert only_problem(tmp_path, text) == (
        "5:14: middlewares[0].agents[0]: should be a valid string (got 7)"
    )


def test_a_deny_rule_without_an_instruction_points_at_the_rule(tmp_path):
    text = one_middleware(
        """\
        id: p
        kind: recipient-policy
        rules:
          - id: nope
            from: ["x-*"]
            action: deny
        """
    )
    assert only_problem(tmp_path, text) == (
        "6:9: middlewares[0].rules[0]: a deny rule needs an 'instruction' "
        "(the text the refused sender sees)"
    )


def test_an_instruction_over_1000_characters_is_refused(tmp_path):
    text = one_middleware(
        f"id: p\nkind: recipient-policy\nrules:\n  - {{id: r, action: deny, instruction: {'x' * 1001}}}"
    )
    problem = only_problem(tmp_path, text)
    assert problem.startswith(
        "6:44: middlewares[0].rules[0].instruction: String should have at most 1000 characters"
    )


def test_a_recipient_policy_needs_at_least_one_rule(tmp_path):
    text = one_middleware("id: p\nkind: recipient-policy\nrules: []")
    assert only_problem(tmp_path, text) == "5:12: middlewares[0].rules: should be a non-empty list"


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("(?<=x)a", "invalid perl operator: (?<="),
        ("a{1001}", "invalid repetition size: {1001}"),
        ("[unclosed", "missing ]: [unclosed"),
    ],
)
def test_a_pattern_re2_rejects_is_refused_with_re2s_message(tmp_path, pattern, reason):
    text = one_middleware(
        f"""\
        id: p
        kind: content-pattern
        rules:
          - id: r
            pattern: "{pattern}"
            action: flag
            instruction: x
        """
    )
    assert only_problem(tmp_path, text) == (
        f"7:18: middlewares[0].rules[0].pattern: RE2 rejects the pattern: {reason}"
    )


def test_a_pattern_over_4096_characters_is_refused(tmp_path):
    text = one_middleware(
        f"id: p\nkind: content-pattern\nrules:\n  - {{id: r, pattern: {'a' * 4097}, action: flag, instruction: x}}"
    )
    assert "String should have at most 4096 characters" in only_problem(tmp_path, text)


@pytest.mark.parametrize(
    ("direction", "action", "allowed"),
    [
        ("out", "withhold", "refuse, flag"),
        ("out", "drop", "refuse, flag"),
        ("in", "refuse", "withhold, drop, flag"),
        ("both", "deny", "refuse, withhold, drop, flag"),
    ],
)
def test_a_pattern_action_the_direction_does_not_allow_names_direction_and_allowed_set(
    tmp_path, direction, action, allowed
):
    text = one_middleware(
        f"""\
        id: p
        kind: content-pattern
        direction: {direction}
        rules:
          - {{id: r, pattern: x, action: {action}, instruction: x}}
        """
    )
    assert only_problem(tmp_path, text) == (
        f"7:37: middlewares[0].rules[0].action: action {action!r} is not allowed "
        f"for direction {direction!r}; allowed: {allowed}"
    )


@pytest.mark.parametrize(
    ("direction", "action"),
    [("out", "refuse"), ("out", "flag"), ("in", "drop"), ("both", "refuse"), ("both", "withhold")],
)
def test_each_direction_accepts_its_actions(tmp_path, direction, action):
    text = one_middleware(
        f"id: p\nkind: content-pattern\ndirection: {direction}\n"
        f"rules: [{{id: r, pattern: x, action: {action}, instruction: x}}]"
    )
    (middleware,) = load(tmp_path, text).middlewares
    assert isinstance(middleware, ContentPatternSpec)
    assert middleware.rules[0].action == PatternAction(action)


def test_a_pattern_rule_matches_text_values_unless_it_asks_for_the_json(tmp_path):
    spec = load(
        tmp_path,
        one_middleware(
            """\
            id: p
            kind: content-pattern
            rules:
              - {id: words, pattern: "x", action: refuse, instruction: "no"}
              - {id: raw, pattern: "x", action: refuse, instruction: "no", match: json}
              - {id: said, pattern: "x", action: refuse, instruction: "no", match: text}
            """
        ),
    )
    [middleware] = spec.middlewares
    assert isinstance(middleware, ContentPatternSpec)
    assert [rule.match for rule in middleware.rules] == [
        PatternMatch.TEXT,
        PatternMatch.JSON,
        PatternMatch.TEXT,
    ]


def test_a_pattern_match_other_than_text_or_json_is_refused(tmp_path):
    text = one_middleware(
        """\
        id: p
        kind: content-pattern
        rules:
          - {id: r, pattern: "x", action: refuse, instruction: "no", match: keys}
        """
    )
    assert only_problem(tmp_path, text) == (
        "6:73: middlewares[0].rules[0].match: should be 'text' or 'json' (got the string 'keys')"
    )


def test_an_unknown_direction_is_refused_with_the_allowed_ones(tmp_path):
    text = one_middleware(
        "id: p\nkind: content-pattern\ndirection: sideways\n"
        "rules: [{id: r, pattern: x, action: flag, instruction: x}]"
    )
    assert only_problem(tmp_path, text) == (
        "5:16: middlewares[0].direction: should be 'out', 'in' or 'both' (got the string 'sideways')"
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ("rate_per_minute: 0\nburst: 1", "rate_per_minute: should be greater than 0 (got 0)"),
        ("rate_per_minute: -5\nburst: 1", "rate_per_minute: should be greater than 0 (got -5)"),
        (
            "rate_per_minute: 1000001\nburst: 1",
            "rate_per_minute: should be less than or equal to 1000000 (got 1000001)",
        ),
        ("rate_per_minute: .inf\nburst: 1", "rate_per_minute: should be a finite number (got inf)"),
        (
            'rate_per_minute: "120"\nburst: 1',
            "rate_per_minute: should be a valid number (got the string '120')",
        ),
        ("rate_per_minute: true\nburst: 1", "rate_per_minute: should be a valid number (got true)"),
        ("rate_per_minute: 1\nburst: 0", "burst: should be greater than or equal to 1 (got 0)"),
        ("rate_per_minute: 1\nburst: 2.5", "burst: should be a valid integer (got 2.5)"),
        ("rate_per_minute: 1\nburst: true", "burst: should be a valid integer (got true)"),
        ("rate_per_minute: 1\nburst: 1\naction: wait", "action: should be 'refuse' or 'guide'"),
    ],
)
def test_rate_limit_numbers_are_strict_and_in_range(tmp_path, fields, message):
    problem = only_problem(tmp_path, one_middleware(f"id: r\nkind: rate-limit\n{fields}"))
    assert f": middlewares[0].{message}" in problem


def test_an_anchored_bool_is_not_taken_for_an_integer(tmp_path):
    # ruamel's round-trip loader makes an anchored `true` an int subclass.
    text = one_middleware("id: r\nkind: rate-limit\nrate_per_minute: 1\nburst: &yes true")
    assert (
        only_problem(tmp_path, text)
        == "6:12: middlewares[0].burst: should be a valid integer (got true)"
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ("deadline_ms: true", "deadline_ms: should be a valid integer (got true)"),
        ("deadline_ms: 0", "deadline_ms: should be greater than or equal to 1 (got 0)"),
        ("deadline_ms: 60001", "deadline_ms: should be less than or equal to 60000 (got 60001)"),
        ("on_error: ignore", "on_error: should be 'allow' or 'refuse' (got the string 'ignore')"),
    ],
)
def test_external_numbers_and_choices_are_checked(tmp_path, fields, message):
    text = one_middleware(f"id: e\nkind: external\ntarget: grpc://h:1\n{fields}")
    assert (
        only_problem(tmp_path, text)
        == f"6:{len(fields.split(':')[0]) + 7}: middlewares[0].{message}"
    )


@pytest.mark.parametrize(
    "target",
    [
        "http://h:80",
        "grpc://h",
        "grpc://:80",
        "grpc://h:0",
        "grpc://h:65536",
        "grpc://h:80/x",
        "h:80",
    ],
)
def test_a_target_that_is_not_grpc_host_port_is_refused(tmp_path, target):
    text = one_middleware(f"id: e\nkind: external\ntarget: {target}")
    assert only_problem(tmp_path, text) == (
        f"5:13: middlewares[0].target: bad target {target!r}: "
        "use grpc://host:port or grpcs://host:port (port 1 to 65535)"
    )


def test_tls_ca_is_refused_with_a_plaintext_target(tmp_path):
    (tmp_path / "ca.pem").write_text("x", encoding="utf-8")
    text = one_middleware("id: e\nkind: external\ntarget: grpc://h:1\ntls_ca: ca.pem")
    assert only_problem(tmp_path, text) == (
        "6:5: middlewares[0].tls_ca: tls_ca is only allowed with a grpcs:// target"
    )


def test_a_tls_ca_that_does_not_exist_is_refused(tmp_path):
    text = one_middleware("id: e\nkind: external\ntarget: grpcs://h:1\ntls_ca: missing.pem")
    assert only_problem(tmp_path, text) == (
        f"6:13: middlewares[0].tls_ca: no file at {str(tmp_path / 'missing.pem')!r}"
    )


def test_several_problems_are_all_reported_in_file_order(tmp_path):
    text = """\
    version: 1
    extra: 1
    middlewares:
      - id: BAD
        kind: rate-limit
        rate_per_minute: 0
        burst: "5"
      - id: p
        kind: recipient-policy
        rules:
          - {id: r, to: ["Ops"], action: deny}
    """
    assert problems(tmp_path, text) == [
        "2:1: extra: unknown key 'extra'; allowed keys: version, content_logging, middlewares",
        "4:9: middlewares[0].id: bad id 'BAD': use 1 to 64 of a-z, 0-9, '.', '_', '-', "
        "starting with a letter or digit",
        "6:22: middlewares[0].rate_per_minute: should be greater than 0 (got 0)",
        "7:12: middlewares[0].burst: should be a valid integer (got the string '5')",
        "11:9: middlewares[1].rules[0]: a deny rule needs an 'instruction' "
        "(the text the refused sender sees)",
        "11:22: middlewares[1].rules[0].to[0]: bad glob 'Ops': 'O' is not allowed; a glob is "
        "1 to 64 of a-z, 0-9, '-', '*', '?' and [...] classes such as [a-c] or [!x]",
    ]


def test_the_error_text_is_its_problems_one_per_line(tmp_path):
    path = write(tmp_path, "version: 2\nx: 1\nmiddlewares: []\n")
    with pytest.raises(FirewallConfigError) as raised:
        load_firewall(path)
    assert len(raised.value.problems) == 2
    assert str(raised.value) == "\n".join(raised.value.problems)


# --- YAML and file problems ---------------------------------------------------------------


def test_a_duplicate_key_is_refused_at_the_second_one(tmp_path):
    text = one_middleware("id: t\nkind: turn-guidance\nid: u")
    problem = only_problem(tmp_path, text)
    assert problem.startswith("5:5: ")
    assert 'duplicate key "id"' in problem


def test_a_yaml_syntax_error_names_its_line_and_column(tmp_path):
    problem = only_problem(tmp_path, "version: 1\nmiddlewares: [\n  {id: a\n")
    assert problem.startswith("4:1: ")
    assert "flow" in problem


def test_a_scanner_error_points_at_the_offending_character(tmp_path):
    assert only_problem(tmp_path, "version: 1\nmiddlewares: a: b\n").startswith(
        "2:15: mapping values are not allowed here"
    )


def test_a_file_that_is_not_a_mapping_is_refused(tmp_path):
    assert (
        only_problem(tmp_path, "- version: 1\n") == "1:1: the file: should be a mapping, not a list"
    )


def test_a_missing_file_cannot_be_read(tmp_path):
    path = tmp_path / "absent.yaml"
    with pytest.raises(FirewallConfigError) as raised:
        load_firewall(path)
    assert raised.value.problems == (f"{path}: cannot read (No such file or directory)",)


def test_a_directory_cannot_be_read(tmp_path):
    with pytest.raises(FirewallConfigError) as raised:
        load_firewall(tmp_path)
    assert raised.value.problems[0].startswith(f"{tmp_path}: cannot read (")


def test_a_file_over_1_mib_is_refused_before_parsing(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_bytes(b"version: 1\n" + b"#" * MAX_FILE_BYTES)
    with pytest.raises(FirewallConfigError) as raised:
        load_firewall(path)
    assert raised.value.problems == (f"{path}: cannot read (larger than 1048576 bytes)",)


def test_a_file_of_exactly_1_mib_is_read(tmp_path):
    path = tmp_path / "full.yaml"
    head = b"version: 1\nmiddlewares: []\n#"
    path.write_bytes(head + b"x" * (MAX_FILE_BYTES - len(head) - 1) + b"\n")
    assert path.stat().st_size == MAX_FILE_BYTES
    assert load_firewall(path).middlewares == ()


def test_a_file_that_is_not_utf8_cannot_be_read(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("version: 1\n# caf\u00e9\n".encode("latin-1"))
    with pytest.raises(FirewallConfigError) as raised:
        load_firewall(path)
    assert raised.value.problems == (f"{path}: cannot read (not UTF-8: byte 16 is invalid)",)


def test_keys_that_are_not_strings_are_refused_at_the_key(tmp_path):
    text = one_middleware("id: t\nkind: turn-guidance\n7: x\nnull: y\n? [a]\n: z")
    assert problems(tmp_path, text) == [
        "5:5: middlewares[0]: key 7 is not a string",
        "6:5: middlewares[0]: key null is not a string",
        "7:7: middlewares[0]: key a list is not a string",
    ]


def test_a_mapping_key_does_not_crash_the_reader(tmp_path):
    assert only_problem(tmp_path, "version: 1\n? {a: 1}\n: x\nmiddlewares: []\n") == (
        "2:3: the file: key a mapping is not a string"
    )


def test_merge_keys_are_followed(tmp_path):
    text = """\
    version: 1
    middlewares:
      - &common {id: a, kind: turn-guidance, agents: ["acme-*"]}
      - <<: *common
        id: b
    """
    assert load(tmp_path, text).middlewares == (
        TurnGuidanceSpec(id="a", agents=("acme-*",)),
        TurnGuidanceSpec(id="b", agents=("acme-*",)),
    )


# --- garbage ---------------------------------------------------------------------------------

_YAML_BITS = st.sampled_from(
    [
        "version: 1\n",
        "middlewares:\n",
        "  - id: a\n",
        "    kind: rate-limit\n",
        "    kind: content-pattern\n",
        "    rules:\n",
        "      - id: r\n",
        "        pattern: '(a+)+$'\n",
        "        action: refuse\n",
        '    agents: ["*", 3]\n',
        "    rate_per_minute: 1e309\n",
        "    burst: .inf\n",
        "&a [*a]\n",
        "? [x]: y\n",
        "!!python/object:os.system {}\n",
        "%YAML 1.1\n---\n",
        "---\n",
        "- - - - -\n",
        "{",
        "]",
        "\t",
        "\x00",
        "\ufeff",
        "'\n",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_YAML_BITS, max_size=12), st.text(max_size=40))
def test_garbage_is_a_firewall_config_error_or_a_spec_never_a_crash(bits, noise):
    text = "".join(bits) + noise
    try:
        spec = parse_firewall(text, Path("fuzz.yaml"))
    except FirewallConfigError as error:
        assert error.problems
        assert all(problem.startswith("fuzz.yaml") for problem in error.problems)
    else:
        assert isinstance(spec, FirewallSpec)


def test_an_alias_of_itself_is_an_error_not_a_recursion():
    with pytest.raises(FirewallConfigError) as raised:
        parse_firewall("- &a [*a]\n", Path("loop.yaml"))
    assert raised.value.problems[0].startswith("loop.yaml:1:1: the document nests deeper")


def test_aliases_that_expand_past_the_bound_are_an_error():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 8):
        previous = f"*a{level - 1}"
        lines.append(f"a{level}: &a{level} [{', '.join([previous] * 10)}]")
    with pytest.raises(FirewallConfigError) as raised:
        parse_firewall("\n".join(lines) + "\n", Path("laughs.yaml"))
    assert "values once its aliases are expanded" in raised.value.problems[0]


def test_a_yaml_1_1_file_with_a_json_spelled_float_is_a_config_error_not_a_warning(
    tmp_path: Path,
):
    # ruamel warns about `1e309` under a `%YAML 1.1` directive; the value is read and refused.
    with pytest.raises(FirewallConfigError):
        load(
            tmp_path,
            """
            %YAML 1.1
            ---
            version: 1
            middlewares:
              - id: flood
                kind: rate-limit
                rate_per_minute: 1e309
                burst: 2
                action: refuse
            """,
        )
