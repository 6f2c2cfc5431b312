"""The gateway and the Python client agree on every value because they hold one definition.

`harness_client` re-exports `harness_contract`'s values and failures (the very objects the
gateway builds) and adds only what happens on the client's side of the wire; both decode
and encode through `harness_contract.wire`. These tests pin that: the exports are the
contract's objects, no client module redefines one, and every failure a status can carry
comes back from the wire equal to what the gateway sent.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import harness_client
import harness_contract.errors
import harness_contract.guidance
import harness_contract.management
import harness_contract.values
import pytest
from harness_client import InboundDelivery, to_json
from harness_contract import codec, wire
from harness_contract.errors import (
    AuthenticationError,
    AuthenticationErrorReason,
    HarnessError,
    InvalidIdempotencyKeyError,
    InvalidRequestError,
    InvalidRequestReason,
    PermissionDeniedError,
    PermissionDeniedReason,
    UnavailableError,
    UnavailableReason,
)
from harness_contract.management import ManagementError, ManagementErrorReason

from tests.unit.rpc.samples import CLOSED_ERRORS, DELIVERIES

CONTRACT_MODULES = (
    harness_contract.errors,
    harness_contract.guidance,
    harness_contract.management,
    harness_contract.values,
)
CLIENT_ROOT = Path(harness_client.__file__).parent

STATUS_ERRORS: list[HarnessError] = [
    *(
        AuthenticationError(reason, "authentication failed: x")
        for reason in AuthenticationErrorReason
    ),
    PermissionDeniedError(PermissionDeniedReason.WRONG_ROLE, "permission denied: admin token"),
    *(UnavailableError(reason, "the gateway is not ready yet") for reason in UnavailableReason),
    InvalidRequestError(InvalidRequestReason.INVALID_REQUEST, "invalid request: input"),
    InvalidRequestError(InvalidRequestReason.MALFORMED_REQUEST, "the body is not a Send"),
    *(ManagementError(reason, "no agent bob") for reason in ManagementErrorReason),
    InvalidIdempotencyKeyError(),
]
"""The failures the gateway answers outside the contract's unions."""


def contract_names() -> dict[str, object]:
    return {
        name: value
        for module in CONTRACT_MODULES
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
    }


def test_every_export_named_like_a_contract_value_is_the_contracts_own_object():
    contract = contract_names()
    shared = [name for name in harness_client.__all__ if name in contract]
    # Every value, failure and enum is shared; the client has few names of its own.
    assert len(shared) >= 70
    for name in shared:
        assert getattr(harness_client, name) is contract[name], name


def test_no_client_module_defines_a_class_the_contract_defines():
    contract = contract_names()
    for path in sorted(CLIENT_ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
        assert not defined & set(contract), f"{path.name} redefines {defined & set(contract)}"


def test_the_client_has_no_protobuf_converter_of_its_own():
    for path in sorted(CLIENT_ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert not {name for name in functions if name.endswith(("_to_proto", "_from_proto"))}


CONVERTER = re.compile(r"\w+_(?:to|from)_(?:json|proto)|to_json|status_of|error_of_status")
"""The converters a split package's modules define and the package itself exports."""


def submodules(package: ModuleType) -> list[ModuleType]:
    return [
        importlib.import_module(f"{package.__name__}.{info.name}")
        for info in pkgutil.iter_modules(package.__path__)
    ]


@pytest.mark.parametrize("package", [codec, wire], ids=lambda package: package.__name__)
def test_a_split_package_exports_every_converter_its_modules_define(package):
    # `harness_contract.codec` and `.wire` are one import each, whatever modules hold them.
    modules = submodules(package)
    assert len(modules) >= 6
    converters = {
        name: value
        for module in modules
        for name, value in vars(module).items()
        if inspect.isfunction(value)
        and value.__module__ == module.__name__
        and not name.startswith("_")
        and CONVERTER.fullmatch(name)
    }
    assert len(converters) >= 25
    for name, value in converters.items():
        assert getattr(package, name) is value, name
        assert name in package.__all__, name


@pytest.mark.parametrize("error", [*CLOSED_ERRORS, *STATUS_ERRORS], ids=repr)
def test_every_failure_comes_back_from_its_status_equal_with_its_reason_and_text(error):
    status = wire.status_of(error)
    # Through the bytes, as the trailer carries it.
    received = type(status).FromString(status.SerializeToString())
    decoded = wire.error_of_status(received)
    assert decoded == error
    assert decoded is not None
    assert (decoded.reason, decoded.message, decoded.status_code) == (
        error.reason,
        error.message,
        error.status_code,
    )
    assert received.code == error.status_code.value


def test_a_status_naming_nothing_known_decodes_to_nothing():
    status = wire.status_of(UnavailableError(UnavailableReason.NOT_READY, "starting"))
    del status.details[:]
    assert wire.error_of_status(status) is None


@pytest.mark.parametrize("delivery", DELIVERIES, ids=repr)
def test_a_received_delivery_prints_the_contract_json_of_the_gateways_delivery(delivery):
    received = wire.delivery_from_proto(wire.delivery_to_proto(delivery))
    client_delivery = InboundDelivery(
        token=received.token, item=received.item, guidance=received.guidance
    )
    assert to_json(client_delivery) == codec.to_json(delivery)
    assert client_delivery.delivery == delivery


def test_the_client_errors_module_holds_only_the_client_side_failures():
    from harness_client import _errors

    classes = {
        name
        for name, value in vars(_errors).items()
        if inspect.isclass(value) and value.__module__ == _errors.__name__
    }
    assert classes == {"ClientReason", "TransportError", "EndpointClosedError"}
