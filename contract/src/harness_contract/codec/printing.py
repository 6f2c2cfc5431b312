"""What only the client prints: deliveries, send states, management values, and `to_json`,
which takes any public value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import assert_never

from harness_contract.codec.errors import error_to_json
from harness_contract.codec.guidance import local_guidance_to_json
from harness_contract.codec.items import item_to_json, message_to_json, outcome_to_json
from harness_contract.codec.sends import send_input_to_json, send_result_to_json
from harness_contract.content import content_to_json
from harness_contract.errors import HarnessError
from harness_contract.guidance import CheckedGuidance, CollectiveGuidance, LocalGuidance, Withheld
from harness_contract.jsonvalue import JsonValue
from harness_contract.management import (
    AgentStatus,
    ClusterStatus,
    ConversationRecord,
    ConversationSummary,
    GatewayStatus,
    RegisteredAgent,
)
from harness_contract.values import (
    Answered,
    CollectiveRequestItem,
    CollectiveResultItem,
    DataPart,
    Declined,
    Delivery,
    DirectMessage,
    GroupMessage,
    InboundItem,
    InboundMessage,
    Invalid,
    MemberOutcome,
    MessageInput,
    MulticastItem,
    NoAnswer,
    OperationFailedItem,
    ResponseInput,
    SendAbsent,
    SendIndeterminate,
    SendInput,
    SendPending,
    SendResult,
    SendReturned,
    SendState,
    TextPart,
)


def delivery_to_json(delivery: Delivery) -> dict[str, JsonValue]:
    """`{token, item, guidance?}`: one `harness listen` line."""
    value: dict[str, JsonValue] = {"token": delivery.token, "item": item_to_json(delivery.item)}
    if delivery.guidance is not None:
        value["guidance"] = local_guidance_to_json(delivery.guidance)
    return value


def send_state_to_json(state: SendState) -> dict[str, JsonValue]:
    """`{state: absent | pending | indeterminate | returned, input?, outcome?}`."""
    match state:
        case SendAbsent():
            return {"state": "absent"}
        case SendPending(input=send_input):
            return {"state": "pending", "input": send_input_to_json(send_input)}
        case SendIndeterminate(input=send_input):
            return {"state": "indeterminate", "input": send_input_to_json(send_input)}
        case SendReturned(input=send_input, outcome=outcome):
            kept: dict[str, JsonValue]
            if isinstance(outcome, SendResult):
                kept = {"kind": "success", "result": send_result_to_json(outcome)}
            else:
                kept = {"kind": "failure", "error": error_to_json(outcome)}
            return {"state": "returned", "input": send_input_to_json(send_input), "outcome": kept}
        case _:
            assert_never(state)


def registered_agent_to_json(agent: RegisteredAgent) -> dict[str, JsonValue]:
    """`{address, agentId, token}`: the token is shown this once."""
    return {"address": agent.address, "agentId": agent.agent_id, "token": agent.token}


def agent_status_to_json(status: AgentStatus) -> dict[str, JsonValue]:
    """The agent's card, hosting, stream and backlog."""
    return {
        "name": status.name,
        "address": status.address,
        "agentId": status.agent_id,
        "publicKey": status.public_key,
        "issuedAt": status.issued_at,
        "hosted": status.hosted,
        "streamAttached": status.stream_attached,
        "backlog": status.backlog,
        "oldestUnackedAgeSeconds": status.oldest_unacked_age_seconds,
        "setAside": tuple(
            {"conversationId": item.conversation_id, "reason": item.reason}
            for item in status.set_aside
        ),
    }


def conversation_summary_to_json(summary: ConversationSummary) -> dict[str, JsonValue]:
    """`{address, kind, members, headRecordHash?, depth}`."""
    value: dict[str, JsonValue] = {
        "address": summary.address,
        "kind": summary.kind,
        "members": summary.members,
        "depth": summary.depth,
    }
    if summary.head_record_hash is not None:
        value["headRecordHash"] = summary.head_record_hash
    return value


