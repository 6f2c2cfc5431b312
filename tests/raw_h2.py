"""Raw HTTP/2 gRPC calls, for what no gRPC client will send: header values that are not
UTF-8, bodies that are not protobuf, frames of any length.

`raw_call(address, path, headers=..., body=...)` opens one plaintext connection, sends one
request and returns the response's headers and trailers merged (`grpc-status` and
friends), as bytes. Blocking; call it with `asyncio.to_thread`.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

import h2.config
import h2.connection
import h2.events

Headers = Sequence[tuple[bytes, bytes]]


def grpc_frame(body: bytes) -> bytes:
    """One length-prefixed gRPC message (uncompressed)."""
    return b"\x00" + len(body).to_bytes(4, "big") + body


def raw_call(
    address: str,
    path: str,
    *,
    headers: Headers = (),
    body: bytes = b"",
    framed: bool = True,
    timeout: float = 10.0,
) -> dict[bytes, bytes]:
    """Send one request to `address` and return every response header and trailer.

    `framed` False sends `body` as the DATA payload as it is (a truncated or oversized
    frame, say). A stream the server resets answers `{b"reset": b"<error code>"}`."""
    host, _, port = address.rpartition(":")
    connection = h2.connection.H2Connection(
        h2.config.H2Configuration(
            client_side=True,
            header_encoding=None,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
        )
    )
    answer: dict[bytes, bytes] = {}
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        connection.initiate_connection()
        stream = connection.get_next_available_stream_id()
        connection.send_headers(
            stream,
            [
                (b":method", b"POST"),
                (b":scheme", b"http"),
                (b":path", path.encode()),
                (b":authority", address.encode()),
                (b"content-type", b"application/grpc"),
                (b"te", b"trailers"),
                *headers,
            ],
        )
        connection.send_data(stream, grpc_frame(body) if framed else body, end_stream=True)
        sock.sendall(connection.data_to_send())
        done = False
        while not done:
            data = sock.recv(65535)
            if not data:
                break
            for event in connection.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                    answer.update((bytes(key), bytes(value)) for key, value in event.headers)
                elif isinstance(event, h2.events.StreamReset):
                    answer[b"reset"] = str(event.error_code).encode()
                    done = True
                elif isinstance(event, h2.events.StreamEnded):
                    done = True
            sock.sendall(connection.data_to_send())
    return answer
