"""The form-mode `requestedSchema` grammar and the answer checker (collectives.md §6).

`admit_schema` runs the grammar of §6.1-§6.3 at `Send`: it returns the normalized schema
that travels (unknown keywords dropped at every level, each property keeping only the
keywords of the first shape that admits it) or raises `FormSchemaError`, whose `detail` is
the `schema-invalid` text. `check_answer` is the one deterministic checker of §6.4, used
by the answering member, the requester and every all_gather member alike, so its output
must be byte-identical everywhere; no JSON Schema library is involved.

Both are total: any Python value goes in, and nothing but `FormSchemaError` (from
`admit_schema`) comes out as an exception. Values that are not JSON (NaN, lone
surrogates, other types) are simply ill-typed wherever the grammar looks at them, and
never looked at where it drops them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from harness_contract.errors import AnswerFieldIssue, AnswerFieldReason, SchemaInvalid
from harness_contract.formats import FORMATS, matches_format
from harness_contract.jsonvalue import JsonValue, canonical_text, is_well_formed_text
from harness_contract.values import AnswerContent, AnswerValue

# --- Texts -----------------------------------------------------------------------------

NO_SHAPE_TEXT: Final = '"type" must be "string", "number", "integer", "boolean" or "array"'
"""The refusal of a property whose `type` names no field shape (§6.3)."""

NO_OPTIONS_TEXT: Final = "expected at least one option"
"""The refusal of an admitted select with no options, after its keyword path (§6.2)."""

NOT_AN_OBJECT_TEXT: Final = "expected an object"
"""The refusal of a whole schema that is not a JSON object (no path: it is the root)."""

TITLED_SINGLE_SELECT_TEMPLATE: Final = (
    'a titled single-select is {"type":"string","oneOf":[{"const":"a","title":"A"}]}'
)
"""What a titled single-select looks like; ends the refusal of one meant as such."""

SINGLE_SELECT_TEMPLATE: Final = 'a single-select is {"type":"string","enum":["a","b"]}'
"""What a single-select looks like; ends the refusal of one meant as such."""

STRING_TEMPLATE: Final = (
    'a string is {"type":"string"} with optional minLength, maxLength or format'
)
"""What a string field looks like; ends the refusal of one meant as such."""

NUMBER_TEMPLATE: Final = (
    'a number is {"type":"number"} or {"type":"integer"} with optional minimum and maximum'
)
"""What a number field looks like; ends the refusal of one meant as such."""

BOOLEAN_TEMPLATE: Final = 'a boolean is {"type":"boolean"}'
"""What a boolean field looks like; ends the refusal of one meant as such."""

TITLED_MULTI_SELECT_TEMPLATE: Final = (
    'a titled multi-select is {"type":"array","items":{"anyOf":[{"const":"a","title":"A"}]}}'
)
"""What a titled multi-select looks like; ends the refusal of one meant as such."""

MULTI_SELECT_TEMPLATE: Final = (
    'a multi-select is {"type":"array","items":{"type":"string","enum":["a","b"]}}'
)
"""What a multi-select looks like; ends the refusal of one meant as such."""

ALLOWED_VALUES_TEXT: Final = "must be one of the allowed values"
"""The requirement an `enum` or `items.enum` check reports (§6.4)."""

ROOT_KEYWORDS: Final = ("$schema", "type", "properties", "required")
"""The only top-level keys of a form-mode schema, in the order their issues are reported."""

FIELD_TYPES: Final = ("string", "number", "integer", "boolean", "array")
"""The `type` values a field may carry."""

_OPTION_TEXT: Final = 'an array of {"const": string, "title": string}'
_STRINGS_TEXT: Final = "an array of strings"
_FORMAT_TEXT: Final = 'one of "email", "uri", "date" or "date-time"'


# --- Errors ----------------------------------------------------------------------------


class FormSchemaError(ValueError):
    """A requested schema breaks the form-mode grammar.

    `issues` are the §6.3 issues in report order, each led by its path from the schema
    root; `detail` joins them with `; ` and is the `schema-invalid` detail. A caller
    raises `CollectiveError(id, error.failure)`.
    """

    def __init__(self, issues: Iterable[str]) -> None:
        self.issues = tuple(issues)
        self.detail = "; ".join(self.issues)
        super().__init__(self.detail)

    @property
    def failure(self) -> SchemaInvalid:
        """The `schema-invalid` payload carrying `detail`."""
        return SchemaInvalid(detail=self.detail)


# --- Canonical order -------------------------------------------------------------------


def canonical_key_order(keys: Iterable[str]) -> list[str]:
    """`keys` in RFC 8785 order: by UTF-16 code units, as JavaScript compares strings.

    A lone surrogate sorts as its own code unit, so the order is total for any `str`.
    """
    return sorted(keys, key=_utf16_units)


def _utf16_units(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


# --- Reading untrusted values ----------------------------------------------------------


def _text(value: object) -> str | None:
    """`value` when it is well-formed text, else None."""
    if isinstance(value, str) and is_well_formed_text(value):
        return str(value)
    return None


def _number(value: object) -> float | None:
    """`value` as a finite float when it is a number (never a boolean), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number + 0.0 if math.isfinite(number) else None