def conversation_record_to_json(record: ConversationRecord) -> dict[str, JsonValue]:
    """`{recordHash, postId, author, depth, content}` (the record's JCS bytes are left out;
    the export has them)."""
    return {
        "recordHash": record.record_hash,
        "postId": record.post_id,
        "author": record.author,
        "depth": record.depth,
        "content": content_to_json(record.content),
    }


def gateway_status_to_json(status: GatewayStatus) -> dict[str, JsonValue]:
    """`{version, mode, hostedAgents, routerState}`, plus `cluster` for a cluster replica."""
    printed: dict[str, JsonValue] = {
        "version": status.version,
        "mode": status.mode,
        "hostedAgents": status.hosted_agents,
        "routerState": status.router_state,
    }
    if status.cluster is not None:
        printed["cluster"] = cluster_status_to_json(status.cluster)
    return printed


def cluster_status_to_json(status: ClusterStatus) -> dict[str, JsonValue]:
    """`{replicaId, incarnation, state, leaseRemainingSeconds, claiming, partitions,
    ownedPartitions, unownedPartitions, replicas: [{replicaId, incarnation, address, serving,
    live, fenced, beatAgeSeconds, partitions}]}`."""
    return {
        "replicaId": status.replica_id,
        "incarnation": status.incarnation,
        "state": status.state,
        "leaseRemainingSeconds": status.lease_remaining_seconds,
        "claiming": status.claiming,
        "partitions": status.partitions,
        "ownedPartitions": status.owned_partitions,
        "unownedPartitions": status.unowned_partitions,
        "replicas": [
            {
                "replicaId": replica.replica_id,
                "incarnation": replica.incarnation,
                "address": replica.address,
                "serving": replica.serving,
                "live": replica.live,
                "fenced": replica.fenced,
                "beatAgeSeconds": replica.beat_age_seconds,
                "partitions": replica.partitions,
            }
            for replica in status.replicas
        ],
    }


Printable = (
    InboundItem
    | InboundMessage
    | MemberOutcome
    | TextPart
    | DataPart
    | SendInput
    | SendResult
    | SendState
    | Delivery
    | LocalGuidance
    | HarnessError
    | RegisteredAgent
    | AgentStatus
    | ConversationSummary
    | ConversationRecord
    | GatewayStatus
)
"""Every public value `to_json` prints."""


def to_json(value: Printable) -> dict[str, object]:
    """Any public value in the contract's JSON shape, as plain `json` values (arrays are
    lists): what `harness --json` prints and what a host may hand its model."""
    return _plain(_shape(value))  # type: ignore[return-value]


def _shape(value: Printable) -> JsonValue:
    match value:
        case (
            MulticastItem()
            | CollectiveRequestItem()
            | CollectiveResultItem()
            | OperationFailedItem()
        ):
            return item_to_json(value)
        case DirectMessage() | GroupMessage():
            return message_to_json(value)
        case Answered() | Declined() | Invalid() | NoAnswer() | Withheld():
            return outcome_to_json(value)
        case TextPart() | DataPart():
            return content_to_json((value,))[0]
        case MessageInput() | ResponseInput():
            return send_input_to_json(value)
        case SendResult():
            return send_result_to_json(value)
        case SendAbsent() | SendPending() | SendIndeterminate() | SendReturned():
            return send_state_to_json(value)
        case Delivery():
            return delivery_to_json(value)
        case CheckedGuidance() | CollectiveGuidance():
            return local_guidance_to_json(value)
        case HarnessError():
            return error_to_json(value)
        case RegisteredAgent():
            return registered_agent_to_json(value)
        case AgentStatus():
            return agent_status_to_json(value)
        case ConversationSummary():
            return conversation_summary_to_json(value)
        case ConversationRecord():
            return conversation_record_to_json(value)
        case GatewayStatus():
            return gateway_status_to_json(value)
        case _:
            assert_never(value)


def _plain(value: JsonValue) -> object:
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return value
