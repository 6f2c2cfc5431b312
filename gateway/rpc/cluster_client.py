"""`ClusterHintClient`: the sending side of `harness.v1.ClusterPeerService` (cluster.md §3.4).

Its `send` is the `SendHint` a `HintSender` (`gateway/cluster/hints.py`) calls: one `Hint`
to the replica at an advertised `HOST:PORT`, with the peer metadata (`call_metadata`: the
cluster's peer token, `harness-version`) and `from_replica` set to this replica's id, within
`HINT_DEADLINE`. Any failure, including an answer in another `harness-version`, raises
`HintUnsent`; the sender logs it and the target's poll recovers (a hint is never retried).

Channels come from a `HomeChannels` (`gateway/rpc/forward.py`): one per address, the least
recently used closed beyond its bound. Hints go to the same agent port forwarded calls do,
so a replica may share the forwarder's; without one the client opens its own, pinging as the
cluster's peer channels do (`open_home_channel`, cluster.md §9.1), and closes them in
`close()`. The call does not wait for a connection (`wait_for_ready=False`): a target that
is down fails at once, not at the deadline.
"""

from __future__ import annotations

import asyncio
import enum
from typing import Final, Self

import grpc
from harness_contract._gen.harness.v1 import cluster_pb2, cluster_pb2_grpc

from gateway.closing import AsyncClosing
from gateway.cluster.hints import HintUnsent
from gateway.rpc.forward import HomeChannels, open_home_channel
from gateway.rpc.keepalive import KeepalivePolicy
from gateway.rpc.peer import (
    answered_version,
    call_metadata,
    describe_failure,
    open_peer_channel,
    peer_target,
)
from gateway.settings import PEER_TLS_SCHEME

HINT_DEADLINE: Final = 2.0
"""Seconds one `Hint` call may take. The receiver answers at once, so anything slower is a
replica in trouble; two seconds keeps a stuck call from holding that target's next batch
(one call in flight per target) for longer than two poll intervals."""


class HintClientState(enum.StrEnum):
    """A `ClusterHintClient`'s lifecycle."""

    OPEN = "open"
    """Sending hints."""
    CLOSED = "closed"
    """Closed: `send` raises `HintUnsent`."""


class ClusterHintClient(AsyncClosing):
    """Sends `Hint` calls to the replicas of a cluster, one channel per address."""

    def __init__(
        self,
        channels: HomeChannels,
        *,
        replica_id: str,
        peer_token: str,
        owns_channels: bool,
    ) -> None:
        """Use `connect`; this only wires what it prepared."""
        self._channels = channels
        self._replica_id = replica_id
        self._metadata = call_metadata(peer_token)
        self._owns_channels = owns_channels
        self._state = HintClientState.OPEN

    @classmethod
    def connect(
        cls,
        *,
        replica_id: str,
        peer_token: str,
        tls: grpc.ChannelCredentials | None = None,
        keepalive: KeepalivePolicy | None = None,
        channels: HomeChannels | None = None,
    ) -> Self:
        """A client sending as `replica_id` with the cluster's `peer_token`; no I/O.

        With `channels` it uses (and never closes) the caller's; otherwise it opens its own:
        TLS with `tls` when given (`tls.peer_channel_credentials`), plaintext otherwise,
        pinging as `keepalive` says (by default as the cluster's peer channels do,
        `CLUSTER_PEER_KEEPALIVE`)."""
        if channels is not None:
            return cls(channels, replica_id=replica_id, peer_token=peer_token, owns_channels=False)

        def open_channel(address: str) -> grpc.aio.Channel:
            if keepalive is None:
                return open_home_channel(address, tls=tls)
            if tls is None:
                return open_peer_channel(address, keepalive=keepalive)
            return open_peer_channel(
                f"{PEER_TLS_SCHEME}{peer_target(address)}", tls=tls, keepalive=keepalive
            )

        return cls(
            HomeChannels(open_channel),
            replica_id=replica_id,
            peer_token=peer_token,
            owns_channels=True,
        )

    @property
    def state(self) -> HintClientState:
        """OPEN until `close()`."""
        return self._state

    async def send(
        self,
        address: str,
        conversations: tuple[str, ...],
        settled_posts: tuple[str, ...],
        delivery_agents: tuple[str, ...],
    ) -> None:
        """One `Hint` to the replica at `address` (`HOST:PORT`) within `HINT_DEADLINE`.

        Raises `HintUnsent` when the call failed, timed out, was answered in another
        version, or this client is closed."""
        if self._closed():
            raise HintUnsent("the cluster hint client is closed")
        request = cluster_pb2.HintRequest(
            from_replica=self._replica_id,
            conversations=conversations,
            settled_posts=settled_posts,
            delivery_agents=delivery_agents,
        )
        stub = cluster_pb2_grpc.ClusterPeerServiceStub(self._channels.get(address))
        call = stub.Hint(
            request, metadata=self._metadata, timeout=HINT_DEADLINE, wait_for_ready=False
        )
        try:
            await call
            announced = answered_version(await call.initial_metadata())
        except grpc.aio.AioRpcError as error:
            raise HintUnsent(f"hint to {address}: {describe_failure(error)}") from None
        except asyncio.CancelledError:
            # Ended by `close()`, not by the caller's own cancellation: a failed hint.
            task = asyncio.current_task()
            if self._closed() and (task is None or task.cancelling() == 0):
                raise HintUnsent("the cluster hint client is closed") from None
            raise
        if announced is not None:
            raise HintUnsent(f"hint to {address}: the replica speaks {announced}")

    def _closed(self) -> bool:
        return self._state is HintClientState.CLOSED

    async def close(self) -> None:
        """Close the channels this client opened (ending calls in flight); idempotent."""
        if self._state is HintClientState.CLOSED:
            return
        self._state = HintClientState.CLOSED
        if self._owns_channels:
            await self._channels.close()


__all__ = ["HINT_DEADLINE", "ClusterHintClient", "HintClientState"]
