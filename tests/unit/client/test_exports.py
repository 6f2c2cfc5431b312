from __future__ import annotations

import harness_client

PUBLIC_NAMES = {
    # connecting and the endpoint
    "connect",
    "Endpoint",
    "EndpointState",
    "ConnectionState",
    "ConnectionListener",
    "connect_management",
    "ManagementClient",
    # values
    "Accept",
    "AgentStatus",
    "AnswerContent",
    "AnswerValue",
    "Answered",
    "AskOperation",
    "CheckedGuidance",
    "CollectiveGuidance",
    "CollectiveOp",
    "CollectiveOperation",
    "CollectiveRequestItem",
    "CollectiveResponse",
    "CollectiveResultItem",
    "Content",
    "ContentPart",
    "ConversationRecord",
    "ConversationSummary",
    "DataPart",
    "Decline",
    "Declined",
    "DirectMessage",
    "Expectation",
    "ExpectationInstruction",
    "FailureDelivery",
    "FirewallRefusal",
    "GatewayStatus",
    "ClusterReplica",
    "ClusterStatus",
    "GroupMessage",
    "GuidanceSubject",
    "InboundDelivery",
    "InboundItem",
    "InboundMessage",
    "Instruction",
    "Invalid",
    "JsonValue",
    "LocalGuidance",
    "MemberGuidance",
    "MemberOutcome",
    "MemberResult",
    "MessageInput",
    "MulticastItem",
    "MulticastOperation",
    "NoAnswer",
    "OperationFailedItem",
    "RegisteredAgent",
    "RequestedSchema",
    "ResponseInput",
    "SendAbsent",
    "SendIndeterminate",
    "SendInput",
    "SendPending",
    "SendResult",
    "SendReturned",
    "SendState",
    "TextPart",
    "Uncertain",
    "UncertainInstruction",
    "Withheld",
    # errors
    "AnswerFieldIssue",
    "AnswerFieldReason",
    "AnswerInvalid",
    "AuthenticationError",
    "AuthenticationErrorReason",
    "CollectiveError",
    "CollectiveErrorKind",
    "CollectiveFailure",
    "ConnectError",
    "ConnectErrorReason",
    "DeliveryAcknowledgeError",
    "DeliveryAcknowledgeErrorReason",
    "EndpointClosedError",
    "FirewallSendError",
    "HarnessError",
    "ClientReason",
    "InvalidIdempotencyKeyError",
    "InvalidRequestReason",
    "ManagementErrorReason",
    "PermissionDeniedReason",
    "UnavailableReason",
    "text_of",
    "to_json",
    "IdempotencyConflictError",
    "InvalidRequestError",
    "ListenError",
    "ListenErrorReason",
    "ManagementError",
    "MembersUnreachable",
    "MessageTextError",
    "MessageTextOperation",
    "PermissionDeniedError",
    "RequestAmbiguous",
    "RequestAnswered",
    "RequestExpired",
    "RequestNone",
    "SchemaInvalid",
    "SendError",
    "SendErrorReason",
    "SendFailure",
    "TransportError",
    "UnavailableError",
    "UnreachableMember",
    "decode_status",
    # retry policy as data
    "RETRYABLE_CODES",
    "SERVICE_CONFIG",
    "TERMINAL_CODES",
    "should_reconnect",
}


def test_the_client_exports_exactly_its_public_names():
    assert set(harness_client.__all__) == PUBLIC_NAMES
    assert len(harness_client.__all__) == len(PUBLIC_NAMES)
    for name in harness_client.__all__:
        assert hasattr(harness_client, name), name


def test_every_exported_error_is_a_harness_client_error():
    for name in harness_client.__all__:
        value = getattr(harness_client, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, harness_client.HarnessError), name


def test_the_client_library_never_imports_the_gateway():
    import ast
    from pathlib import Path

    root = Path(harness_client.__file__).parent
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            else:
                continue
            assert not any(name == "gateway" or name.startswith("gateway.") for name in names), path
