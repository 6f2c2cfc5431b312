"""Following a cluster replica's `harness-home` hint: `_channel.home_hint` and `HomeRoute`."""

from __future__ import annotations

import asyncio

import grpc
from harness_client import (
    SendError,
    SendErrorReason,
    TransportError,
    UnavailableError,
    UnavailableReason,
)
from harness_client._channel import HomeRoute, home_hint, home_options


def test_the_home_hint_is_read_from_initial_metadata_as_host_and_port():
    assert home_hint((("harness-stream", "open"), ("harness-home", "10.0.0.7:7770"))) == (
        "10.0.0.7:7770"
    )
    assert home_hint((("harness-home", "replica-2.harness:7770"),)) == "replica-2.harness:7770"
    assert home_hint((("harness-home", "[::1]:7770"),)) == "[::1]:7770"
    assert home_hint((("harness-stream", "open"),)) is None
    assert home_hint(None) is None
    for malformed in ("replica-2", ":7770", "replica-2:http", "replica-2:0", "replica-2:70000"):
        assert home_hint((("harness-home", malformed),)) is None


def home_of(route: HomeRoute) -> str | None:
    """The route's home now (a call, so mypy keeps no earlier assert's narrowing)."""
    return route.home_address


def hint(address: str) -> tuple[tuple[str, str], ...]:
    return (("harness-home", address),)


class Dialled:
    """Channels the route dialled, never used: creating a gRPC channel opens no socket."""

    def __init__(self) -> None:
        self.addresses: list[str] = []
        self.channels: list[grpc.aio.Channel] = []

    def __call__(self, address: str) -> grpc.aio.Channel:
        self.addresses.append(address)
        channel = grpc.aio.insecure_channel(address)
        self.channels.append(channel)
        return channel


class Reachable:
    """Which dialled homes connect (instead of gRPC's own connection attempt)."""

    def __init__(self, dialled: Dialled, *unreachable: str) -> None:
        self.dialled = dialled
        self.unreachable = set(unreachable)

    async def __call__(self, channel: grpc.aio.Channel) -> bool:
        address = self.dialled.addresses[self.dialled.channels.index(channel)]
        return address not in self.unreachable


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def settled(route: HomeRoute) -> None:
    """Let the route's background dial end."""
    if route._pending is not None:
        await route._pending[1]


def route_with(dialled: Dialled, *unreachable: str, clock: Clock | None = None) -> HomeRoute:
    return HomeRoute(
        grpc.aio.insecure_channel("service:7770"),
        dialled,
        ready=Reachable(dialled, *unreachable),
        clock=clock or Clock(),
    )


async def test_the_route_follows_a_hint_once_the_home_connects_and_goes_back_when_it_is_lost():
    dialled = Dialled()
    route = route_with(dialled)
    target = route.via()
    target.observe(hint("replica-2:7770"))
    assert route.via() is target  # not before the home connected
    await settled(route)
    home = route.via()
    assert home is not target
    assert home_of(route) == "replica-2:7770"
    home.observe(())  # the home answering its own agent names nobody: stay
    home.observe(hint("replica-2:7770"))
    assert route.via() is home
    home.failed(SendError(SendErrorReason.UNKNOWN_AGENT))  # an answer, not a lost home
    assert route.via() is home
    home.failed(TransportError(grpc.StatusCode.UNAVAILABLE, "Connection refused"))
    assert route.via() is target
    assert home_of(route) is None
    assert dialled.addresses == ["replica-2:7770"]
    await route.close()


async def test_a_home_that_does_not_connect_is_not_followed_nor_dialled_again_for_a_while():
    dialled, clock = Dialled(), Clock()
    route = route_with(dialled, "10.0.0.7:7770", clock=clock)
    for _ in range(3):
        route.via().observe(hint("10.0.0.7:7770"))
        await settled(route)
    assert home_of(route) is None
    assert dialled.addresses == ["10.0.0.7:7770"]
    clock.now += 61.0
    route.via().observe(hint("10.0.0.7:7770"))
    await settled(route)
    assert dialled.addresses == ["10.0.0.7:7770", "10.0.0.7:7770"]
    await route.close()


async def test_a_failure_of_a_home_no_longer_followed_changes_nothing():
    route = route_with(Dialled())
    route.via().observe(hint("replica-2:7770"))
    await settled(route)
    old = route.via()
    old.observe(hint("replica-3:7770"))  # the agent moved on
    await settled(route)
    new = route.via()
    assert home_of(route) == "replica-3:7770"
    old.failed(UnavailableError(UnavailableReason.SHUTTING_DOWN, "stopping"))
    assert route.via() is new
    await route.close()


async def test_a_route_that_dials_nothing_ignores_hints_and_close_closes_every_channel():
    plain = HomeRoute(grpc.aio.insecure_channel("gateway:7770"), None)
    plain.via().observe(hint("replica-2:7770"))
    assert home_of(plain) is None
    await plain.close()

    dialled = Dialled()
    route = route_with(dialled)
    route.via().observe(hint("replica-2:7770"))
    await settled(route)
    route.via().observe(hint("replica-3:7770"))
    await settled(route)  # replica-2's channel now waits out its grace
    await asyncio.wait_for(route.close(), 5.0)  # at once, not after the grace
    for channel in dialled.channels:
        assert channel.get_state() is grpc.ChannelConnectivity.SHUTDOWN


def test_a_home_is_dialled_without_the_options_that_name_the_configured_target():
    assert home_options(
        [
            ("grpc.ssl_target_name_override", "service.example"),
            ("grpc.default_authority", "service.example"),
            ("grpc.keepalive_time_ms", 1000),
        ]
    ) == [("grpc.keepalive_time_ms", 1000)]
