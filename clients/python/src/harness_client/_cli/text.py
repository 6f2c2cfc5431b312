"""The `-o text` forms of `harness`'s results: contract values as readable lines.

Each `describe_*` function takes one value of the client library and returns its lines,
writing nothing, so a test reads the text without a gateway. Peer text (messages,
questions) is printed JSON-quoted, so it stays on its line: a peer cannot print a line that
reads like a delivery or like the firewall's guidance.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import assert_never

from harness_client import (
    Accept,
    AgentStatus,
    Answered,
    AskOperation,
    CheckedGuidance,
    ClusterReplica,
    ClusterStatus,
    CollectiveGuidance,
    CollectiveRequestItem,
    CollectiveResultItem,
    Content,
    ConversationRecord,
    DataPart,
    Decline,
    Declined,
    DirectMessage,
    ExpectationInstruction,
    GatewayStatus,
    GroupMessage,
    InboundDelivery,
    InboundItem,
    InboundMessage,
    Instruction,
    Invalid,
    LocalGuidance,
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
    UncertainInstruction,
    Withheld,
    to_json,
)
from harness_client._cli.output import dumps


def describe_instruction(instruction: Instruction) -> str:
    """`[middleware/rule] permitted (out): text`, or `[middleware/rule] uncertain CHOICE
    p=P: text` for a middleware's judgement."""
    match instruction:
        case ExpectationInstruction(expectation=expectation, subjects=subjects):
            verdict = expectation.value + (f" ({', '.join(subjects)})" if subjects else "")
        case UncertainInstruction(uncertain=uncertain):
            verdict = f"uncertain {uncertain.choice} p={uncertain.probability:g}"
        case _:
            assert_never(instruction)
    line = f"[{instruction.middleware_id}/{instruction.rule_id}] {verdict}"
    return f"{line}: {instruction.instruction}" if instruction.instruction else line


def _checked_lines(guidance: CheckedGuidance) -> list[str]:
    return [
        f"guidance {guidance.check_id}: {describe_instruction(instruction)}"
        for instruction in guidance.instructions
    ]


def describe_guidance(guidance: LocalGuidance) -> list[str]:
    """One `guidance <checkId>: ...` line per instruction (none for a check without any).

    A collective result's lines are prefixed by `question` for the question's check and by
    the member's address for each answer's."""
    match guidance:
        case CheckedGuidance():
            return _checked_lines(guidance)
        case CollectiveGuidance(question=question, answers=answers):
            lines = [] if question is None else [f"question {x}" for x in _checked_lines(question)]
            for answer in answers:
                lines.extend(f"{answer.member} {x}" for x in _checked_lines(answer.guidance))
            return lines
        case _:
            assert_never(guidance)


def describe_outcome(outcome: MemberOutcome) -> str:
    """A member's outcome in a collective result, in a few words."""
    match outcome:
        case Answered(content=content):
            return f"answered {dumps(content)}"
        case Invalid(reason=reason):
            return f"answered outside the form ({reason})"
        case Withheld(reason=reason):
            return f"withheld by the local firewall ({reason.value})"
        case Declined():
            return "declined"
        case NoAnswer():
            return "no answer"
        case _:
            assert_never(outcome)


def _quoted(content: Content) -> str:
    parts = []
    for part in content:
        match part:
            case TextPart(text=text):
                parts.append(dumps(text))
            case DataPart(value=value):
                parts.append(dumps(value))
            case _:
                assert_never(part)
    return " ".join(parts)


def _instant(epoch_ms: int) -> str:
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _describe_message(message: InboundMessage) -> str:
    match message:
        case DirectMessage(post_id=post_id, sender=sender, content=content):
            return f"message {post_id} from {sender}: {_quoted(content)}"
        case GroupMessage(post_id=post_id, address=address, sender=sender, content=content):
            return f"message {post_id} from {sender} in {address}: {_quoted(content)}"
        case _:
            assert_never(message)


def describe_item(item: InboundItem) -> list[str]:
    """An inbound item as a heading line and its further lines: a request's form and how
    to answer it, a collective result's outcome per member."""
    match item:
        case MulticastItem(message=message):
            return [_describe_message(message)]
        case CollectiveRequestItem():
            return [
                f"{item.op.value} {item.id} from {item.sender} in {item.to}, answer by "
                f"{_instant(item.deadline_at)}: {dumps(item.question)}",
                f"form: {dumps(item.requested_schema, sort_keys=True)}",
                f"answer with: harness answer {item.to} --accept JSON, or --decline",
            ]
        case CollectiveResultItem(question=question):
            asked = (
                dumps(question)
                if isinstance(question, str)
                else describe_outcome(question)  # a Withheld question reads as one
            )
            return [
                f"{item.op.value} result {item.id} in {item.to}: question {asked}",
                *(f"{entry.member}: {describe_outcome(entry.outcome)}" for entry in item.outcomes),
            ]
        case OperationFailedItem(id=operation_id, to=to, error=error):
            return [f"{operation_id} failed in {to}: {error}"]
        case _:
            assert_never(item)


def describe_delivery(delivery: InboundDelivery) -> list[str]:
    """`<token> <item>`, then the item's further lines and its guidance, indented."""
    heading, *rest = describe_item(delivery.item)
    guidance = [] if delivery.guidance is None else describe_guidance(delivery.guidance)
    return [f"{delivery.token} {heading}", *(f"  {line}" for line in [*rest, *guidance])]


