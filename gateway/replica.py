"""One replica's share of the cluster's work: what it sequences, hosts, polls and hints
(cluster.md §3–§6).

`ClusterReplica` ties the replica's `Membership` to the engine and the agents:

- **Sequencing** (`ClusterSequencing`, the engine's `Sequencing`): a conversation is sequenced
  here while this replica holds its sequencing partition; members' keys come from their sealed
  seeds in the shared database; an intent bound here for a conversation sequenced elsewhere
  carries its partition and descriptor, and its sequencer is hinted once the bind committed.
- **Routing** (`ClusterRoutes`, the forwarder's `HomeRoutes`): an agent token's home is the
  holder of its home partition, by the membership's view of the partitions table.
- **Claims and releases.** When partitions are claimed, the agents homed in them are hosted
  from rows read after the claim, and their queued work (open intents of conversations
  sequenced there, pending deliveries) is picked up at once. A partition offered as surplus is
  torn down — its agents unhosted, its conversations dropped from the sequencer — and released
  through the writer, bounded by `HANDOVER_TIMEOUT`.
- **PostgreSQL is the queue; every peer call is a hint** (cluster.md §3.4). Every
  `POLL_INTERVAL` the replica reads the conversations with open intents in its sequencing
  partitions, the agents with pending deliveries in its home partitions, and the states of
  the intents its sends wait for; hints from other replicas do the same at once.
- After a unit commits, `certified(...)` and `deliveries(...)` hint the homes of authors and
  recipients that are not hosted here.

Everything it starts is owned by its one task set, closed by `close()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterable, Mapping
from typing import Final, Protocol

from harness_contract.ids import token_digest

from gateway.cluster.hints import HintSender, parse_settled_post, settled_post
from gateway.cluster.membership import Membership
from gateway.cluster.partitions import home_partition, sequencing_partition
from gateway.cluster.routing import HERE, Placement, Remote
from gateway.cluster.seeds import SeedKey
from gateway.engine import protocol as p
from gateway.engine.cluster_order import ClusterOrder
from gateway.engine.sequencing import OpenIntent
from gateway.engine.state import BindRefused
from gateway.identity.keys import SigningKey
from gateway.store.records import (
    ConversationRow,
    IdentityRow,
    IntentRow,
    IntentState,
    PutIntent,
    ReleasePartitions,
    Write,
    set_aside_reason,
)
from gateway.tasks import OwnedTasks

logger = logging.getLogger(__name__)

POLL_INTERVAL: Final = 1.0
"""Seconds between the replica's reads of its queued work (cluster.md §3.4): a lost hint costs
at most this long."""

HANDOVER_TIMEOUT: Final = 10.0
"""Seconds a release may wait for the partition's units in flight before releasing anyway
(cluster.md §3.2): the writer commits in order, so waiting only keeps memory tidy."""

FORGET_POLL: Final = 0.05
"""Seconds between tries to drop a released partition's conversation whose unit is in flight."""

MEMBERSHIP_CACHE: Final = 65_536
"""Conversations whose stored MembershipHash is remembered for binds sequenced elsewhere."""

MEMBERSHIP_TTL: Final = 1.0
"""Seconds a remembered foundation is trusted for binds sequenced elsewhere before its rows are
read again, so a home refuses binds to a conversation set aside meanwhile within about this
long (cluster.md §5.4); an intent bound in that window is refused by the sequencer."""

TOKEN_CACHE: Final = 65_536
"""Token digests remembered with their AgentId for routing (never their revocation: the home
authenticates every call itself)."""


