"""The gRPC edge: the only package that imports grpc or the generated code.

`build_server(core, settings)` serves the agent API (`HarnessEndpointService`), the operator
API (`ManagementService`), health and reflection over a `GatewayCore`; the contract's
`harness_contract.wire` turns protobuf into its dataclasses and back (shared with the Python
client); `errors` holds the status table.
"""

from __future__ import annotations

from gateway.rpc.server import RpcServer, RpcServerState, build_server

__all__ = ["RpcServer", "RpcServerState", "build_server"]
