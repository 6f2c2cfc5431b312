"""The `harness.v1` API canary: the public protobuf surface, pinned.

The contract's acceptance asks that "Public type canaries pin exactly the service and
values above". `render_api` draws every service, method, message, field, oneof and enum
value of every `harness.v1` file as canonical text, and the first test compares it with
`golden/harness_v1_api.txt`, so any change to the API shows up as a diff in review. To
change the API deliberately, edit the proto files, run `make generate`, then
`HARNESS_UPDATE_GOLDEN=1 pytest tests/unit/test_api_canary.py` and commit the golden.

The other tests pin the rules the API follows (buf STANDARD style) and the contract's
closed vocabularies value by value.
"""

from __future__ import annotations

import importlib
import importlib.util
import keyword
import os
import pkgutil
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import harness_contract._gen.harness.v1 as generated
import pytest
from google.protobuf import descriptor_pb2, text_format

GOLDEN = Path(__file__).parent / "golden" / "harness_v1_api.txt"
UPDATE_VARIABLE = "HARNESS_UPDATE_GOLDEN"
PACKAGE = "harness.v1"
GENERATE_SCRIPT = Path(__file__).resolve().parents[2] / "proto" / "generate.py"

FieldProto = descriptor_pb2.FieldDescriptorProto
MessageProto = descriptor_pb2.DescriptorProto
EnumProto = descriptor_pb2.EnumDescriptorProto


def api_files() -> list[descriptor_pb2.FileDescriptorProto]:
    """The descriptors of every generated `harness.v1` file, sorted by file name."""
    files = []
    for module_info in pkgutil.iter_modules(generated.__path__):
        if module_info.name.endswith("_pb2"):
            module = importlib.import_module(f"{generated.__name__}.{module_info.name}")
            files.append(
                descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
            )
    return sorted(files, key=lambda file: file.name)


def walk_messages(messages, prefix: str) -> Iterator[tuple[str, MessageProto]]:
    """Every message, nested ones included, with its name relative to the package."""
    for message in messages:
        name = f"{prefix}{message.name}"
        yield name, message
        yield from walk_messages(message.nested_type, f"{name}.")


def walk_enums(file: descriptor_pb2.FileDescriptorProto) -> Iterator[tuple[str, EnumProto]]:
    """Every enum of a file, nested ones included, with its name relative to the package."""
    for enum in file.enum_type:
        yield enum.name, enum
    for name, message in walk_messages(file.message_type, ""):
        for enum in message.enum_type:
            yield f"{name}.{enum.name}", enum


def all_messages() -> dict[str, MessageProto]:
    return {
        name: message
        for file in api_files()
        for name, message in walk_messages(file.message_type, "")
    }


def all_enums() -> dict[str, EnumProto]:
    return {name: enum for file in api_files() for name, enum in walk_enums(file)}


def short_type(type_name: str) -> str:
    """A field's type name without the leading dot and, for our own types, the package."""
    return type_name.removeprefix(".").removeprefix(f"{PACKAGE}.")