class ClusterRows(Protocol):
    """The shared database's reads the replica needs (the cluster `PostgresStore`)."""

    partitions: int | None

    async def conversation_rows(self, conversation_id: str) -> dict[str, ConversationRow]: ...

    async def open_intents_of(self, conversation_id: str) -> list[tuple[str, IntentRow, bytes]]: ...

    async def open_conversations(self, partitions: Collection[int]) -> list[str]: ...

    async def agents_with_pending(self, partitions: Collection[int]) -> list[str]: ...

    async def intent_states(
        self, post_ids: Collection[str]
    ) -> list[tuple[str, str, IntentState, str | None]]: ...

    async def identities_in(self, partitions: Collection[int]) -> list[IdentityRow]: ...

    async def identity(self, agent_id: str) -> IdentityRow | None: ...

    async def token(self, token_digest: str) -> tuple[str, bool] | None: ...

    async def apply(self, writes: Iterable[Write]) -> None: ...

    def hold(self, partitions: Iterable[int]) -> None:
        """These partitions are held now; the first call arms the store seam (cluster.md §3.2)."""
        ...


class HostingPort(Protocol):
    """What the replica asks of the agents' directory."""

    async def host_rows(self, rows: Iterable[IdentityRow]) -> None: ...

    async def unhost(self, agent_ids: Iterable[str]) -> None: ...

    def hosted_ids(self) -> list[str]: ...

    def deliveries_ready(self, agent_ids: Iterable[str]) -> None: ...


class SettlingPort(Protocol):
    """What the replica asks of the network: the latches its sends wait on."""

    def waiting_posts(self) -> list[str]: ...

    def settle(self, post_id: str, record_hash: str) -> None: ...

    def refuse(self, post_id: str) -> None: ...


class ClusterSequencing:
    """The engine's `Sequencing` for this replica (cluster.md §5)."""

    def __init__(
        self,
        *,
        rows: ClusterRows,
        seed_key: SeedKey,
        partitions: int,
        membership: Membership,
        hints: HintSender,
        replica_id: str,
        admit_here: Callable[[str], None],
    ) -> None:
        self._rows = rows
        self._seed_key = seed_key
        self._partitions = partitions
        self._membership = membership
        self._hints = hints
        self._replica_id = replica_id
        self._admit_here = admit_here
        self._keys: dict[str, SigningKey] = {}
        self._memberships: dict[str, tuple[str, str | None, float]] = {}
        """ConversationId → (stored MembershipHash, why it is set aside, when read)."""
        self.refused_here: Callable[[str], None] = lambda post_id: None
        """Answers a refused post's sends when its author is homed here (set by the replica)."""
        self.releasing: set[int] = set()
        """Partitions being handed over: nothing new is sequenced or hosted for them."""

    def partition_of(self, descriptor: p.MembershipDescriptor) -> int:
        """The conversation's sequencing partition (cluster.md §2)."""
        return sequencing_partition(descriptor.member_agent_ids, self._partitions)

    def here(self, descriptor: p.MembershipDescriptor) -> bool:
        partition = self.partition_of(descriptor)
        return partition in self._membership.owned() and partition not in self.releasing

    def key(self, agent_id: str) -> SigningKey:
        return self._keys[agent_id]

    async def prepare(self, descriptor: p.MembershipDescriptor) -> None:
        for member in descriptor.member_agent_ids:
            if member in self._keys:
                continue
            row = await self._rows.identity(member)
            if row is None:
                raise BindRefused(f"{member} is not an agent of this cluster")
            # Kept for the replica's life: a unit in memory may need any member's key, and
            # there is one per registered agent (the operator bounds that, not the traffic).
            self._keys[member] = SigningKey(self._seed_key.open(member, row.seed))
        if self.here(descriptor):
            return
        conversation_id = descriptor.conversation_id
        now = asyncio.get_running_loop().time()
        stored = self._memberships.get(conversation_id)
        if stored is None or now - stored[2] > MEMBERSHIP_TTL:
            rows = await self._rows.conversation_rows(conversation_id)
            if not rows:
                return  # not founded yet: the sequencer founds it with its first unit
            membership_hash = next(iter(rows.values())).membership_hash
            stored = (membership_hash, set_aside_reason(rows.values()), now)
            if len(self._memberships) >= MEMBERSHIP_CACHE:
                self._memberships.clear()
            self._memberships[conversation_id] = stored
        if stored[1] is not None:
            raise BindRefused("the conversation is set aside")  # cluster.md §5.4
        if stored[0] != p.membership_hash(descriptor):
            raise BindRefused("the stored conversation has another membership")

    async def stored(self, conversation_id: str) -> dict[str, ConversationRow]:
        return await self._rows.conversation_rows(conversation_id)

    async def open_intents(self, conversation_id: str) -> list[OpenIntent]:
        return [
            OpenIntent(author_id=author, row=row, descriptor=descriptor)
            for author, row, descriptor in await self._rows.open_intents_of(conversation_id)
        ]

    def intent_writes(self, write: Write, descriptor: p.MembershipDescriptor) -> list[Write]:
        assert isinstance(write, PutIntent)
        return [
            dataclasses.replace(
                write,
                seq_partition=self.partition_of(descriptor),
                descriptor=p.encode(descriptor),
            )
        ]

    def handed_off(self, descriptor: p.MembershipDescriptor) -> None:
        route = self._membership.route(self.partition_of(descriptor))
        if route is None:
            return  # no live holder: whoever claims it finds the intent by its poll
        if route.replica_id == self._replica_id:
            self._admit_here(descriptor.conversation_id)
            return
        self._hints.hint(route.address, conversations=(descriptor.conversation_id,))

    def refused(self, posts: list[tuple[str, str]]) -> None:
        for author, post_id in posts:
            partition = home_partition(author, self._partitions)
            route = self._membership.route(partition)
            if (
                partition in self._membership.owned()
                or route is None
                or route.replica_id == self._replica_id
            ):
                # Homed here, or nowhere now: the home's poll reads the refusal in any case.
                self.refused_here(post_id)
            else:
                self._hints.hint(route.address, settled_posts=(settled_post(author, post_id),))


