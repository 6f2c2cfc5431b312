from __future__ import annotations

import gateway.endpoint.api
import gateway.endpoint.inbox


def test_the_inbox_package_exports_exactly_its_public_names():
    assert set(gateway.endpoint.inbox.__all__) == {
        "ACKNOWLEDGE_MAX_TOKENS",
        "NULL_INBOX_OBSERVER",
        "AckResult",
        "AcknowledgeResult",
        "AgentInbox",
        "InboxObserver",
        "InboxScreen",
        "MessageStream",
        "Screened",
        "StreamEndReason",
        "StreamEnded",
        "StreamOpen",
    }
    assert len(gateway.endpoint.inbox.__all__) == len(set(gateway.endpoint.inbox.__all__))
    for name in gateway.endpoint.inbox.__all__:
        assert hasattr(gateway.endpoint.inbox, name)


def test_the_endpoint_api_re_exports_the_inbox_values_the_rpc_layer_uses():
    for name in (
        "ACKNOWLEDGE_MAX_TOKENS",
        "AcknowledgeResult",
        "MessageStream",
        "StreamEndReason",
        "StreamEnded",
    ):
        assert getattr(gateway.endpoint.api, name) is getattr(gateway.endpoint.inbox, name)
