/**
 * The client's texts and codes agree with the Python contract (`harness_contract.errors`,
 * the vocabulary the gateway answers with): every SendError reason's status code, text
 * and clause, and the messages of collective failures. The contract is read by running the
 * repository's Python (the gateway's environment); no socket.
 */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { test } from "node:test";

import { SEND_ERROR_REASONS, collectiveFailureMessage } from "../src/errors.js";
import type { CollectiveFailure, SendErrorReason } from "../src/errors.js";
import { gatewayCommand } from "./support/gateway.js";

/** Python code printing the contract's tables as one JSON object. */
const DUMP = `
import json
from harness_contract import errors as e

failures = [
    e.MembersUnreachable(members=(
        e.UnreachableMember(member="agent:x", reason=e.SendErrorReason.UNKNOWN_AGENT),
        e.UnreachableMember(member="agent:y", reason=e.SendErrorReason.NETWORK_UNAVAILABLE),
        e.UnreachableMember(member="agent:z", reason=e.SendErrorReason.CERTIFICATION_UNAVAILABLE, detail="slow"),
    )),
    e.SchemaInvalid(detail="type: expected \\"object\\""),
    e.AnswerInvalid(fields=(
        e.AnswerFieldIssue(field="a", reason=e.AnswerFieldReason.MISSING),
        e.AnswerFieldIssue(field="b", reason=e.AnswerFieldReason.UNEXPECTED),
        e.AnswerFieldIssue(field="c", reason=e.AnswerFieldReason.INVALID, detail="enum: no"),
    )),
    e.RequestNone(), e.RequestAmbiguous(), e.RequestAnswered(), e.RequestExpired(),
]
print(json.dumps({
    "reasons": {
        r.value: {"code": r.status_code.name, "text": r.message_text, "clause": r.clause_text}
        for r in e.SendErrorReason
    },
    "collective": [
        [e.collective_failure_kind(f).value, e.collective_failure_message(f)] for f in failures
    ],
}))
`;

interface Contract {
  readonly reasons: Record<string, { code: string; text: string; clause: string }>;
  readonly collective: [string, string][];
}

function contract(): Contract {
  // The gateway's own interpreter: the one next to its `harness-gateway` script.
  const python = join(dirname(gatewayCommand()), "python");
  return JSON.parse(execFileSync(python, ["-c", DUMP], { encoding: "utf8" })) as Contract;
}

test("every SendError reason has the contract's code, text and clause", () => {
  const { reasons } = contract();
  assert.deepEqual(Object.keys(SEND_ERROR_REASONS).sort(), Object.keys(reasons).sort());
  for (const [reason, expected] of Object.entries(reasons)) {
    assert.deepEqual(SEND_ERROR_REASONS[reason as SendErrorReason], expected, reason);
  }
});

test("collective failures read as the contract writes them", () => {
  const failures: CollectiveFailure[] = [
    {
      kind: "members-unreachable",
      members: [
        { member: "agent:x", reason: "unknown-agent" },
        { member: "agent:y", reason: "network-unavailable" },
        { member: "agent:z", reason: "certification-unavailable", detail: "slow" },
      ],
    },
    { kind: "schema-invalid", detail: 'type: expected "object"' },
    {
      kind: "answer-invalid",
      fields: [
        { field: "a", reason: "missing" },
        { field: "b", reason: "unexpected" },
        { field: "c", reason: "invalid", detail: "enum: no" },
      ],
    },
    { kind: "request-none" },
    { kind: "request-ambiguous" },
    { kind: "request-answered" },
    { kind: "request-expired" },
  ];
  assert.deepEqual(
    failures.map((failure) => [failure.kind, collectiveFailureMessage(failure)]),
    contract().collective,
  );
});