def default_json_name(name: str) -> str:
    """protoc's default JSON name: lower_snake to lowerCamel."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def render_options(options) -> str:
    """Non-default options as one line, or nothing."""
    text = text_format.MessageToString(options, as_one_line=True)
    return f" [{text}]" if text else ""


def render_type(field: FieldProto) -> str:
    """A field's type: a scalar's name, or `message X` / `enum X` for a named type."""
    scalar = FieldProto.Type.Name(field.type).removeprefix("TYPE_").lower()
    if field.type in (FieldProto.TYPE_MESSAGE, FieldProto.TYPE_ENUM):
        return f"{scalar} {short_type(field.type_name)}"
    return scalar


def is_real_oneof_member(field: FieldProto) -> bool:
    """Whether a field belongs to a declared oneof (not a proto3 optional's synthetic one)."""
    return field.HasField("oneof_index") and not field.proto3_optional


def render_field(
    field: FieldProto, message: MessageProto, map_entries: dict[str, MessageProto]
) -> str:
    entry = map_entries.get(short_type(field.type_name))
    if entry is not None:
        key, value = entry.field
        type_name = f"map<{render_type(key)}, {render_type(value)}>"
    elif field.label == FieldProto.LABEL_REPEATED:
        type_name = f"repeated {render_type(field)}"
    elif field.proto3_optional:
        type_name = f"optional {render_type(field)}"
    else:
        type_name = render_type(field)
    line = f"    field {field.number} {field.name}: {type_name}"
    if is_real_oneof_member(field):
        line += f" oneof={message.oneof_decl[field.oneof_index].name}"
    if field.HasField("json_name") and field.json_name != default_json_name(field.name):
        line += f" json={field.json_name}"
    return line + render_options(field.options)


def render_service(service: descriptor_pb2.ServiceDescriptorProto) -> list[str]:
    lines = [f"  service {service.name}{render_options(service.options)}"]
    for method in sorted(service.method, key=lambda method: method.name):
        request = ("stream " if method.client_streaming else "") + short_type(method.input_type)
        response = ("stream " if method.server_streaming else "") + short_type(method.output_type)
        lines.append(
            f"    rpc {method.name}({request}) returns ({response}){render_options(method.options)}"
        )
    return lines


def render_message(
    name: str, message: MessageProto, map_entries: dict[str, MessageProto]
) -> list[str]:
    lines = [f"  message {name}{render_options(message.options)}"]
    fields = sorted(message.field, key=lambda field: field.number)
    lines.extend(render_field(field, message, map_entries) for field in fields)
    members: dict[str, list[str]] = {}
    for field in fields:
        if is_real_oneof_member(field):
            members.setdefault(message.oneof_decl[field.oneof_index].name, []).append(field.name)
    lines.extend(f"    oneof {oneof}: {', '.join(members[oneof])}" for oneof in sorted(members))
    lines.extend(f"    reserved {r.start} to {r.end - 1}" for r in message.reserved_range)
    lines.extend(f"    reserved {reserved!r}" for reserved in sorted(message.reserved_name))
    return lines


def render_enum(name: str, enum: EnumProto) -> list[str]:
    lines = [f"  enum {name}{render_options(enum.options)}"]
    values = sorted(enum.value, key=lambda value: (value.number, value.name))
    lines.extend(f"    {v.number} {v.name}{render_options(v.options)}" for v in values)
    lines.extend(f"    reserved {r.start} to {r.end}" for r in enum.reserved_range)
    lines.extend(f"    reserved {reserved!r}" for reserved in sorted(enum.reserved_name))
    return lines


def render_api(files: list[descriptor_pb2.FileDescriptorProto]) -> str:
    """The canonical text of the API.

    Files sorted by name (a type's file decides its Python module); in each, its imports,
    then services, messages (nested ones flattened) and enums, each sorted by name. Methods
    show their streaming; fields, in number order, their label (`repeated`, proto3
    `optional`, `map<K, V>`), type, oneof and any non-default JSON name or option; enum
    values are in number order. Declaration order does not show, as it is not API.
    """
    lines: list[str] = []
    for file in sorted(files, key=lambda file: file.name):
        lines.append(f"file {file.name}")
        lines.append(f"  syntax {file.syntax or 'proto2'}")
        lines.append(f"  package {file.package}")
        lines.extend(f"  import {dependency}" for dependency in sorted(file.dependency))
        if options := render_options(file.options):
            lines.append(f"  options{options}")
        for service in sorted(file.service, key=lambda service: service.name):
            lines.extend(render_service(service))
        messages = dict(walk_messages(file.message_type, ""))
        map_entries = {
            name: message for name, message in messages.items() if message.options.map_entry
        }
        for name in sorted(messages.keys() - map_entries.keys()):
            lines.extend(render_message(name, messages[name], map_entries))
        enums = dict(walk_enums(file))
        for name in sorted(enums):
            lines.extend(render_enum(name, enums[name]))
    return "\n".join(lines) + "\n"


def load_generate_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("harness_proto_generate", GENERATE_SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs: its dataclasses look their module up in sys.modules.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def enum_values(enum_name: str) -> list[str]:
    """An enum's values other than the zero value, prefix stripped, in number order."""
    enum = all_enums()[enum_name]
    prefix = upper_snake(enum.name) + "_"
    return [
        value.name.removeprefix(prefix)
        for value in sorted(enum.value, key=lambda value: value.number)
        if value.number != 0
    ]


def upper_snake(pascal: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", pascal).upper()


def contract_to_upper_snake(value: str) -> str:
    """A contract value (`invalid-address`, `all_gather`) as an enum value suffix."""
    return value.replace("-", "_").upper()


def contract_to_field_name(kind: str) -> str:
    """A contract `kind` (`collectiveRequest`, `no-answer`) as a lower_snake field name."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", kind).replace("-", "_").lower()


def oneof_members(message_name: str, oneof_name: str) -> list[str]:
    message = all_messages()[message_name]
    index = [oneof.name for oneof in message.oneof_decl].index(oneof_name)
    return [
        field.name
        for field in sorted(message.field, key=lambda field: field.number)
        if field.HasField("oneof_index") and field.oneof_index == index
    ]


def test_the_api_matches_the_checked_in_golden_rendering():
    rendered = render_api(api_files())
    if os.environ.get(UPDATE_VARIABLE) == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(rendered, encoding="utf-8")
        return
    golden = GOLDEN.read_text(encoding="utf-8") if GOLDEN.is_file() else ""
    assert rendered == golden, (
        f"The harness.v1 API differs from {GOLDEN.name}. If the change is deliberate, "
        f"regenerate the golden with `{UPDATE_VARIABLE}=1 pytest tests/unit/test_api_canary.py` "
        "and commit it with the proto change."
    )


def test_every_api_file_is_proto3_in_the_versioned_harness_v1_package():
    files = api_files()
    assert [file.name for file in files] == [
        "harness/v1/cluster.proto",
        "harness/v1/endpoint.proto",
        "harness/v1/errors.proto",
        "harness/v1/firewall_middleware.proto",
        "harness/v1/guidance.proto",
        "harness/v1/history.proto",
        "harness/v1/management.proto",
        "harness/v1/registry.proto",
        "harness/v1/router.proto",
        "harness/v1/types.proto",
    ]
    for file in files:
        assert file.syntax == "proto3", file.name
        assert file.package == PACKAGE, file.name


def test_every_enum_zero_value_is_unspecified_and_every_value_carries_the_enum_prefix():
    for name, enum in all_enums().items():
        prefix = upper_snake(enum.name) + "_"
        zero = [value.name for value in enum.value if value.number == 0]
        assert zero == [f"{prefix}UNSPECIFIED"], name
        assert enum.value[0].number == 0, name
        for value in enum.value:
            assert value.name.startswith(prefix), value.name
            assert re.fullmatch(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)*", value.name), value.name


def test_every_name_follows_the_buf_standard_case_rules_and_avoids_python_keywords():
    for name, message in all_messages().items():
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]*", message.name), name
        for field in message.field:
            assert re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)*", field.name), f"{name}.{field.name}"
            assert not keyword.iskeyword(field.name), f"{name}.{field.name}"
        for oneof in message.oneof_decl:
            assert re.fullmatch(r"_?[a-z][a-z0-9]*(_[a-z0-9]+)*", oneof.name), (
                f"{name}.{oneof.name}"
            )
            assert not keyword.iskeyword(oneof.name), f"{name}.{oneof.name}"
    for name, enum in all_enums().items():
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]*", enum.name), name


def test_every_service_name_ends_in_service():
    services = [service.name for file in api_files() for service in file.service]
    assert sorted(services) == [
        "ClusterPeerService",
        "FirewallMiddlewareService",
        "HarnessEndpointService",
        "ManagementService",
        "RegistryService",
        "RouterService",
    ]
    assert all(service.endswith("Service") for service in services)


def test_every_rpc_has_its_own_request_and_response_named_after_it():
    used: list[str] = []
    for file in api_files():
        for service in file.service:
            for method in service.method:
                request = short_type(method.input_type)
                response = short_type(method.output_type)
                # buf's RPC_REQUEST_STANDARD_NAME: `<Rpc>Request` or `<Service><Rpc>Request`.
                assert request in (f"{method.name}Request", f"{service.name}{method.name}Request")
                assert response in (
                    f"{method.name}Response",
                    f"{service.name}{method.name}Response",
                )
                used.extend([request, response])
    assert len(used) == len(set(used)), "a request or response message serves two RPCs"


def test_the_endpoint_service_has_exactly_the_contract_methods_and_streams_only_messages():
    (service,) = [
        service
        for file in api_files()
        for service in file.service
        if service.name == "HarnessEndpointService"
    ]
    shapes = {
        method.name: (method.client_streaming, method.server_streaming) for method in service.method
    }
    assert shapes == {
        "Send": (False, False),
        "Messages": (False, True),
        "Acknowledge": (False, False),
        "ParseMessageText": (False, False),
        "ReadSend": (False, False),
    }


def test_send_error_reasons_are_the_eleven_contract_reasons_and_the_gateways_extension():
    contract = [
        "invalid-address",
        "unknown-agent",
        "membership-invalid",
        "content-invalid",
        "not-registered",
        "version-mismatch",
        "certification-unavailable",
        "persistence-failed",
        "network-unavailable",
        "delivery-pending",
        "outcome-unknown",
    ]
    extension = ["too-many-operations"]
    assert enum_values("SendErrorReason") == [
        contract_to_upper_snake(value) for value in [*contract, *extension]
    ]


@pytest.mark.parametrize(
    ("enum_name", "contract_values"),
    [
        (
            "ListenErrorReason",
            ["already-listening", "incompatible-daemon", "transport-failed", "decode-failed"],
        ),
        (
            "DeliveryAcknowledgeErrorReason",
            ["unknown-delivery", "delivery-conflict", "persistence-failed", "transport-failed"],
        ),
        # With a client extension: a refused token at connect.
        (
            "ConnectErrorReason",
            ["transport-failed", "incompatible-daemon", "decode-failed", "authentication-failed"],
        ),
        # A gateway extension (the UNAUTHENTICATED detail), closed like the contract's.
        ("AuthenticationErrorReason", ["missing", "malformed", "unknown", "revoked"]),
        (
            "FirewallRefusal",
            ["forbidden-recipient", "content-blocked", "rate-limited", "middleware-unavailable"],
        ),
        ("Expectation", ["required", "permitted", "wait", "none"]),
        ("CollectiveOp", ["gather", "all_gather"]),
        ("MessageTextOperation", ["message", "gather", "all_gather", "answer"]),
        ("AnswerFieldReason", ["missing", "unexpected", "invalid"]),
        ("FailureDelivery", ["result", "inbound"]),
    ],
)
def test_each_closed_enum_holds_exactly_the_contract_values(enum_name, contract_values):
    assert enum_values(enum_name) == [contract_to_upper_snake(value) for value in contract_values]


@pytest.mark.parametrize(
    ("message_name", "oneof_name", "contract_kinds"),
    [
        (
            "InboundItem",
            "kind",
            ["multicast", "collectiveRequest", "collectiveResult", "operationFailed"],
        ),
        ("InboundMessage", "kind", ["direct", "group"]),
        (
            "CollectiveMemberOutcome",
            "kind",
            ["answered", "declined", "invalid", "no-answer", "withheld"],
        ),
        (
            "CollectiveError",
            "failure",
            [
                "members-unreachable",
                "schema-invalid",
                "answer-invalid",
                "request-none",
                "request-ambiguous",
                "request-answered",
                "request-expired",
            ],
        ),
        ("CollectiveOperation", "op", ["multicast", "gather", "all_gather"]),
        ("CollectiveResponse", "action", ["accept", "decline"]),
        ("SendInput", "input", ["message", "answer"]),
        ("ContentPart", "part", ["text", "data"]),
        ("LocalGuidance", "kind", ["checked", "collective"]),
        ("Instruction", "kind", ["expectation", "uncertain"]),
        ("CollectiveResultItem.Question", "kind", ["text", "withheld"]),
        ("HistoryExportRecord", "kind", ["inbound", "outbound", "export-failed"]),
        ("HistoryExportRecord.Outbound", "outcome", ["sent", "failed"]),
        ("ReadSendResponse", "state", ["absent", "pending", "indeterminate", "returned"]),
        ("SendFailure", "failure", ["sendError", "collectiveError", "firewallSendError"]),
        ("AcknowledgeResult", "result", ["ok", "error"]),
        ("ParseMessageTextResponse", "result", ["input", "error"]),
    ],
)
def test_each_union_has_exactly_one_variant_per_contract_kind(
    message_name, oneof_name, contract_kinds
):
    assert oneof_members(message_name, oneof_name) == [
        contract_to_field_name(kind) for kind in contract_kinds
    ]


def test_a_collective_request_names_its_requester_sender_with_the_json_name_from():
    message = all_messages()["CollectiveRequestItem"]
    (field,) = [field for field in message.field if field.name == "sender"]
    assert field.json_name == "from"


def test_contract_optionals_track_presence():
    # `collective`: an omitted collective and {op: "multicast"} bind an idempotency key
    # differently, so a message field (which tracks presence) carries it.
    expected_optional_scalars = {
        ("SendRequest", "idempotency_key"),
        ("SendResult", "operation_id"),
        ("SendError", "detail"),
        ("CollectiveError.UnreachableMember", "detail"),
        ("CollectiveError.AnswerField", "detail"),
        ("HistoryExportRecord.Sent", "operation_id"),
    }
    messages = all_messages()
    for message_name, field_name in expected_optional_scalars:
        (field,) = [field for field in messages[message_name].field if field.name == field_name]
        assert field.proto3_optional, f"{message_name}.{field_name}"
    (collective,) = [
        field for field in messages["SendInput.Message"].field if field.name == "collective"
    ]
    assert collective.type == FieldProto.TYPE_MESSAGE
    assert short_type(collective.type_name) == "CollectiveOperation"


def test_an_omitted_collective_and_an_explicit_multicast_stay_distinct_on_the_wire():
    from harness_contract._gen.harness.v1 import types_pb2

    omitted = types_pb2.SendInput(message=types_pb2.SendInput.Message(to="agent:bob", text="hi"))
    explicit = types_pb2.SendInput(
        message=types_pb2.SendInput.Message(
            to="agent:bob",
            text="hi",
            collective=types_pb2.CollectiveOperation(
                multicast=types_pb2.CollectiveOperation.Multicast()
            ),
        )
    )
    assert not types_pb2.SendInput.FromString(omitted.SerializeToString()).message.HasField(
        "collective"
    )
    decoded = types_pb2.SendInput.FromString(explicit.SerializeToString())
    assert decoded.message.collective.WhichOneof("op") == "multicast"


def comment_paths(
    file: descriptor_pb2.FileDescriptorProto,
) -> Iterator[tuple[tuple[int, ...], str]]:
    """The source path and name of every element that must carry a leading comment."""
    message_type, enum_type, service_type = 4, 5, 6  # FileDescriptorProto field numbers
    field, nested_type, nested_enum, oneof_decl = 2, 3, 4, 8  # DescriptorProto
    enum_value, method = 2, 2  # EnumDescriptorProto, ServiceDescriptorProto

    def enums(path: tuple[int, ...], items, prefix: str):
        for index, enum in enumerate(items):
            yield (*path, index), f"{prefix}{enum.name}"
            for value_index, value in enumerate(enum.value):
                yield (*path, index, enum_value, value_index), f"{prefix}{enum.name}.{value.name}"

    def messages(path: tuple[int, ...], items, prefix: str):
        for index, message in enumerate(items):
            here = (*path, index)
            name = f"{prefix}{message.name}"
            if message.options.map_entry:
                continue
            yield here, name
            for field_index, item in enumerate(message.field):
                yield (*here, field, field_index), f"{name}.{item.name}"
            for oneof_index, oneof in enumerate(message.oneof_decl):
                if not oneof.name.startswith("_"):  # synthetic oneofs of proto3 optionals
                    yield (*here, oneof_decl, oneof_index), f"{name}.{oneof.name}"
            yield from messages((*here, nested_type), message.nested_type, f"{name}.")
            yield from enums((*here, nested_enum), message.enum_type, f"{name}.")

    yield from messages((message_type,), file.message_type, "")
    yield from enums((enum_type,), file.enum_type, "")
    for index, service in enumerate(file.service):
        yield (service_type, index), service.name
        for method_index, item in enumerate(service.method):
            yield (service_type, index, method, method_index), f"{service.name}.{item.name}"


def test_every_message_field_oneof_enum_value_service_and_method_has_a_comment():
    descriptor_set = load_generate_script().load_descriptor_set(include_source_info=True)
    missing: list[str] = []
    for file in descriptor_set.file:
        if not file.name.startswith("harness/v1/"):
            continue
        commented = {
            tuple(location.path)
            for location in file.source_code_info.location
            if location.leading_comments.strip()
        }
        missing.extend(
            f"{file.name}: {name}" for path, name in comment_paths(file) if path not in commented
        )
        file_comment = [
            location
            for location in file.source_code_info.location
            if tuple(location.path) == (12,)  # the `syntax` statement
            and (location.leading_comments.strip() or location.leading_detached_comments)
        ]
        if not file_comment:
            missing.append(f"{file.name}: the file header")
    assert missing == []
