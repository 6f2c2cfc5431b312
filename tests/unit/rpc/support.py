"""What the status-mapping tests share: a status as the client library would receive it."""

from __future__ import annotations

import grpc
from google.rpc import status_pb2


def as_rpc_error(status: status_pb2.Status) -> grpc.aio.AioRpcError:
    """The error a client sees for a call the server ended with `status`."""
    code = next(code for code in grpc.StatusCode if code.value[0] == status.code)
    return grpc.aio.AioRpcError(
        code,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(("grpc-status-details-bin", status.SerializeToString())),
        details=status.message,
    )
