"""The firewall file: read the YAML, check it, and return the frozen `FirewallSpec`.

The format is firewall.md §4.1. The gateway refuses to start (and a SIGHUP reload is
refused) on a bad file, so every problem is reported at once, each as
`path:line:col: message` naming what is wrong and what is allowed.

Three layers, each doing what it is good at:

1. `ruamel.yaml`'s round-trip loader, in YAML 1.2 (so `no` stays a string) with duplicate
   keys refused, keeps the line and column of every key and value.
2. pydantic models, strict (a string is never a number, a bool never an int) and closed
   (`extra="forbid"`), check each value on its own; pydantic collects every error.
3. `_check_across` checks what spans values: unique ids, `deny` needing an instruction,
   pattern actions allowed for the direction, `tls_ca` only with `grpcs://` and present.

A pydantic error's `loc` is a path through the document (plus the `kind` tag of the
middleware union, which `_document_path` drops); `_position` walks the same path through
the ruamel nodes to find the line and column.

The module is long because it is one file format: the models, the checks across values,
the problem texts and the positions they point at all speak of the same document paths,
and a rule added to the format touches each of them in one place.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final, Literal, TypeAlias, assert_never

import re2
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MantissaNoDotYAML1_1Warning, MarkedYAMLError, YAMLError
from ruamel.yaml.scalarbool import ScalarBoolean

from gateway.firewall.spec import (
    ContentPatternSpec,
    Directions,
    ExternalSpec,
    FirewallSpec,
    MiddlewareSpec,
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

logger = logging.getLogger(__name__)

MAX_NODES: Final = 100_000
"""Most values the document may hold once YAML aliases are expanded: a file of a few lines
can alias itself into billions of values (or into a cycle), and a policy has hundreds."""

MAX_DEPTH: Final = 32
"""Deepest nesting of mappings and lists; a policy nests six deep."""

MAX_FILE_BYTES: Final = 1024 * 1024
"""Largest firewall file read, in bytes (1 MiB): far above any real policy, and a bound on
what a mistaken path (a log, a binary) can make the gateway parse at startup."""

MAX_GLOB_CHARS: Final = 64
"""Longest name glob, in characters; agent names are at most 32."""

MAX_INSTRUCTION_CHARS: Final = 1000
"""Longest instruction text, in characters: it is shown to a model beside every message."""

MAX_PATTERN_CHARS: Final = 4096
"""Longest RE2 pattern, in characters; RE2's own memory bound stops the rest."""

MAX_RATE_PER_MINUTE: Final = 1_000_000
"""Highest `rate_per_minute` (sends per minute); above it a limit limits nothing."""

MAX_BURST: Final = 1_000_000
"""Largest rate-limit bucket, in sends."""

MAX_DEADLINE_MS: Final = 60_000
"""Longest external-middleware deadline, in milliseconds: a check holds a send."""

DEFAULT_DEADLINE_MS: Final = 200
"""External-middleware deadline when none is configured, in milliseconds (firewall.md §4.1)."""

FIREWALL_VERSION: Final = 1
"""The only `version` of the file this gateway reads."""

EXPLICIT_NONE: Final = "'middlewares: []' runs no middleware"
"""How a file says on purpose what an empty or cut file must not be taken for."""

EMPTY_FILE: Final = (
    "the file is empty (cut short by an interrupted write?); a firewall file holds "
    f"'version: 1' and 'middlewares:', and {EXPLICIT_NONE}"
)
"""The problem of an empty file (or one of comments only)."""

_ID: Final = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_ID_RULE: Final = "1 to 64 of a-z, 0-9, '.', '_', '-', starting with a letter or digit"
_GLOB_RULE: Final = (
    f"1 to {MAX_GLOB_CHARS} of a-z, 0-9, '-', '*', '?' and [...] classes such as [a-c] or [!x]"
)
_GLOB_NAME_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
_TARGET: Final = re.compile(r"(grpcs?)://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):([0-9]{1,5})")
_MAX_PORT: Final = 65535
_KINDS: Final = ("recipient-policy", "rate-limit", "content-pattern", "turn-guidance", "external")
_PATTERN_ACTIONS: Final[Mapping[str, tuple[str, ...]]] = {
    "out": ("refuse", "flag"),
    "in": ("withhold", "drop", "flag"),
    "both": ("refuse", "withhold", "drop", "flag"),
}
"""The content-pattern actions each direction allows (firewall.md §4.1)."""

