"""`grpc.health.v1.Health` with all three methods (operations.md §3).

grpcio-health-checking's asyncio servicer implements `Check` and `Watch` but not `List`,
whose stock method raises `NotImplementedError`: every `List` call logged an ERROR traceback
and answered UNKNOWN. `GatewayHealthServicer` answers it with every registered status.
"""

from __future__ import annotations

from typing import Any

from grpc_health.v1 import health_pb2
from grpc_health.v1._async import HealthServicer


class GatewayHealthServicer(HealthServicer):  # type: ignore[misc] # grpc_health is untyped
    """The asyncio health servicer plus `List`: every name this server has a status for
    (`""`, `liveness`, and each served service), a non-atomic snapshot as the proto says."""

    async def List(  # noqa: N802 - the gRPC method name
        self, request: health_pb2.HealthListRequest, context: Any
    ) -> health_pb2.HealthListResponse:
        response = health_pb2.HealthListResponse()
        for name, status in tuple(self._server_status.items()):
            response.statuses[name].status = status
        return response


__all__ = ["GatewayHealthServicer"]
