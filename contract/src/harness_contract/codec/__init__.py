"""The contract's JSON shapes of the public values (camelCase, as the contract writes them).

Used where a value is stored or exported as JSON: inbox items and their guidance, the
idempotency binding of a `SendInput`, kept send outcomes, the history export, and what the
`harness` CLI prints. Every `*_from_json` is strict (exact keys) and raises only
`CodecError`, so a row that does not decode is reported, never half-read. `to_json` takes
any public value and answers plain `json`-module values (lists, not tuples).

One module per family of values, each importing only those before it in this list, and
every name re-exported here (`harness_contract.codec` is the one import):

- `strict`: `CodecError` and the strict readers the others share;
- `guidance`: checked and collective guidance, withheld text;
- `sends`: answers, `SendInput`, `SendResult`;
- `items`: inbound messages, items and members' outcomes;
- `errors`: the closed send-side errors with every typed field;
- `printing`: deliveries, send states, management values and `to_json` (what the client
  prints).
"""

from __future__ import annotations

from harness_contract.codec.errors import error_from_json, error_to_json
from harness_contract.codec.guidance import (
    checked_guidance_from_json,
    checked_guidance_to_json,
    local_guidance_from_json,
    local_guidance_to_json,
    withheld_from_json,
    withheld_to_json,
)
from harness_contract.codec.items import (
    item_from_json,
    item_to_json,
    message_from_json,
    message_to_json,
    outcome_from_json,
    outcome_to_json,
)
from harness_contract.codec.printing import (
    Printable,
    agent_status_to_json,
    cluster_status_to_json,
    conversation_record_to_json,
    conversation_summary_to_json,
    delivery_to_json,
    gateway_status_to_json,
    registered_agent_to_json,
    send_state_to_json,
    to_json,
)
from harness_contract.codec.sends import (
    answer_content_from_json,
    answer_content_to_json,
    response_to_json,
    send_input_from_json,
    send_input_to_json,
    send_result_from_json,
    send_result_to_json,
)
from harness_contract.codec.strict import CodecError

__all__ = [
    "CodecError",
    "Printable",
    "agent_status_to_json",
    "answer_content_from_json",
    "answer_content_to_json",
    "checked_guidance_from_json",
    "checked_guidance_to_json",
    "cluster_status_to_json",
    "conversation_record_to_json",
    "conversation_summary_to_json",
    "delivery_to_json",
    "error_from_json",
    "error_to_json",
    "gateway_status_to_json",
    "item_from_json",
    "item_to_json",
    "local_guidance_from_json",
    "local_guidance_to_json",
    "message_from_json",
    "message_to_json",
    "outcome_from_json",
    "outcome_to_json",
    "registered_agent_to_json",
    "response_to_json",
    "send_input_from_json",
    "send_input_to_json",
    "send_result_from_json",
    "send_result_to_json",
    "send_state_to_json",
    "to_json",
    "withheld_from_json",
    "withheld_to_json",
]