_RE2_OPTIONS: Final = re2.Options()
# Only quiets RE2's own stderr logging of a rejected pattern; the message is reported here.
_RE2_OPTIONS.log_errors = False


class FirewallConfigError(Exception):
    """The firewall file cannot be used; `problems` lists every reason found.

    Each problem reads `path:line:col: message` (1-based), or `path: message` when the
    file could not be read at all."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        super().__init__("\n".join(self.problems))


# --- value checks (each raises one pydantic error at its own value) ---------------------


def _check_id(value: str) -> str:
    if _ID.fullmatch(value) is None:
        raise PydanticCustomError("bad_id", "bad id {value}: use {rule}", _ctx(value, _ID_RULE))
    return value


def _glob_problem(glob: str) -> str | None:
    """Why `glob` is not a name glob, or None when it is one."""
    if not glob:
        return "it is empty"
    if len(glob) > MAX_GLOB_CHARS:
        return f"it is longer than {MAX_GLOB_CHARS} characters"
    members: int | None = None  # characters in the open [...] class; None outside a class
    for char in glob:
        match char, members:
            case "[", None:
                members = 0
            case "[", _:
                return "'[' inside a [...] class (classes do not nest)"
            case "]", None:
                return "']' without an opening '['"
            case "]", 0:
                return "an empty [] class"
            case "]", _:
                members = None
            case "!", 0:
                pass  # [!...] negates the class, as in fnmatch; it is not a member
            case "!", None:
                return "'!' outside a [...] class (it only negates one, as in [!a])"
            case (("*" | "?"), int()):
                return f"{char!r} inside a [...] class"
            case _, None if char in _GLOB_NAME_CHARS or char in "*?":
                pass
            case _, int() if char in _GLOB_NAME_CHARS:
                members += 1
            case _:
                return f"{char!r} is not allowed"
    if members is not None:
        return "'[' is not closed"
    return None


def _check_glob(value: str) -> str:
    problem = _glob_problem(value)
    if problem is not None:
        raise PydanticCustomError(
            "bad_glob",
            "bad glob {value}: {problem}; a glob is {rule}",
            {**_ctx(value, _GLOB_RULE), "problem": problem},
        )
    return value


def _check_pattern(value: str) -> str:
    try:
        re2.compile(value, options=_RE2_OPTIONS)
    except re2.error as error:
        reason = error.args[0] if error.args else "rejected"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PydanticCustomError(
            "bad_pattern", "RE2 rejects the pattern: {reason}", {"reason": str(reason)}
        ) from None
    return value


def _check_target(value: str) -> str:
    if _target_parts(value) is None:
        raise PydanticCustomError(
            "bad_target",
            "bad target {value}: use grpc://host:port or grpcs://host:port (port 1 to {max})",
            {**_ctx(value, ""), "max": _MAX_PORT},
        )
    return value


def _check_version(value: int) -> int:
    if value != FIREWALL_VERSION:
        raise PydanticCustomError(
            "bad_version",
            "version {value} is not supported; the only version is {version}",
            {"value": value, "version": FIREWALL_VERSION},
        )
    return value


def _ctx(value: str, rule: str) -> dict[str, Any]:
    # User text goes in as context, never into the template: a pattern's braces would be
    # read as placeholders.
    return {"value": repr(value), "rule": rule}


def _target_parts(target: str) -> tuple[bool, str] | None:
    """`(tls, "host:port")` for a valid target, else None."""
    match = _TARGET.fullmatch(target)
    if match is None or not 1 <= int(match.group(3)) <= _MAX_PORT:
        return None
    return match.group(1) == "grpcs", f"{match.group(2)}:{int(match.group(3))}"


# --- the models: what each mapping may hold ----------------------------------------------

_IdText: TypeAlias = Annotated[str, AfterValidator(_check_id)]
_GlobText: TypeAlias = Annotated[str, AfterValidator(_check_glob)]
_GlobList: TypeAlias = Annotated[list[_GlobText], Field(min_length=1)]
_InstructionText: TypeAlias = Annotated[str, Field(max_length=MAX_INSTRUCTION_CHARS)]
_DirectionText: TypeAlias = Literal["out", "in", "both"]


def _everyone() -> list[str]:
    return ["*"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class _RecipientRule(_Model):
    id: _IdText
    senders: _GlobList = Field(default_factory=_everyone, alias="from")
    recipients: _GlobList | None = Field(default=None, alias="to")
    action: Literal["allow", "deny"]
    instruction: _InstructionText = ""  # `_check_across` requires it for deny


class _RecipientPolicy(_Model):
    id: _IdText
    kind: Literal["recipient-policy"]
    agents: _GlobList = Field(default_factory=_everyone)
    rules: Annotated[list[_RecipientRule], Field(min_length=1)]


class _RateLimit(_Model):
    id: _IdText
    kind: Literal["rate-limit"]
    agents: _GlobList = Field(default_factory=_everyone)
    rate_per_minute: Annotated[float, Field(gt=0, le=MAX_RATE_PER_MINUTE)]
    burst: Annotated[int, Field(ge=1, le=MAX_BURST)]
    action: Literal["refuse", "guide"] = "refuse"
    instruction: _InstructionText | None = None


class _PatternRule(_Model):
    id: _IdText
    pattern: Annotated[str, Field(max_length=MAX_PATTERN_CHARS), AfterValidator(_check_pattern)]
    action: str  # which actions are allowed depends on the direction: `_check_across`
    instruction: Annotated[_InstructionText, Field(min_length=1)]
    match: Literal["text", "json"] = "text"


class _ContentPattern(_Model):
    id: _IdText
    kind: Literal["content-pattern"]
    agents: _GlobList = Field(default_factory=_everyone)
    direction: _DirectionText = "out"
    rules: Annotated[list[_PatternRule], Field(min_length=1)]


class _TurnGuidance(_Model):
    id: _IdText
    kind: Literal["turn-guidance"]
    agents: _GlobList = Field(default_factory=_everyone)


class _External(_Model):
    id: _IdText
    kind: Literal["external"]
    agents: _GlobList = Field(default_factory=_everyone)
    direction: _DirectionText = "both"
    target: Annotated[str, AfterValidator(_check_target)]
    tls_ca: Annotated[str, Field(min_length=1)] | None = None  # checked by `_check_across`
    deadline_ms: Annotated[int, Field(ge=1, le=MAX_DEADLINE_MS)] = DEFAULT_DEADLINE_MS
    on_error: Literal["allow", "refuse"] = "allow"


_AnyMiddleware: TypeAlias = (
    _RecipientPolicy | _RateLimit | _ContentPattern | _TurnGuidance | _External
)
_Middleware: TypeAlias = Annotated[_AnyMiddleware, Field(discriminator="kind")]


class _FirewallFile(_Model):
    version: Annotated[int, AfterValidator(_check_version)]
    content_logging: bool = False
    # Required, not defaulted to []: a file cut short after `version` must not read as a
    # policy of no middlewares. No policy is written out as `middlewares: []`.
    middlewares: list[_Middleware]


_MIDDLEWARE_MODELS: Final[Mapping[str, type[_Model]]] = {
    "recipient-policy": _RecipientPolicy,
    "rate-limit": _RateLimit,
    "content-pattern": _ContentPattern,
    "turn-guidance": _TurnGuidance,
    "external": _External,
}
_RULE_MODELS: Final[Mapping[str, type[_Model]]] = {
    "recipient-policy": _RecipientRule,
    "content-pattern": _PatternRule,
}


# --- public entry points -----------------------------------------------------------------


def load_firewall(path: Path) -> FirewallSpec:
    """Read and check the firewall file at `path`.

    Raises:
        FirewallConfigError: the file cannot be read (missing, unreadable, over 1 MiB,
            not UTF-8) or is not a valid firewall file; every problem is listed.
    """
    try:
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise FirewallConfigError([f"{path}: cannot read ({error.strerror or error})"]) from None
    if len(data) > MAX_FILE_BYTES:
        raise FirewallConfigError([f"{path}: cannot read (larger than {MAX_FILE_BYTES} bytes)"])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FirewallConfigError(
            [f"{path}: cannot read (not UTF-8: byte {error.start} is invalid)"]
        ) from None
    spec = parse_firewall(text, path)
    logger.info("firewall config loaded path=%s middlewares=%d", path, len(spec.middlewares))
    return spec


def parse_firewall(text: str, source: Path) -> FirewallSpec:
    """Check the firewall file `text`, read from `source` (which names it in problems and
    anchors a relative `tls_ca`).

    An empty file (or one of comments only) and one without `middlewares` are refused: an
    interrupted write leaves them, and reading "no middlewares" would drop the whole policy
    unnoticed. `middlewares: []` says it on purpose (firewall.md §4.1).

    Raises:
        FirewallConfigError: every problem found, in file order.
    """
    root = _load_yaml(text, source)
    if root is None:
        raise FirewallConfigError([f"{source}:1:1: {EMPTY_FILE}"])
    problems: list[_Problem] = []
    try:
        plain = _plain(root, (), problems, _Budget())
    except _TooLarge as error:
        raise FirewallConfigError([f"{source}:1:1: {error}"]) from None
    checked: _FirewallFile | None = None
    try:
        checked = _FirewallFile.model_validate(plain)
    except ValidationError as error:
        problems.extend(_from_pydantic(error.errors()))
    problems.extend(_check_across(plain, source))
    if problems or checked is None:
        located = sorted((_position(root, p), p.message) for p in problems)
        raise FirewallConfigError(
            [f"{source}:{line + 1}:{col + 1}: {message}" for (line, col), message in located]
        )
    return FirewallSpec(
        source=source,
        content_logging=checked.content_logging,
        middlewares=tuple(_spec_of(m, source) for m in checked.middlewares),
    )


# --- reading the YAML --------------------------------------------------------------------


def _load_yaml(text: str, source: Path) -> Any:
    yaml = YAML(typ="rt")
    yaml.version = (1, 2)
    yaml.allow_duplicate_keys = False
    try:
        with warnings.catch_warnings():
            # A `%YAML 1.1` directive makes ruamel warn about a float spelled as in JSON
            # (`1e309`) instead of reading it: the value is read, and checked like any other.
            warnings.simplefilter("ignore", MantissaNoDotYAML1_1Warning)
            return yaml.load(text)
    except MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line, col = (mark.line, mark.column) if mark is not None else (0, 0)
        message = " ".join(part for part in (error.context, error.problem) if part)
        raise FirewallConfigError([f"{source}:{line + 1}:{col + 1}: {message}"]) from None
    except YAMLError as error:
        raise FirewallConfigError([f"{source}:1:1: {error}"]) from None


class _TooLarge(Exception):
    """The document nests too deeply or expands past `MAX_NODES` values."""


class _Budget:
    """Values `_plain` may still produce."""

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = MAX_NODES

    def take(self, loc: _Loc) -> None:
        self.left -= 1
        if self.left < 0:
            raise _TooLarge(
                f"the document holds over {MAX_NODES:,} values once its aliases are expanded"
            )
        if len(loc) > MAX_DEPTH:
            raise _TooLarge(
                f"the document nests deeper than {MAX_DEPTH} levels (an alias of itself?)"
            )


def _plain(node: Any, loc: _Loc, problems: list[_Problem], budget: _Budget) -> Any:
    """The document as plain dicts, lists and scalars; a key that is not a string is
    reported into `problems` (at the key) and left out.

    ruamel's round-trip scalars subclass the builtins (`ScalarFloat`, `HexInt`, and an
    anchored boolean is a `ScalarBoolean`, an int); strict pydantic must see the real types,
    or an anchored `true` would pass as the integer 1."""
    budget.take(loc)
    match node:
        case Mapping():
            plain: dict[str, Any] = {}
            for key, value in node.items():
                if isinstance(key, str):
                    plain[str(key)] = _plain(value, (*loc, str(key)), problems, budget)
                else:
                    problems.append(
                        _Problem(
                            loc=loc,
                            message=f"{_describe_loc(loc)}: key {_describe_value(key)} "
                            "is not a string",
                            position=_key_position(node, key),
                        )
                    )
            return plain
        case list():
            return [
                _plain(item, (*loc, index), problems, budget) for index, item in enumerate(node)
            ]
        case bool() | ScalarBoolean():
            return bool(node)
        case str():
            return str(node)
        case int():
            return int(node)
        case float():
            return float(node)
        case _:
            return node


# --- problems and where they are ---------------------------------------------------------


_Loc: TypeAlias = tuple[str | int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Problem:
    loc: _Loc
    """The path through the document to what is wrong (a missing key's path ends at it)."""
    message: str
    at_key: bool = False
    """Point at the key itself (an unknown key) rather than its value."""
    position: tuple[int, int] | None = None
    """The 0-based (line, column), when known without walking `loc`."""


def _from_pydantic(errors: list[ErrorDetails]) -> Iterator[_Problem]:
    for error in errors:
        loc = _document_path(error["loc"])
        kind = error["type"]
        where = _describe_loc(loc)
        match kind:
            case "missing":
                yield _Problem(
                    loc=loc,
                    message=f"{_describe_loc(loc[:-1])}: missing required key {loc[-1]!r}"
                    + (f" (a file cut short?); {EXPLICIT_NONE}" if loc == ("middlewares",) else ""),
                )
            case "extra_forbidden":
                allowed = ", ".join(_allowed_keys(error["loc"][:-1]))
                yield _Problem(
                    loc=loc,
                    message=f"{where}: unknown key {loc[-1]!r}; allowed keys: {allowed}",
                    at_key=True,
                )
            case "union_tag_invalid":
                yield _Problem(
                    loc=(*loc, "kind"),
                    message=f"{where}.kind: unknown kind {error['input']['kind']!r}; "
                    f"allowed kinds: {', '.join(_KINDS)}",
                )
            case "union_tag_not_found":
                yield _Problem(
                    loc=(*loc, "kind"),
                    message=f"{where}: missing required key 'kind' (one of {', '.join(_KINDS)})",
                )
            case "model_type" | "model_attributes_type" | "dict_type":
                yield _Problem(
                    loc=loc,
                    message=f"{where}: should be a mapping, not {_describe_value(error.get('input'))}",
                )
            case "too_short":
                yield _Problem(loc=loc, message=f"{where}: should be a non-empty list")
            case _ if kind.startswith("bad_"):  # our own checks: the message is complete
                yield _Problem(loc=loc, message=f"{where}: {error['msg']}")
            case _:
                text = error["msg"].removeprefix("Input ")
                yield _Problem(
                    loc=loc, message=f"{where}: {text} (got {_describe_value(error.get('input'))})"
                )


def _document_path(loc: tuple[str | int, ...]) -> _Loc:
    """`loc` without the middleware union's tag: pydantic reports an error inside a
    middleware as `("middlewares", i, <kind>, ...)`, and `<kind>` is no key of the file."""
    if len(loc) >= 3 and loc[0] == "middlewares" and isinstance(loc[1], int):
        return (*loc[:2], *loc[3:])
    return tuple(loc)


def _allowed_keys(loc: tuple[str | int, ...]) -> list[str]:
    """The keys of the mapping at pydantic's `loc` (tag included), in declaration order."""
    match loc:
        case ():
            model: type[_Model] | None = _FirewallFile
        case ("middlewares", int(), str(kind)):
            model = _MIDDLEWARE_MODELS.get(kind)
        case ("middlewares", int(), str(kind), "rules", int()):
            model = _RULE_MODELS.get(kind)
        case _:
            model = None
    if model is None:
        return []
    return [field.alias or name for name, field in model.model_fields.items()]


def _describe_loc(loc: _Loc) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text or "the file"


def _describe_value(value: Any) -> str:
    match value:
        case Mapping():
            return "a mapping"
        case list() | tuple():  # a sequence used as a key is a tuple
            return "a list"
        case None:
            return "null"
        case bool() | ScalarBoolean():
            return "true" if value else "false"
        case str():
            return f"the string {value[:40]!r}" + ("..." if len(value) > 40 else "")
        case int() | float():
            return repr(value)
        case _:
            return type(value).__name__


def _position(root: Any, problem: _Problem) -> tuple[int, int]:
    """0-based (line, column) of what `problem.loc` names in the ruamel document.

    A path that leaves the document (a missing key, a member that is not there) stops at
    the deepest node it reached: a missing key points at the mapping that lacks it."""
    if problem.position is not None:
        return problem.position
    node = root
    position = (
        (node.lc.line, node.lc.col) if isinstance(node, CommentedMap | CommentedSeq) else (0, 0)
    )
    for index, part in enumerate(problem.loc):
        last = index == len(problem.loc) - 1
        try:
            if isinstance(node, CommentedMap) and part in node:
                position = node.lc.key(part) if last and problem.at_key else node.lc.value(part)
                node = node[part]
            elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
                position = node.lc.item(part)
                node = node[part]
            else:
                break
        except (KeyError, IndexError, TypeError):
            break  # a key merged in by `<<` has no position of its own
    return position[0], position[1]


def _key_position(mapping: Any, key: Any) -> tuple[int, int]:
    try:
        line, col = mapping.lc.key(key)
    except (KeyError, TypeError):
        return mapping.lc.line, mapping.lc.col
    return line, col


# --- checks across values ------------------------------------------------------------------


def _check_across(document: Any, source: Path) -> Iterator[_Problem]:
    """What no single value shows: unique ids, deny instructions, pattern actions for the
    direction, `tls_ca`. Works on the plain document, skipping what has the wrong type
    (pydantic reports that), so it runs even when pydantic found problems."""
    if not isinstance(document, dict):
        return
    middlewares = document.get("middlewares")
    if not isinstance(middlewares, list):
        return
    yield from _duplicate_ids(middlewares, ("middlewares",), "middleware")
    for index, middleware in enumerate(middlewares):
        if not isinstance(middleware, dict):
            continue
        loc: _Loc = ("middlewares", index)
        rules = middleware.get("rules")
        if middleware.get("kind") in _RULE_MODELS and isinstance(rules, list):
            yield from _duplicate_ids(rules, (*loc, "rules"), "rule")
        match middleware.get("kind"):
            case "recipient-policy":
                yield from _check_deny_rules(rules, (*loc, "rules"))
            case "content-pattern":
                yield from _check_pattern_actions(middleware, loc)
            case "external":
                yield from _check_tls_ca(middleware, loc, source)
            case _:
                pass


def _duplicate_ids(items: list[Any], loc: _Loc, what: str) -> Iterator[_Problem]:
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            continue
        first = seen.setdefault(item["id"], index)
        if first != index:
            yield _Problem(
                loc=(*loc, index, "id"),
                message=f"{_describe_loc((*loc, index, 'id'))}: duplicate {what} id "
                f"{item['id']!r} (first used by {_describe_loc((*loc, first))})",
            )


def _check_deny_rules(rules: Any, loc: _Loc) -> Iterator[_Problem]:
    for index, rule in _mappings(rules):
        if rule.get("action") != "deny":
            continue
        instruction = rule.get("instruction")
        if "instruction" not in rule:
            yield _Problem(
                loc=(*loc, index, "instruction"),
                message=f"{_describe_loc((*loc, index))}: a deny rule needs an 'instruction' "
                "(the text the refused sender sees)",
            )
        elif instruction == "":
            yield _Problem(
                loc=(*loc, index, "instruction"),
                message=f"{_describe_loc((*loc, index, 'instruction'))}: "
                "a deny rule's instruction must not be empty",
            )


def _check_pattern_actions(middleware: dict[str, Any], loc: _Loc) -> Iterator[_Problem]:
    direction = middleware.get("direction", "out")
    # An invalid direction is pydantic's to report; the action is then checked against all.
    allowed = _PATTERN_ACTIONS.get(direction, _PATTERN_ACTIONS["both"])
    for index, rule in _mappings(middleware.get("rules")):
        action = rule.get("action")
        if not isinstance(action, str) or action in allowed:
            continue
        scope = f"for direction {direction!r}" if direction in _PATTERN_ACTIONS else "here"
        yield _Problem(
            loc=(*loc, "rules", index, "action"),
            message=f"{_describe_loc((*loc, 'rules', index, 'action'))}: action {action!r} "
            f"is not allowed {scope}; allowed: {', '.join(allowed)}",
        )


def _check_tls_ca(middleware: dict[str, Any], loc: _Loc, source: Path) -> Iterator[_Problem]:
    tls_ca = middleware.get("tls_ca")
    if not isinstance(tls_ca, str) or not tls_ca:
        return
    where = _describe_loc((*loc, "tls_ca"))
    target = middleware.get("target")
    parts = _target_parts(target) if isinstance(target, str) else None
    if parts is not None and not parts[0]:
        yield _Problem(
            loc=(*loc, "tls_ca"),
            message=f"{where}: tls_ca is only allowed with a grpcs:// target",
            at_key=True,
        )
        return
    path = _tls_ca_path(tls_ca, source)
    if not path.is_file():
        yield _Problem(loc=(*loc, "tls_ca"), message=f"{where}: no file at {str(path)!r}")


def _mappings(items: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    if isinstance(items, list):
        yield from ((i, item) for i, item in enumerate(items) if isinstance(item, dict))


def _tls_ca_path(tls_ca: str, source: Path) -> Path:
    # Relative to the file's directory, as an operator reads it; absolute so that a reload
    # after a chdir still finds it.
    return (source.parent / tls_ca).absolute()


# --- the checked file as spec records ---------------------------------------------------------


def _spec_of(middleware: _AnyMiddleware, source: Path) -> MiddlewareSpec:
    match middleware:
        case _RecipientPolicy():
            return RecipientPolicySpec(
                id=middleware.id,
                agents=tuple(middleware.agents),
                rules=tuple(
                    RecipientRule(
                        id=rule.id,
                        senders=tuple(rule.senders),
                        recipients=None if rule.recipients is None else tuple(rule.recipients),
                        action=RuleAction(rule.action),
                        instruction=rule.instruction,
                    )
                    for rule in middleware.rules
                ),
            )
        case _RateLimit():
            return RateLimitSpec(
                id=middleware.id,
                agents=tuple(middleware.agents),
                rate_per_minute=float(middleware.rate_per_minute),
                burst=middleware.burst,
                action=RateAction(middleware.action),
                instruction=middleware.instruction,
            )
        case _ContentPattern():
            return ContentPatternSpec(
                id=middleware.id,
                agents=tuple(middleware.agents),
                direction=Directions(middleware.direction),
                rules=tuple(
                    PatternRule(
                        id=rule.id,
                        pattern=rule.pattern,
                        action=PatternAction(rule.action),
                        instruction=rule.instruction,
                        match=PatternMatch(rule.match),
                    )
                    for rule in middleware.rules
                ),
            )
        case _TurnGuidance():
            return TurnGuidanceSpec(id=middleware.id, agents=tuple(middleware.agents))
        case _External():
            parts = _target_parts(middleware.target)
            assert parts is not None  # the target validator accepted it
            tls, target = parts
            return ExternalSpec(
                id=middleware.id,
                agents=tuple(middleware.agents),
                direction=Directions(middleware.direction),
                target=target,
                tls=tls,
                tls_ca=None
                if middleware.tls_ca is None
                else _tls_ca_path(middleware.tls_ca, source),
                deadline_ms=middleware.deadline_ms,
                on_error=OnError(middleware.on_error),
            )
        case _:
            assert_never(middleware)
