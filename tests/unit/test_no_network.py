"""The unit suite's socket guard (tests/unit/conftest.py) really refuses network sockets."""

from __future__ import annotations

import asyncio
import socket

import pytest


def test_binding_a_tcp_socket_fails_the_unit_test():
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock,
        pytest.raises(AssertionError, match="use a seam"),
    ):
        sock.bind(("127.0.0.1", 0))


async def test_dialing_through_the_event_loop_fails_the_unit_test():
    with pytest.raises(AssertionError, match="use a seam"):
        await asyncio.open_connection("127.0.0.1", 9)


def test_a_unix_socket_pair_stays_allowed_for_the_event_loop():
    left, right = socket.socketpair()
    with left, right:
        left.sendall(b"x")
        assert right.recv(1) == b"x"
