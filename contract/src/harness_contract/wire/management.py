"""The management API's values and errors, both ways."""

from __future__ import annotations

from harness_contract._gen.harness.v1 import management_pb2
from harness_contract.management import (
    AgentStatus,
    ClusterReplica,
    ClusterStatus,
    ConversationRecord,
    ConversationSummary,
    GatewayStatus,
    RegisteredAgent,
    SetAsideConversation,
)
from harness_contract.wire.bridges import (
    CONVERSATION_KINDS,
    MODES,
    REPLICA_STATES,
    ROUTER_STATES,
)
from harness_contract.wire.jsonvalue import content_from_proto, content_to_proto


def registered_agent_to_proto(agent: RegisteredAgent) -> management_pb2.RegisterAgentResponse:
    """A registration and its one-time token."""
    return management_pb2.RegisterAgentResponse(
        address=agent.address, agent_id=agent.agent_id, token=agent.token
    )


def registered_agent_from_proto(agent: management_pb2.RegisterAgentResponse) -> RegisteredAgent:
    """A registration."""
    return RegisteredAgent(address=agent.address, agent_id=agent.agent_id, token=agent.token)


def agent_status_to_proto(status: AgentStatus) -> management_pb2.AgentStatus:
    """What an operator sees of one agent."""
    return management_pb2.AgentStatus(
        name=status.name,
        address=status.address,
        agent_id=status.agent_id,
        public_key=status.public_key,
        issued_at=status.issued_at,
        hosted=status.hosted,
        stream_attached=status.stream_attached,
        backlog=status.backlog,
        oldest_unacked_age_seconds=status.oldest_unacked_age_seconds,
        set_aside=[
            management_pb2.SetAsideConversation(
                conversation_id=item.conversation_id, reason=item.reason
            )
            for item in status.set_aside
        ],
    )


def agent_status_from_proto(status: management_pb2.AgentStatus) -> AgentStatus:
    """One agent's status."""
    return AgentStatus(
        name=status.name,
        address=status.address,
        agent_id=status.agent_id,
        public_key=status.public_key,
        issued_at=status.issued_at,
        hosted=status.hosted,
        stream_attached=status.stream_attached,
        backlog=status.backlog,
        oldest_unacked_age_seconds=status.oldest_unacked_age_seconds,
        set_aside=tuple(
            SetAsideConversation(conversation_id=item.conversation_id, reason=item.reason)
            for item in status.set_aside
        ),
    )


def conversation_to_proto(summary: ConversationSummary) -> management_pb2.ConversationSummary:
    """One conversation an agent stores."""
    result = management_pb2.ConversationSummary(
        address=summary.address,
        kind=CONVERSATION_KINDS.to_proto(summary.kind),
        members=summary.members,
        depth=summary.depth,
    )
    if summary.head_record_hash is not None:
        result.head_record_hash = summary.head_record_hash
    return result


def conversation_from_proto(summary: management_pb2.ConversationSummary) -> ConversationSummary:
    """One conversation."""
    return ConversationSummary(
        address=summary.address,
        kind=CONVERSATION_KINDS.from_proto(summary.kind, "kind"),
        members=tuple(summary.members),
        head_record_hash=(
            summary.head_record_hash if summary.HasField("head_record_hash") else None
        ),
        depth=summary.depth,
    )


def conversation_record_to_proto(record: ConversationRecord) -> management_pb2.ConversationRecord:
    """One certified record."""
    return management_pb2.ConversationRecord(
        record_hash=record.record_hash,
        post_id=record.post_id,
        author=record.author,
        depth=record.depth,
        content=content_to_proto(record.content),
        certified_record=record.certified_record,
    )


def conversation_record_from_proto(record: management_pb2.ConversationRecord) -> ConversationRecord:
    """One certified record."""
    return ConversationRecord(
        record_hash=record.record_hash,
        post_id=record.post_id,
        author=record.author,
        depth=record.depth,
        content=content_from_proto(record.content),
        certified_record=record.certified_record,
    )


def gateway_status_to_proto(status: GatewayStatus) -> management_pb2.GetGatewayStatusResponse:
    """Version, mode, hosted agents and Router state (unknown names are UNSPECIFIED), and a
    cluster replica's view of its cluster."""
    message = management_pb2.GetGatewayStatusResponse(
        version=status.version,
        mode=MODES.to_proto_or_unspecified(status.mode),
        hosted_agents=status.hosted_agents,
        router_state=ROUTER_STATES.to_proto_or_unspecified(status.router_state),
    )
    if status.cluster is not None:
        message.cluster.CopyFrom(cluster_status_to_proto(status.cluster))
    return message


def gateway_status_from_proto(status: management_pb2.GetGatewayStatusResponse) -> GatewayStatus:
    """The daemon's status."""
    return GatewayStatus(
        version=status.version,
        mode=MODES.from_proto(status.mode, "mode"),
        hosted_agents=status.hosted_agents,
        router_state=ROUTER_STATES.from_proto(status.router_state, "router_state"),
        cluster=cluster_status_from_proto(status.cluster) if status.HasField("cluster") else None,
    )


def cluster_status_to_proto(status: ClusterStatus) -> management_pb2.ClusterStatus:
    """A cluster replica's view of its cluster (an unknown state is UNSPECIFIED)."""
    return management_pb2.ClusterStatus(
        replica_id=status.replica_id,
        incarnation=status.incarnation,
        state=REPLICA_STATES.to_proto_or_unspecified(status.state),
        lease_remaining_seconds=status.lease_remaining_seconds,
        claiming=status.claiming,
        partitions=status.partitions,
        owned_partitions=status.owned_partitions,
        unowned_partitions=status.unowned_partitions,
        replicas=[
            management_pb2.ClusterReplica(
                replica_id=replica.replica_id,
                incarnation=replica.incarnation,
                address=replica.address,
                serving=replica.serving,
                live=replica.live,
                fenced=replica.fenced,
                beat_age_seconds=replica.beat_age_seconds,
                partitions=replica.partitions,
            )
            for replica in status.replicas
        ],
    )


def cluster_status_from_proto(status: management_pb2.ClusterStatus) -> ClusterStatus:
    """A cluster replica's view of its cluster."""
    return ClusterStatus(
        replica_id=status.replica_id,
        incarnation=status.incarnation,
        state=REPLICA_STATES.from_proto(status.state, "cluster.state"),
        lease_remaining_seconds=status.lease_remaining_seconds,
        claiming=status.claiming,
        partitions=status.partitions,
        owned_partitions=status.owned_partitions,
        unowned_partitions=status.unowned_partitions,
        replicas=tuple(
            ClusterReplica(
                replica_id=replica.replica_id,
                incarnation=replica.incarnation,
                address=replica.address,
                serving=replica.serving,
                live=replica.live,
                fenced=replica.fenced,
                beat_age_seconds=replica.beat_age_seconds,
                partitions=replica.partitions,
            )
            for replica in status.replicas
        ),
    )
