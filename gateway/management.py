"""The operator's read-only views of a daemon: agent status, conversations, history, gauges.

`ManagementQueries` answers the management API's questions (`harness agents show`,
`harness conversations`, `harness history`, `harness status`) and reads the gauges that
`gateway.observability.gauges` publishes. It changes nothing: registering agents and
rotating or revoking tokens belong to the `AgentDirectory`; it reads the hosted agents from
the directory's `HostedAgents` table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from harness_contract.addresses import agent_address, canonicalize, group_address
from harness_contract.errors import SendError
from harness_contract.kinds import PostKind
from harness_contract.management import ClusterReplica, ClusterStatus
from harness_contract.values import CollectiveOp

from gateway import __version__
from gateway.agents import HostedAgents
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.cluster.membership import MembershipStatus
from gateway.endpoint.api import (
    AgentStatus,
    ConversationRecord,
    ConversationSummary,
    GatewayStatus,
    ManagementError,
    ManagementErrorReason,
    SetAsideConversation,
)
from gateway.endpoint.runtime import AgentRuntime
from gateway.engine import protocol as p
from gateway.engine.network import Network
from gateway.observability.gauges import GaugeReading
from gateway.observability.metrics import Listener
from gateway.settings import Mode
from gateway.store.port import Store
from gateway.store.records import IdentityRow


class ManagementQueries:
    """What an operator can read about the hosted agents, their conversations and the
    daemon; also the `GaugeSource` of the read gauges."""

    def __init__(
        self,
        *,
        hosted: HostedAgents,
        store: Store,
        network: Network,
        mode: Mode,
        clock: Clock = SYSTEM_CLOCK,
        cluster: Callable[[], MembershipStatus | None] | None = None,
        ensure_hosted: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        """`cluster` answers a cluster replica's membership status (None outside a cluster,
        or while there is none); `status()` then carries it."""
        self._hosted = hosted
        self._store = store
        self._network = network
        self._mode = mode
        self._clock = clock
        self._cluster = cluster
        self._ensure_hosted = ensure_hosted
        """In a cluster: host an agent homed here before a question about it (cluster.md §4.1)."""

    async def agent_status(self, name: str) -> AgentStatus:
        """What an operator sees about one agent; raises `ManagementError` `not-found`."""
        if self._ensure_hosted is not None:
            await self._ensure_hosted(name)
        runtime = self._hosted.runtime(name)
        agent_id = runtime.identity.agent_id
        backlog = await self._store.unread_count(agent_id)
        oldest = await self._store.oldest_unread(agent_id)
        card = runtime.identity.card.card
        return AgentStatus(
            name=name,
            address=runtime.address,
            agent_id=card.agent_id,
            public_key=card.public_key,
            issued_at=card.issued_at,
            hosted=True,
            stream_attached=runtime.inbox.listening,
            backlog=backlog,
            oldest_unacked_age_seconds=0.0
            if oldest is None
            else max(0.0, self._clock.time() - oldest),
            set_aside=self._set_aside_of(runtime),
        )

    def _set_aside_of(self, runtime: AgentRuntime) -> tuple[SetAsideConversation, ...]:
        local = [
            SetAsideConversation(conversation_id=item.conversation_id, reason=item.reason)
            for item in self._network.local.set_aside_of(runtime.agent_id)
        ]
        router = [
            SetAsideConversation(conversation_id=conversation_id, reason=reason)
            for conversation_id, reason in runtime.certifier.set_aside.items()
        ]
        # A conversation set aside by both paths is listed once (local order's reason wins).
        unique = {item.conversation_id: item for item in router + local}
        return tuple(unique[key] for key in sorted(unique))

    async def list_agents(
        self, *, prefix: str, after: str | None, limit: int
    ) -> tuple[list[AgentStatus], str | None]:
        """Hosted agents by name after `after`, a page at a time, and the next page's
        `after` (None on the last page)."""
        rows: dict[str, IdentityRow] = {}
        if self._cluster is not None:
            # A cluster lists every cluster agent; those homed on other replicas are shown
            # from the shared rows (not hosted here, so no stream is seen), cluster.md §10.
            rows = {row.agent_name: row for row in await self._store.identities()}
        names = sorted(name for name in {*self._hosted.names(), *rows} if name.startswith(prefix))
        if after is not None:
            names = [name for name in names if name > after]
        page = names[:limit]
        statuses = [
            await self.agent_status(name)
            if self._hosted.has_name(name)
            else await self._shared_status(rows[name])
            for name in page
        ]
        return statuses, (page[-1] if len(names) > limit else None)

    async def _shared_status(self, row: IdentityRow) -> AgentStatus:
        """A cluster agent homed on another replica, from the shared rows."""
        card = p.decode(row.signed_card, p.SignedAgentCard).card
        oldest = await self._store.oldest_unread(row.agent_id)
        return AgentStatus(
            name=row.agent_name,
            address=agent_address(row.agent_name),
            agent_id=card.agent_id,
            public_key=card.public_key,
            issued_at=card.issued_at,
            hosted=False,
            stream_attached=False,
            backlog=await self._store.unread_count(row.agent_id),
            oldest_unacked_age_seconds=0.0
            if oldest is None
            else max(0.0, self._clock.time() - oldest),
        )

    async def conversations(self, name: str) -> list[ConversationSummary]:
        """Every conversation one hosted agent stores; raises `ManagementError` `not-found`."""
        if self._ensure_hosted is not None:
            await self._ensure_hosted(name)
        runtime = self._hosted.runtime(name)
        summaries = []
        for row in await self._store.conversations(runtime.identity.agent_id):
            descriptor = p.decode(row.descriptor, p.MembershipDescriptor)
            names = sorted(member.card.agent_name for member in descriptor.members)
            kind = PostKind.of_size(len(names))
            if kind is PostKind.DIRECT:
                other = next(n for n in names if n != name)
                address = agent_address(other)
            else:
                address = group_address(names)
            summaries.append(
                ConversationSummary(
                    address=address,
                    kind=kind,
                    members=tuple(agent_address(n) for n in names),
                    head_record_hash=row.head,
                    depth=row.depth,
                )
            )
        return summaries

    async def history(
        self, name: str, address: str, *, after_record_hash: str | None, limit: int
    ) -> list[ConversationRecord]:
        """Certified records of one of the agent's conversations after `after_record_hash`,
        in chain order, at most `limit`; none for a conversation the agent does not store.

        Raises `ManagementError`: `not-found` for an agent not hosted here or a record not
        in the conversation, `invalid-address` for an address naming no valid conversation."""
        if self._ensure_hosted is not None:
            await self._ensure_hosted(name)
        runtime = self._hosted.runtime(name)
        try:
            conversation = canonicalize(address, name)
        except SendError as error:
            raise ManagementError(ManagementErrorReason.INVALID_ADDRESS, error.message) from None
        agent_id = runtime.identity.agent_id
        target = None
        for stored in await self._store.conversations(agent_id):
            descriptor = p.decode(stored.descriptor, p.MembershipDescriptor)
            if tuple(sorted(m.card.agent_name for m in descriptor.members)) == conversation.members:
                target = stored.conversation_id
        if target is None:
            return []
        after_depth = 0
        if after_record_hash is not None:
            known = await self._store.record(agent_id, after_record_hash)
            if known is None or known.conversation_id != target:
                raise ManagementError(
                    ManagementErrorReason.NOT_FOUND, "no such record in this conversation"
                )
            after_depth = known.depth
        records = []
        for row in await self._store.records(agent_id, target, after_depth, limit):
            record = p.decode(row.record, p.CertifiedRecord)
            core = record.action_certified_record.record_core
            author = core.membership.card_of(row.author)
            records.append(
                ConversationRecord(
                    record_hash=row.record_hash,
                    post_id=row.post_id,
                    author=agent_address(author.agent_name) if author is not None else row.author,
                    depth=row.depth,
                    content=core.action.post_intent.content,
                    certified_record=bytes(row.record),
                )
            )
        return records

    def status(self) -> GatewayStatus:
        """Version, mode, hosted agents and Router state; for a cluster replica also its
        cluster as its membership's last view saw it (cluster.md §10)."""
        membership = self._cluster() if self._cluster is not None else None
        return GatewayStatus(
            version=__version__,
            mode=self._mode.value,
            hosted_agents=self._hosted.count,
            router_state=self._network.state.value,
            cluster=None if membership is None else cluster_status(membership),
        )

    async def read_gauges(self) -> GaugeReading:
        """The read gauges now: the store's unread rows and every hosted agent's state."""
        summary = await self._store.unread_summary()
        now = self._clock.time()
        unacknowledged = dict.fromkeys(Listener, 0)
        oldest = dict.fromkeys(Listener, 0.0)
        for agent_id, (count, created) in summary.items():
            runtime = self._hosted.by_id(agent_id)
            listening = runtime is not None and runtime.inbox.listening
            listener = Listener.ATTACHED if listening else Listener.DETACHED
            unacknowledged[listener] += count
            oldest[listener] = max(oldest[listener], now - created)
        runtimes = self._hosted.runtimes()
        pending = dict.fromkeys(PostKind, 0)
        open_ops = dict.fromkeys(CollectiveOp, 0)
        for runtime in runtimes:
            local = self._network.local.open_intents_by_kind(runtime.agent_id)
            for counts in (runtime.certifier.open_intents_by_kind(), local):
                for kind, count in counts.items():
                    pending[PostKind(kind)] += count
            for op, count in runtime.collectives.open_counts().items():
                open_ops[CollectiveOp(op)] += count
        return GaugeReading(
            unacknowledged=unacknowledged,
            oldest_unacked_age=oldest,
            agents_hosted=len(runtimes),
            conversations_set_aside=self._network.local.set_aside_count
            + sum(len(runtime.certifier.set_aside) for runtime in runtimes),
            streams_active=sum(1 for runtime in runtimes if runtime.inbox.listening),
            streams_window_full=sum(1 for runtime in runtimes if runtime.inbox.window_full),
            post_intents_pending=pending,
            collectives_open=open_ops,
        )


def cluster_status(status: MembershipStatus) -> ClusterStatus:
    """The management API's form of a membership status (`harness status`)."""
    return ClusterStatus(
        replica_id=status.replica_id,
        incarnation=status.incarnation,
        state=status.state.value,
        lease_remaining_seconds=status.lease_remaining,
        claiming=status.claiming,
        partitions=status.partitions,
        owned_partitions=status.owned,
        unowned_partitions=status.unowned,
        replicas=tuple(
            ClusterReplica(
                replica_id=replica.replica_id,
                incarnation=replica.incarnation,
                address=replica.address,
                serving=replica.serving,
                live=replica.live,
                fenced=replica.fenced,
                beat_age_seconds=max(0.0, replica.beat_age),
                partitions=replica.partitions,
            )
            for replica in status.replicas
        ),
    )