def describe_send_input(send_input: SendInput) -> list[str]:
    """What a send states: its kind, where it goes, its text; a question's form."""
    match send_input:
        case MessageInput(to=to, text=text, collective=AskOperation() as ask):
            return [
                f"{ask.op.value} to {to}, open for {ask.deadline}s: {dumps(text)}",
                f"  form: {dumps(ask.requested_schema, sort_keys=True)}",
            ]
        case MessageInput(to=to, text=text):
            return [f"message to {to}: {dumps(text)}"]
        case ResponseInput(to=to, response=response):
            match response:
                case Accept(content=content):
                    return [f"answer in {to}: accept {dumps(content)}"]
                case Decline():
                    return [f"answer in {to}: decline"]
                case _:
                    assert_never(response)
        case _:
            assert_never(send_input)


def describe_send_result(send_input: SendInput, result: SendResult) -> list[str]:
    """What a completed send did, and where a collective's result will arrive."""
    operation = result.operation_id or "-"
    match send_input:
        case MessageInput(to=to, collective=AskOperation(op=op)):
            heading = (
                f"{op.value} {operation} asked in {to}; its result arrives later on "
                "`harness listen` as a collectiveResult item"
            )
        case MessageInput(to=to):
            heading = f"sent to {to}"
        case ResponseInput(to=to, response=Accept()):
            heading = f"answered {operation} in {to}"
        case ResponseInput(to=to):
            heading = f"declined {operation} in {to}"
        case _:
            assert_never(send_input)
    return [heading, *(f"post {post_id}" for post_id in result.post_ids)]


def describe_send_state(state: SendState) -> list[str]:
    """`absent`, or the state, then the input and (returned) the outcome, indented."""
    match state:
        case SendAbsent():
            return ["absent"]
        case SendPending(input=send_input) | SendIndeterminate(input=send_input):
            heading = "pending" if isinstance(state, SendPending) else "indeterminate"
            return [heading, *(f"  {line}" for line in describe_send_input(send_input))]
        case SendReturned(input=send_input, outcome=outcome):
            lines = ["returned", *(f"  {line}" for line in describe_send_input(send_input))]
            if isinstance(outcome, SendResult):
                lines.append(f"  outcome: success {dumps(to_json(outcome))}")
            else:
                lines.append(f"  outcome: {outcome.message} (reason={outcome.reason})")
            return lines
        case _:
            assert_never(state)


def describe_agent(agent: AgentStatus) -> list[str]:
    """An agent's card, hosting, stream and backlog as `key: value` lines."""
    lines = [
        f"name: {agent.name}",
        f"address: {agent.address}",
        f"agent id: {agent.agent_id}",
        f"public key: {agent.public_key}",
        f"issued at: {agent.issued_at}",
        f"hosted: {'yes' if agent.hosted else 'no'}",
        f"stream: {'listening' if agent.stream_attached else 'detached'}",
        f"backlog: {agent.backlog}",
    ]
    if agent.backlog:
        lines.append(f"oldest unacknowledged: {round(agent.oldest_unacked_age_seconds)}s ago")
    if not agent.set_aside:
        lines.append("set aside: none")
    lines.extend(f"set aside: {item.conversation_id} ({item.reason})" for item in agent.set_aside)
    return lines


def describe_status(status: GatewayStatus) -> list[str]:
    """The daemon's version, mode, agents and Router as `key: value` lines; a cluster
    replica adds itself, its lease, the partitions and one indented line per replica."""
    lines = [
        f"version: {status.version}",
        f"mode: {status.mode}",
        f"hosted agents: {status.hosted_agents}",
        f"router: {status.router_state}",
    ]
    if status.cluster is not None:
        lines.extend(_cluster_lines(status.cluster))
    return lines


def _cluster_lines(cluster: ClusterStatus) -> list[str]:
    if cluster.lease_remaining_seconds > 0:
        lease = f"{cluster.state}, {cluster.lease_remaining_seconds:.1f}s left"
    else:
        lease = f"{cluster.state}, ended"
    if cluster.claiming:
        lease += ", claiming"
    return [
        f"replica: {cluster.replica_id} (incarnation {cluster.incarnation})",
        f"lease: {lease}",
        f"partitions: {cluster.partitions} ({cluster.owned_partitions} held here, "
        f"{cluster.unowned_partitions} unowned)",
        f"replicas: {len(cluster.replicas)}",
        *(f"  {_replica_line(replica)}" for replica in cluster.replicas),
    ]


def _replica_line(replica: ClusterReplica) -> str:
    """`<id> <address> incarnation N: serving, live, beat 0.4s ago, 12 partitions`."""
    states = [
        "serving" if replica.serving else "not serving",
        "live" if replica.live else "dead",
    ]
    if replica.fenced:
        states.append("fenced")
    return (
        f"{replica.replica_id} {replica.address} incarnation {replica.incarnation}: "
        f"{', '.join(states)}, beat {replica.beat_age_seconds:.1f}s ago, "
        f"{replica.partitions} partitions"
    )


def describe_record(record: ConversationRecord) -> str:
    """`<recordHash> depth N, <postId> from <author>: <content>`."""
    return (
        f"{record.record_hash} depth {record.depth}, {record.post_id} from {record.author}: "
        f"{_quoted(record.content)}"
    )
