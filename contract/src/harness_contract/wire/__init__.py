"""The contract's protobuf forms: the one mapping between `harness.v1` messages and our
dataclasses, both ways, shared by the gateway's RPC layer and the Python client.

Every value of the agent and management APIs has a `*_to_proto` and a `*_from_proto`
here; the gateway encodes what it answers and decodes what a client sent, the client the
other way round. Encoding our own values cannot fail except through a defect. Decoding
never raises anything but a typed failure:

- content that is not valid (`Value` with no kind, a non-finite number, a part with no
  `part`) is `SendError` `content-invalid`, as the contract's status table says;
- any other message that breaks the contract (an unset oneof, a NaN answer, an enum value
  this version does not know) is `InvalidRequestError` `invalid-request`. The gateway
  answers it as INVALID_ARGUMENT; the client reports an answer it cannot read as a
  transport failure.

JSON values travel as `google.protobuf.Value`: numbers are finite binary64 floats (`-0`
reads as `0`, as the core normalizes it), arrays read as tuples, objects as dicts.
Statuses: `status_of` packs a failure into the `google.rpc.Status` a call ends with, and
`error_of_status` reads one back.

One module per job, each importing only those before it in this list, and every name
re-exported here (`harness_contract.wire` is the one import, and only `gateway/rpc/` and the
client make it):

- `bridges`: the closed enums both ways, through one `EnumBridge`, which fails at import
  when a member is unmapped;
- `jsonvalue`: JSON values and content;
- `guidance`: firewall guidance and withheld text;
- `sends`: answers, collective operations, `SendInput`, `SendResult`;
- `items`: inbound messages, items, outcomes and deliveries;
- `errors`: the closed errors and the `ErrorDetail` a status carries;
- `states`: acknowledgment results and the state of an idempotency key;
- `status`: `status_of` and `error_of_status`;
- `management`: the management API's values.
"""

from __future__ import annotations

from harness_contract.wire.bridges import (
    REFUSALS,
    EnumBridge,
)
from harness_contract.wire.errors import (
    ErrorDetail,
    acknowledge_error_from_proto,
    acknowledge_error_to_proto,
    authentication_error_to_proto,
    collective_error_from_proto,
    collective_error_to_proto,
    connect_error_from_proto,
    connect_error_to_proto,
    error_from_proto,
    error_to_proto,
    firewall_error_from_proto,
    firewall_error_to_proto,
    idempotency_conflict_from_proto,
    idempotency_conflict_to_proto,
    listen_error_from_proto,
    listen_error_to_proto,
    message_text_error_from_proto,
    message_text_error_to_proto,
    parse_result_from_proto,
    parse_result_to_proto,
    send_error_from_proto,
    send_error_to_proto,
    send_failure_from_proto,
    send_failure_to_proto,
)
from harness_contract.wire.guidance import (
    checked_guidance_from_proto,
    checked_guidance_to_proto,
    local_guidance_from_proto,
    local_guidance_to_proto,
    withheld_from_proto,
    withheld_to_proto,
)
from harness_contract.wire.items import (
    delivery_from_proto,
    delivery_to_proto,
    inbound_message_from_proto,
    inbound_message_to_proto,
    item_from_proto,
    item_to_proto,
    member_outcome_from_proto,
    member_outcome_to_proto,
)
from harness_contract.wire.jsonvalue import (
    content_from_proto,
    content_to_proto,
    json_value_from_proto,
    json_value_to_proto,
    struct_from_proto,
    struct_to_proto,
)
from harness_contract.wire.management import (
    agent_status_from_proto,
    agent_status_to_proto,
    cluster_status_from_proto,
    cluster_status_to_proto,
    conversation_from_proto,
    conversation_record_from_proto,
    conversation_record_to_proto,
    conversation_to_proto,
    gateway_status_from_proto,
    gateway_status_to_proto,
    registered_agent_from_proto,
    registered_agent_to_proto,
)
from harness_contract.wire.sends import (
    answer_content_from_proto,
    answer_content_to_proto,
    collective_operation_from_proto,
    collective_operation_to_proto,
    collective_response_from_proto,
    collective_response_to_proto,
    failure_delivery_from_proto,
    failure_delivery_to_proto,
    schema_from_proto,
    send_input_from_proto,
    send_input_to_proto,
    send_result_from_proto,
    send_result_to_proto,
)
from harness_contract.wire.states import (
    acknowledge_result_from_proto,
    acknowledge_result_to_proto,
    send_state_from_proto,
    send_state_to_proto,
)
from harness_contract.wire.status import (
    ERROR_DOMAIN,
    RETRY_DELAY_SECONDS,
    error_of_status,
    status_of,
)

__all__ = [
    "ERROR_DOMAIN",
    "REFUSALS",
    "RETRY_DELAY_SECONDS",
    "EnumBridge",
    "ErrorDetail",
    "acknowledge_error_from_proto",
    "acknowledge_error_to_proto",
    "acknowledge_result_from_proto",
    "acknowledge_result_to_proto",
    "agent_status_from_proto",
    "agent_status_to_proto",
    "answer_content_from_proto",
    "answer_content_to_proto",
    "authentication_error_to_proto",
    "checked_guidance_from_proto",
    "checked_guidance_to_proto",
    "cluster_status_from_proto",
    "cluster_status_to_proto",
    "collective_error_from_proto",
    "collective_error_to_proto",
    "collective_operation_from_proto",
    "collective_operation_to_proto",
    "collective_response_from_proto",
    "collective_response_to_proto",
    "connect_error_from_proto",
    "connect_error_to_proto",
    "content_from_proto",
    "content_to_proto",
    "conversation_from_proto",
    "conversation_record_from_proto",
    "conversation_record_to_proto",
    "conversation_to_proto",
    "delivery_from_proto",
    "delivery_to_proto",
    "error_from_proto",
    "error_of_status",
    "error_to_proto",
    "failure_delivery_from_proto",
    "failure_delivery_to_proto",
    "firewall_error_from_proto",
    "firewall_error_to_proto",
    "gateway_status_from_proto",
    "gateway_status_to_proto",
    "idempotency_conflict_from_proto",
    "idempotency_conflict_to_proto",
    "inbound_message_from_proto",
    "inbound_message_to_proto",
    "item_from_proto",
    "item_to_proto",
    "json_value_from_proto",
    "json_value_to_proto",
    "listen_error_from_proto",
    "listen_error_to_proto",
    "local_guidance_from_proto",
    "local_guidance_to_proto",
    "member_outcome_from_proto",
    "member_outcome_to_proto",
    "message_text_error_from_proto",
    "message_text_error_to_proto",
    "parse_result_from_proto",
    "parse_result_to_proto",
    "registered_agent_from_proto",
    "registered_agent_to_proto",
    "schema_from_proto",
    "send_error_from_proto",
    "send_error_to_proto",
    "send_failure_from_proto",
    "send_failure_to_proto",
    "send_input_from_proto",
    "send_input_to_proto",
    "send_result_from_proto",
    "send_result_to_proto",
    "send_state_from_proto",
    "send_state_to_proto",
    "status_of",
    "struct_from_proto",
    "struct_to_proto",
    "withheld_from_proto",
    "withheld_to_proto",
]
