"""Unit tests open no network socket: they test one component through its seams.

An autouse guard makes `bind`, `connect` and `connect_ex` of an IPv4 or IPv6 socket fail the
test, so a unit test that quietly starts a server or dials one is caught where it is written.
Unix socket pairs stay allowed: the event loop wakes itself through one.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest

NETWORK_FAMILIES = (socket.AF_INET, socket.AF_INET6)


def _guarded(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
    def call(self: socket.socket, address: object, *args: object) -> Any:
        if self.family in NETWORK_FAMILIES:
            raise AssertionError(f"a unit test called socket.{name}({address!r}); use a seam")
        return real(self, address, *args)

    return call


@pytest.fixture(autouse=True)
def _no_network_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("bind", "connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, _guarded(name, getattr(socket.socket, name)))
