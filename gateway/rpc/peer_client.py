"""`PeerClient`: what the gRPC clients of a standalone Router and Registry share.

Each holds one channel to its peer's `HOST:PORT`, sends the peer metadata (`call_metadata`)
on every call, and lives OPEN until an idempotent `close()` closes the channel, which ends
every call in flight. A unary call checks the answer's `harness-version`, turns a failed
call into the client's own typed error, and tells a cancellation by `close()` from one by
its caller. What differs between the two clients (their state enum, their errors and
log lines) is theirs: the subclass supplies it through the abstract methods.
"""

from __future__ import annotations

import abc
import asyncio
from typing import Any, Generic, NoReturn, TypeVar

import grpc

from gateway.closing import AsyncClosing
from gateway.rpc.peer import answered_version, call_metadata

StateT = TypeVar("StateT")


class PeerClient(AsyncClosing, Generic[StateT]):
    """A client of one peer service: channel, target, metadata and lifecycle."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        *,
        target: str,
        peer_token: str,
        opened: StateT,
        closed: StateT,
    ) -> None:
        self._channel = channel
        self._target = target
        self._metadata = call_metadata(peer_token)
        self._state = opened
        self._closed_state = closed

    @property
    def state(self) -> StateT:
        """OPEN until `close()`."""
        return self._state

    @property
    def target(self) -> str:
        """The peer's `HOST:PORT`."""
        return self._target

    async def close(self) -> None:
        """Close the channel, ending every call in flight; idempotent."""
        if self._closed():
            return
        self._state = self._closed_state
        await self._channel.close()

    @abc.abstractmethod
    def _refused_error(self) -> Exception:
        """What a call made on a client no longer OPEN raises."""

    @abc.abstractmethod
    def _closed_error(self) -> Exception:
        """What a call that `close()` ended raises."""

    @abc.abstractmethod
    def _version_error(self, announced: str) -> Exception:
        """What an answer announcing another `harness-version` raises."""

    @abc.abstractmethod
    def _failure(self, error: grpc.aio.AioRpcError) -> Exception:
        """What a call the peer failed raises (the client not closed)."""

    def _closed(self) -> bool:
        return self._state is self._closed_state

    def _check_open(self) -> None:
        if self._closed():
            raise self._refused_error()

    def _check_version(self, metadata: Any) -> None:
        announced = answered_version(metadata)
        if announced is not None:
            raise self._version_error(announced)

    def _raise_if_closed(self) -> None:
        """A call cancelled by `close()` (not by its caller) raises `_closed_error()`."""
        task = asyncio.current_task()
        if self._closed() and (task is None or task.cancelling() == 0):
            raise self._closed_error() from None

    def _raise_for(self, error: grpc.aio.AioRpcError) -> NoReturn:
        if self._closed():
            raise self._closed_error() from None
        raise self._failure(error) from None

    async def _unary(
        self, method: Any, request: Any, *, deadline: float, wait_for_ready: bool | None = None
    ) -> Any:
        """One unary call of `method` within `deadline` seconds, answered in our version."""
        self._check_open()
        call = method(
            request, metadata=self._metadata, timeout=deadline, wait_for_ready=wait_for_ready
        )
        try:
            response = await call
            self._check_version(await call.initial_metadata())
        except grpc.aio.AioRpcError as error:
            self._raise_for(error)
        except asyncio.CancelledError:
            self._raise_if_closed()
            raise
        return response


__all__ = ["PeerClient"]