def _strings(value: object) -> tuple[str, ...] | None:
    """`value` as a tuple of well-formed strings when it is an array of them, else None."""
    if not isinstance(value, list | tuple):
        return None
    texts = tuple(_text(item) for item in value)
    return None if None in texts else tuple(text for text in texts if text is not None)


def _options(value: object) -> tuple[dict[str, JsonValue], ...] | None:
    """`value` as `({"const": str, "title": str}, ...)`, other option keys dropped, else None."""
    if not isinstance(value, list | tuple):
        return None
    options: list[dict[str, JsonValue]] = []
    for option in value:
        if not isinstance(option, Mapping):
            return None
        const, title = _text(option.get("const")), _text(option.get("title"))
        if const is None or title is None:
            return None
        options.append({"const": const, "title": title})
    return tuple(options)


def _boolean(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _literal(*allowed: str) -> Callable[[object], str | None]:
    def read(value: object) -> str | None:
        return value if isinstance(value, str) and value in allowed else None

    return read


def _is_object(value: object) -> bool:
    """A JSON object: a mapping whose keys are all well-formed strings."""
    return isinstance(value, Mapping) and all(_text(key) is not None for key in value)


# --- Shapes ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Keyword:
    """One keyword of a shape: how to read it and what it expects when it cannot."""

    name: str
    expected: str
    read: Callable[[object], JsonValue] | None = None
    """Returns the normalized value, or None when the value is ill-typed."""
    nested: tuple[_Keyword, ...] | None = None
    """For `items`: the keywords of the object it must be (then `read` is unused)."""
    required: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class _Shape:
    """One field shape of §6.2: its keywords in report order and its template."""

    keywords: tuple[_Keyword, ...]
    template: str
    options: tuple[str, ...] | None = None
    """The keyword path of the select's options, which must not be empty."""
    excludes: tuple[str, ...] = ()
    """Keywords whose presence keeps this shape from accepting a property at all."""


def _string_type() -> _Keyword:
    return _Keyword(name="type", expected='"string"', read=_literal("string"), required=True)


def _array_type() -> _Keyword:
    return _Keyword(name="type", expected='"array"', read=_literal("array"), required=True)


_LABELS: Final = (
    _Keyword(name="title", expected="a string", read=_text),
    _Keyword(name="description", expected="a string", read=_text),
)
_ENUM: Final = _Keyword(name="enum", expected=_STRINGS_TEXT, read=_strings, required=True)
_DEFAULT_STRING: Final = _Keyword(name="default", expected="a string", read=_text)
_DEFAULT_STRINGS: Final = _Keyword(name="default", expected=_STRINGS_TEXT, read=_strings)
_MULTI_SELECT_LIMITS: Final = (
    _Keyword(name="minItems", expected="a number", read=_number),
    _Keyword(name="maxItems", expected="a number", read=_number),
)


def _multi_select(*, items: tuple[_Keyword, ...], template: str) -> _Shape:
    """A multi-select (shapes 4 and 5): an array whose `items` object has the keywords
    `items`, the last of which holds the options, so `items.<its name>` must not be empty."""
    return _Shape(
        keywords=(
            _array_type(),
            *_LABELS,
            *_MULTI_SELECT_LIMITS,
            _DEFAULT_STRINGS,
            _Keyword(name="items", expected="an object", nested=items, required=True),
        ),
        template=template,
        options=("items", items[-1].name),
    )


LEGACY_TITLED_SINGLE_SELECT: Final = _Shape(
    keywords=(
        _string_type(),
        *_LABELS,
        _ENUM,
        _Keyword(name="enumNames", expected=_STRINGS_TEXT, read=_strings),
        _DEFAULT_STRING,
    ),
    template=SINGLE_SELECT_TEMPLATE,
    options=("enum",),
)
"""Shape 1: a single-select whose options may carry display names in `enumNames`."""

SINGLE_SELECT: Final = _Shape(
    keywords=(_string_type(), *_LABELS, _ENUM, _DEFAULT_STRING),
    template=SINGLE_SELECT_TEMPLATE,
    options=("enum",),
)
"""Shape 2: a single-select (never wins over shape 1; kept to follow MCP's order)."""

TITLED_SINGLE_SELECT: Final = _Shape(
    keywords=(
        _string_type(),
        *_LABELS,
        _Keyword(name="oneOf", expected=_OPTION_TEXT, read=_options, required=True),
        _DEFAULT_STRING,
    ),
    template=TITLED_SINGLE_SELECT_TEMPLATE,
    options=("oneOf",),
)
"""Shape 3: a single-select whose options are `{const, title}` pairs."""

MULTI_SELECT: Final = _multi_select(items=(_string_type(), _ENUM), template=MULTI_SELECT_TEMPLATE)
"""Shape 4: a multi-select over `items.enum`."""

TITLED_MULTI_SELECT: Final = _multi_select(
    items=(_Keyword(name="anyOf", expected=_OPTION_TEXT, read=_options, required=True),),
    template=TITLED_MULTI_SELECT_TEMPLATE,
)
"""Shape 5: a multi-select over the `const`s of `items.anyOf`."""

BOOLEAN: Final = _Shape(
    keywords=(
        _Keyword(name="type", expected='"boolean"', read=_literal("boolean"), required=True),
        *_LABELS,
        _Keyword(name="default", expected="a boolean", read=_boolean),
    ),
    template=BOOLEAN_TEMPLATE,
)
"""Shape 6: a boolean."""

STRING: Final = _Shape(
    keywords=(
        _string_type(),
        *_LABELS,
        _Keyword(name="minLength", expected="a number", read=_number),
        _Keyword(name="maxLength", expected="a number", read=_number),
        _Keyword(name="format", expected=_FORMAT_TEXT, read=_literal(*FORMATS)),
        _DEFAULT_STRING,
    ),
    template=STRING_TEMPLATE,
    excludes=("enum", "oneOf"),
)
"""Shape 7: free text, optionally bounded in length or in a format.

A property carrying `enum` or `oneOf` is a select, never free text: were this shape to
take it with those keywords dropped, a malformed select would silently become a free-text
field (collectives.md §6.6 refuses `{"type":"string","oneOf":[{"const":"a"}]}`)."""

NUMBER: Final = _Shape(
    keywords=(
        _Keyword(
            name="type",
            expected='"number" or "integer"',
            read=_literal("number", "integer"),
            required=True,
        ),
        *_LABELS,
        _Keyword(name="minimum", expected="a number", read=_number),
        _Keyword(name="maximum", expected="a number", read=_number),
        _Keyword(name="default", expected="a number", read=_number),
    ),
    template=NUMBER_TEMPLATE,
)
"""Shape 8: a number or an integer, optionally bounded."""

FIELD_SHAPES: Final = (
    LEGACY_TITLED_SINGLE_SELECT,
    SINGLE_SELECT,
    TITLED_SINGLE_SELECT,
    MULTI_SELECT,
    TITLED_MULTI_SELECT,
    BOOLEAN,
    STRING,
    NUMBER,
)
"""The shapes in MCP's order; the first that accepts a property admits it (§6.2)."""


def _admit_keywords(
    value: Mapping[object, object], keywords: tuple[_Keyword, ...]
) -> tuple[dict[str, JsonValue], list[str]]:
    """The value's admitted keywords and every issue, in keyword order, paths relative."""
    admitted: dict[str, JsonValue] = {}
    issues: list[str] = []
    for keyword in keywords:
        if keyword.name not in value:
            if keyword.required:
                issues.append(f"{keyword.name}: expected {keyword.expected}")
            continue
        raw = value[keyword.name]
        if keyword.nested is not None:
            if not isinstance(raw, Mapping):
                issues.append(f"{keyword.name}: expected {keyword.expected}")
                continue
            inner, inner_issues = _admit_keywords(raw, keyword.nested)
            issues.extend(f"{keyword.name}.{issue}" for issue in inner_issues)
            admitted[keyword.name] = inner
            continue
        read = keyword.read(raw) if keyword.read is not None else None
        if read is None:
            issues.append(f"{keyword.name}: expected {keyword.expected}")
        else:
            admitted[keyword.name] = read
    return admitted, issues


def _intended_shape(field: Mapping[object, object]) -> _Shape | None:
    """The shape a property no shape admits was most plausibly meant as (§6.3)."""
    kind = field.get("type")
    if not isinstance(kind, str):
        return None
    if kind == "string":
        if "oneOf" in field:
            return TITLED_SINGLE_SELECT
        return SINGLE_SELECT if "enum" in field else STRING
    if kind in ("number", "integer"):
        return NUMBER
    if kind == "boolean":
        return BOOLEAN
    if kind == "array":
        items = field.get("items")
        return (
            TITLED_MULTI_SELECT if isinstance(items, Mapping) and "anyOf" in items else MULTI_SELECT
        )
    return None


def _options_at(admitted: Mapping[str, JsonValue], path: tuple[str, ...]) -> JsonValue:
    value: JsonValue = admitted
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _admit_field(field: object) -> dict[str, JsonValue] | str:
    """One property: its admitted form, or its refusal detail without the path (§6.2-§6.3)."""
    if isinstance(field, Mapping):
        for shape in FIELD_SHAPES:
            if any(keyword in field for keyword in shape.excludes):
                continue
            admitted, issues = _admit_keywords(field, shape.keywords)
            if issues:
                continue
            if shape.options is not None and not _options_at(admitted, shape.options):
                return f"{'.'.join(shape.options)}: {NO_OPTIONS_TEXT}"
            return admitted
        intended = _intended_shape(field)
        if intended is not None:
            _, issues = _admit_keywords(field, intended.keywords)
            return "; ".join([*issues, intended.template])
    return NO_SHAPE_TEXT


def admit_schema(schema: object) -> dict[str, JsonValue]:
    """Admit a form-mode `requestedSchema` and return its normalized form (§6.1-§6.3).

    The result keeps `$schema` (if given), `type`, `properties` (each admitted, in
    canonical key order) and `required` (if given); arrays are tuples and numbers floats,
    as `normalize_json` makes them, so `admit_schema(admit_schema(s)) == admit_schema(s)`.
    Issues are reported in the outline's order: `$schema`, `type`, `properties` (each
    property in canonical order), `required` (ill-typed, or naming undeclared
    properties), then unexpected top-level keys in canonical order.

    Raises `FormSchemaError` (and nothing else) when the schema is refused.
    """
    if not isinstance(schema, Mapping) or not _is_object(schema):
        raise FormSchemaError((NOT_AN_OBJECT_TEXT,))
    admitted: dict[str, JsonValue] = {}
    issues: list[str] = []

    if "$schema" in schema:
        dialect = _text(schema["$schema"])
        if dialect is None:
            issues.append("$schema: expected a string")
        else:
            admitted["$schema"] = dialect

    declared_type = schema.get("type")
    if isinstance(declared_type, str) and declared_type == "object":
        admitted["type"] = "object"
    else:
        issues.append('type: expected "object"')

    raw_properties = schema.get("properties")
    declared: set[str] | None = None
    if isinstance(raw_properties, Mapping) and _is_object(raw_properties):
        properties: dict[str, JsonValue] = {}
        for name in canonical_key_order(raw_properties):
            field = _admit_field(raw_properties[name])
            if isinstance(field, str):
                issues.append(f"properties.{name}: {field}")
            else:
                properties[name] = field
        admitted["properties"] = properties
        declared = set(raw_properties)
    else:
        issues.append("properties: expected an object")

    if "required" in schema:
        required = _strings(schema["required"])
        if required is None:
            issues.append("required: expected an array of strings")
        else:
            admitted["required"] = required
            if declared is not None:
                undeclared = [name for name in dict.fromkeys(required) if name not in declared]
                if undeclared:
                    issues.append(f"required: {_undeclared_text(undeclared)}")

    issues.extend(
        f"{key}: is unexpected"
        for key in canonical_key_order(key for key in schema if key not in ROOT_KEYWORDS)
    )
    if issues:
        raise FormSchemaError(issues)
    return admitted


def _undeclared_text(names: list[str]) -> str:
    quoted = ", ".join(f'"{name}"' for name in names)
    verb = "is" if len(names) == 1 else "are"
    return f"{quoted} {verb} not declared in properties"


# --- Answer content --------------------------------------------------------------------


def answer_value(value: object) -> AnswerValue | None:
    """`value` as an AnswerValue (well-formed text, a finite number as a float, a boolean
    or a tuple of well-formed strings), or None when it is none of these."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, int | float):
        return _number(value)
    return _strings(value)


def validate_answer_content(value: object) -> AnswerContent | None:
    """`value` as an AnswerContent (§2.2), or None when it is not one.

    An AnswerContent is an object whose keys are well-formed strings and whose values are
    each a string, a finite number, a boolean or an array of strings (booleans are not
    numbers). The result is a new dict with numbers as floats and arrays as tuples.
    """
    if not isinstance(value, Mapping) or not _is_object(value):
        return None
    content: dict[str, AnswerValue] = {}
    for key, item in value.items():
        checked = answer_value(item)
        if checked is None:
            return None
        content[str(key)] = checked
    return content


# --- Answer checker --------------------------------------------------------------------


def check_answer(
    schema: Mapping[str, JsonValue], content: Mapping[str, object]
) -> tuple[AnswerFieldIssue, ...]:
    """Every issue of an accepted answer against an admitted schema (§6.4); empty = valid.

    Fields come in canonical order: the schema's properties, then the answer's undeclared
    keys. A declared field absent from the answer is `missing` only if `required` names
    it; a present one is `invalid` with its failing keyword checks joined by `, `. A value
    that is not an AnswerValue (possible only when `content` skipped
    `validate_answer_content`) passes no `type`, `enum` or `oneOf` check and is measured by
    no limit. Keys that are not strings are ignored; the checker never raises.
    """
    form = _mapping(schema)
    properties = _mapping(form.get("properties"))
    raw_required = form.get("required")
    required = (
        {name for name in raw_required if isinstance(name, str)}
        if isinstance(raw_required, list | tuple)
        else set()
    )
    answer = _mapping(content)
    issues: list[AnswerFieldIssue] = []
    for name in canonical_key_order(key for key in properties if isinstance(key, str)):
        if name in answer:
            failures = _field_failures(properties[name], answer[name])
            if failures:
                issues.append(
                    AnswerFieldIssue(
                        field=name, reason=AnswerFieldReason.INVALID, detail=", ".join(failures)
                    )
                )
        elif name in required:
            issues.append(AnswerFieldIssue(field=name, reason=AnswerFieldReason.MISSING))
    issues.extend(
        AnswerFieldIssue(field=name, reason=AnswerFieldReason.UNEXPECTED)
        for name in canonical_key_order(
            key for key in answer if isinstance(key, str) and key not in properties
        )
    )
    return tuple(issues)


def _field_failures(field: object, raw_value: object) -> list[str]:
    """Each failing keyword check of one present answer value, as `<keyword>: <requirement>`,
    in the order of §6.4's table."""
    if not isinstance(field, Mapping):
        return []
    value = answer_value(raw_value)
    failures: list[str] = []

    kind = field.get("type")
    if isinstance(kind, str) and kind in FIELD_TYPES and not _has_type(kind, value):
        failures.append(f"type: must be {kind}")

    text = value if isinstance(value, str) else None
    number = value if isinstance(value, float) else None
    items = value if isinstance(value, tuple) else None
    if text is not None:
        length = len(text)
        failures.extend(
            _limit_failures(field, "minLength", length, "must have at least {} characters")
        )
        failures.extend(
            _limit_failures(field, "maxLength", length, "must have at most {} characters")
        )
    if number is not None:
        failures.extend(_limit_failures(field, "minimum", number, "must be >= {}"))
        failures.extend(_limit_failures(field, "maximum", number, "must be <= {}"))
    if items is not None:
        failures.extend(
            _limit_failures(field, "minItems", len(items), "must have at least {} items")
        )
        failures.extend(
            _limit_failures(field, "maxItems", len(items), "must have at most {} items")
        )

    fmt = field.get("format")
    if (
        text is not None
        and isinstance(fmt, str)
        and fmt in FORMATS
        and not matches_format(fmt, text)
    ):
        failures.append(f'format: must match format "{fmt}"')

    if "enum" in field and (text is None or text not in _string_members(field["enum"])):
        failures.append(f"enum: {ALLOWED_VALUES_TEXT}")

    if "oneOf" in field and _consts(field["oneOf"]).count(text) != 1:
        failures.append("oneOf: must equal exactly one option's const")

    selection = field.get("items")
    if items is not None and isinstance(selection, Mapping):
        if "enum" in selection:
            allowed = _string_members(selection["enum"])
            failures.extend(
                f"items[{index}].enum: {ALLOWED_VALUES_TEXT}"
                for index, item in enumerate(items)
                if item not in allowed
            )
        elif "anyOf" in selection:
            consts = _consts(selection["anyOf"])
            failures.extend(
                f"items[{index}].anyOf: must equal some option's const"
                for index, item in enumerate(items)
                if item not in consts
            )
    return failures


def _mapping(value: object) -> Mapping[object, object]:
    """`value` when it is a mapping, else an empty one (the checker reads defensively)."""
    return value if isinstance(value, Mapping) else {}


def _has_type(kind: str, value: AnswerValue | None) -> bool:
    match kind:
        case "string":
            return isinstance(value, str)
        case "boolean":
            return isinstance(value, bool)
        case "array":
            return isinstance(value, tuple)
        case "number":
            return isinstance(value, float)
        case "integer":
            return isinstance(value, float) and value.is_integer()
        case _:
            return True


def _limit_failures(
    field: Mapping[object, object], keyword: str, measured: float, requirement: str
) -> list[str]:
    limit = _number(field.get(keyword))
    if limit is None:
        return []
    failed = measured < limit if keyword.startswith("min") else measured > limit
    return [f"{keyword}: {requirement.format(canonical_text(limit))}"] if failed else []


def _string_members(value: object) -> frozenset[str]:
    if not isinstance(value, list | tuple):
        return frozenset()
    return frozenset(item for item in value if isinstance(item, str))


def _consts(value: object) -> list[str | None]:
    if not isinstance(value, list | tuple):
        return []
    return [
        const
        for option in value
        if isinstance(option, Mapping) and isinstance(const := option.get("const"), str)
    ]