class ClusterRoutes:
    """The forwarder's `HomeRoutes` (cluster.md §4.1)."""

    def __init__(
        self,
        *,
        rows: ClusterRows,
        partitions: int,
        membership: Membership,
        releasing: Callable[[int], bool],
        replica_id: str,
        agent_of_name: Callable[[str], Awaitable[str | None]],
    ) -> None:
        self._replica_id = replica_id
        self._agent_of_name = agent_of_name
        self._rows = rows
        self._partitions = partitions
        self._membership = membership
        self._releasing = releasing
        self._agents: dict[str, str] = {}

    async def home_of(self, token: str) -> Placement:
        digest = token_digest(token)
        agent_id = self._agents.get(digest)
        if agent_id is None:
            known = await self._rows.token(digest)
            if known is None:
                return HERE  # the local handler refuses it, typed
            agent_id = known[0]
            if len(self._agents) >= TOKEN_CACHE:
                self._agents.clear()
            self._agents[digest] = agent_id
        return await self._placement(agent_id)

    async def home_of_name(self, name: str) -> Placement:
        agent_id = await self._agent_of_name(name)
        return HERE if agent_id is None else await self._placement(agent_id)

    async def _placement(self, agent_id: str) -> Placement:
        partition = home_partition(agent_id, self._partitions)
        for attempt in range(2):
            route = self._membership.route(partition)
            if route is not None and route.replica_id != self._replica_id:
                return Remote(address=route.address, partition=partition, epoch=route.epoch)
            if partition in self._membership.owned() and not self._releasing(partition):
                return HERE
            if attempt == 0:
                # The view names no other holder but this replica does not hold it (a
                # hand-over in progress, or a view read before it): read one now.
                await self._membership.refresh()
        # Nobody holds it yet: the local handler answers NOT_OWNER and the client retries.
        return HERE

    def holds(self, partition: int, epoch: int) -> bool:
        return self._membership.holds(partition, epoch) and not self._releasing(partition)

    def refresh(self) -> None:
        self._membership.refresh_soon()


