"""The gRPC edge: the only package that imports grpc or the generated code.

`build_server(core, settings)` serves the agent API (`HarnessEndpointService`), the operator
API (`ManagementService`), health and reflection over a `GatewayCore`; `convert` turns
protobuf into the contract's dataclasses and back; `errors` holds the status table.
"""

from __future__ import annotations

from harness_contract.errors import InvalidRequestError

from gateway.rpc.server import RpcServer, RpcServerState, build_server

__all__ = ["InvalidRequestError", "RpcServer", "RpcServerState", "build_server"]