class ClusterReplica:
    """Claims, releases, polls and hints of one replica (module docstring)."""

    def __init__(
        self,
        *,
        replica_id: str,
        rows: ClusterRows,
        partitions: int,
        membership: Membership,
        sequencing: ClusterSequencing,
        order: ClusterOrder,
        hosting: HostingPort,
        settling: SettlingPort,
        hints: HintSender,
        incarnation: int,
        on_released: Callable[[int], None] = lambda count: None,
    ) -> None:
        self._on_released = on_released
        self._replica_id = replica_id
        self._rows = rows
        self._partitions = partitions
        self._membership = membership
        self._sequencing = sequencing
        self._order = order
        self._hosting = hosting
        self._settling = settling
        self._hints = hints
        self._incarnation = incarnation
        self._tasks = OwnedTasks(self._task_failed)
        self._poller: asyncio.Task[None] | None = None
        self._claimed = asyncio.Lock()
        """Serialises claims and releases: a partition's agents are hosted or unhosted whole."""
        # From here on the store refuses a unit of a partition not held (cluster.md §3.2).
        rows.hold(membership.owned())
        sequencing.refused_here = settling.refuse

    # --- membership callbacks (cluster.md §3.2) --------------------------------------------

    def on_claimed(self, partitions: Mapping[int, int]) -> None:
        """Partitions were claimed: host their agents and pick up their work."""
        # Before anything can submit a unit of them (the store seam, cluster.md §3.2).
        self._rows.hold(partitions)
        self._spawn(self._take(frozenset(partitions)), "cluster-claim")

    def on_surplus(self, partitions: Collection[int]) -> None:
        """Partitions belong elsewhere now: tear them down and release them."""
        self._sequencing.releasing.update(partitions)
        self._spawn(self._release(frozenset(partitions)), "cluster-release")

    async def _take(self, partitions: frozenset[int]) -> None:
        async with self._claimed:
            rows = await self._rows.identities_in(partitions)
            await self._hosting.host_rows(rows)
            await self._pick_up(partitions)

    async def _release(self, partitions: frozenset[int]) -> None:
        async with self._claimed:
            homed = [
                agent_id
                for agent_id in self._hosting.hosted_ids()
                if home_partition(agent_id, self._partitions) in partitions
            ]
            await self._hosting.unhost(homed)
            sequenced = []
            for conversation_id in self._order.conversation_ids():
                descriptor = self._order.membership_of(conversation_id)
                if (
                    descriptor is not None
                    and self._sequencing.partition_of(descriptor) in partitions
                ):
                    sequenced.append(conversation_id)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + HANDOVER_TIMEOUT
            busy = self._order.forget(sequenced)
            while busy and loop.time() < deadline:
                await asyncio.sleep(0.01)
                busy = self._order.forget(busy)
            await self._rows.apply(
                [
                    ReleasePartitions(
                        partitions=tuple(sorted(partitions)),
                        replica_id=self._replica_id,
                        incarnation=self._incarnation,
                    )
                ]
            )
            for partition in partitions:
                self._sequencing.releasing.discard(partition)
                self._membership.released(partition)
            self._on_released(len(partitions))
            logger.info("partitions released count=%d", len(partitions))
        if busy:
            self._spawn(self._forget_later(busy), "cluster-forget")

    async def _forget_later(self, conversation_ids: list[str]) -> None:
        """Drop conversations of a released partition whose unit was still in flight at the
        release: the store refuses that unit (`PartitionNotHeld`, cluster.md §3.2) or it
        committed before the release; either way it ends and the conversation goes, and its
        open intents certify at the new holder from rows."""
        busy = self._order.forget(conversation_ids)
        while busy:
            await asyncio.sleep(FORGET_POLL)
            busy = self._order.forget(busy)

    # --- the poll and the hints (cluster.md §3.4) -------------------------------------------

    def start(self) -> None:
        """Start the poll."""
        if self._poller is None:
            self._poller = asyncio.ensure_future(self._poll_loop())
            self._poller.set_name("cluster-poll")

    async def _poll_loop(self) -> None:
        while True:
            await asyncio.sleep(POLL_INTERVAL)
            try:
                await self._pick_up(frozenset(self._membership.owned()))
                await self._settle(self._settling.waiting_posts())
            except asyncio.CancelledError:
                raise
            except Exception:  # the next poll tries again; a defect is logged, not fatal
                logger.warning("cluster poll failed", exc_info=True)

    async def _pick_up(self, partitions: frozenset[int]) -> None:
        mine = partitions - self._sequencing.releasing
        if not mine:
            return
        for conversation_id in await self._rows.open_conversations(mine):
            await self._order.admit(conversation_id)
        self._hosting.deliveries_ready(await self._rows.agents_with_pending(mine))

    async def _settle(self, post_ids: Collection[str]) -> None:
        if not post_ids:
            return
        for _agent, post_id, state, record_hash in await self._rows.intent_states(post_ids):
            if state is IntentState.COMPLETED and record_hash is not None:
                self._settling.settle(post_id, record_hash)
            elif state is IntentState.REFUSED:
                self._settling.refuse(post_id)  # cluster.md §5.2, §5.4

    def on_hint(
        self,
        from_replica: str,
        conversations: tuple[str, ...],
        settled_posts: tuple[str, ...],
        delivery_agents: tuple[str, ...],
    ) -> None:
        """A hint from another replica (`ClusterHintsPort`): schedule what it names."""
        for conversation_id in conversations:
            self.admit(conversation_id)
        if delivery_agents:
            self._hosting.deliveries_ready(delivery_agents)
        posts = [parsed[1] for entry in settled_posts if (parsed := parse_settled_post(entry))]
        if posts:
            self._spawn(self._settle(posts), "cluster-settle")

    def admit(self, conversation_id: str) -> None:
        """Queue a conversation's open intents (a hint, or a bind here for a partition that
        came here meanwhile)."""
        self._spawn(self._order.admit(conversation_id), "cluster-admit")

    # --- hints after a unit (cluster.md §5.2) -----------------------------------------------

    def certified(self, agent_id: str, post_id: str) -> None:
        """A post certified here: hint its author's home when that is another replica."""
        address = self._elsewhere(agent_id)
        if address is not None:
            self._hints.hint(address, settled_posts=(settled_post(agent_id, post_id),))

    def deliveries(self, agent_ids: Iterable[str]) -> None:
        """Pending deliveries committed here: hint the recipients' homes elsewhere."""
        for agent_id in agent_ids:
            address = self._elsewhere(agent_id)
            if address is not None:
                self._hints.hint(address, delivery_agents=(agent_id,))

    def _elsewhere(self, agent_id: str) -> str | None:
        partition = home_partition(agent_id, self._partitions)
        if partition in self._membership.owned():
            return None
        route = self._membership.route(partition)
        return None if route is None or route.replica_id == self._replica_id else route.address

    # --- lifecycle -------------------------------------------------------------------------

    def _spawn(self, coroutine: Coroutine[object, object, None], name: str) -> None:
        self._tasks.spawn(coroutine, name)

    @staticmethod
    def _task_failed(task: asyncio.Task[None], error: BaseException) -> None:
        logger.warning("cluster task %s failed", task.get_name(), exc_info=error)

    async def close(self) -> None:
        """Stop the poll and every task started for claims, releases and hints."""
        poller, self._poller = self._poller, None
        with contextlib.suppress(asyncio.CancelledError):
            await self._tasks.cancel_all(also=() if poller is None else (poller,))


__all__ = [
    "HANDOVER_TIMEOUT",
    "POLL_INTERVAL",
    "ClusterReplica",
    "ClusterRoutes",
    "ClusterSequencing",
]
