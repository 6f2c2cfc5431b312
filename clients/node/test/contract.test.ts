/**
 * The client's texts and codes agree with the Python contract (`harness_contract.errors`,
 * the vocabulary the gateway answers with): every SendError reason's status code, text
 * and clause, the messages of collective failures, the reasons of UNAVAILABLE, and the
 * details of connect failures and of an oversized message (one wording for both clients). The contract is read by running the
 * repository's Python (the gateway's environment); no socket.
 */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { test } from "node:test";

import {
  SEND_ERROR_REASONS,
  collectiveFailureMessage,
  incompatibleDetail,
  notReadyDetail,
  oversizedDetail,
  tokenRefusedDetail,
  unreachableDetail,
} from "../src/errors.js";
import type { AuthenticationErrorReason, CollectiveFailure, SendErrorReason } from "../src/errors.js";
import { UNAVAILABLE_REASONS } from "../src/status.js";
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
    e.RequestNone(), e.RequestNone(own_question=True),
    e.RequestAmbiguous(), e.RequestAnswered(), e.RequestExpired(),
]
from harness_contract.content import oversized_detail
address = "gw.example:7770"
connect = [
    *(e.token_refused_detail(address, r) for r in e.AuthenticationErrorReason),
    e.token_refused_detail(address, None),
    *(e.token_refused_detail(address, r, role="admin token") for r in e.AuthenticationErrorReason),
    e.token_refused_detail(address, None, role="admin token"),
    e.unreachable_detail(address, "connection refused"),
    e.not_ready_detail(address, 2.5),
    e.incompatible_detail(address),
    oversized_detail(2_000_025),
]
print(json.dumps({
    "reasons": {
        r.value: {"code": r.status_code.name, "text": r.message_text, "clause": r.clause_text}
        for r in e.SendErrorReason
    },
    "collective": [
        [e.collective_failure_kind(f).value, e.collective_failure_message(f)] for f in failures
    ],
    "authenticationReasons": [r.value for r in e.AuthenticationErrorReason],
    "unavailableReasons": [r.value for r in e.UnavailableReason],
    "connect": connect,
}))
`;

interface Contract {
  readonly reasons: Record<string, { code: string; text: string; clause: string }>;
  readonly collective: [string, string][];
  readonly authenticationReasons: AuthenticationErrorReason[];
  readonly unavailableReasons: string[];
  readonly connect: string[];
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
    { kind: "request-none", ownQuestion: true },
    { kind: "request-ambiguous" },
    { kind: "request-answered" },
    { kind: "request-expired" },
  ];
  assert.deepEqual(
    failures.map((failure) => [failure.kind, collectiveFailureMessage(failure)]),
    contract().collective,
  );
});

test("connect failures and an oversized message read as the Python client words them", () => {
  const { authenticationReasons, connect } = contract();
  const address = "gw.example:7770";
  assert.deepEqual(
    [
      ...authenticationReasons.map((reason) => tokenRefusedDetail(address, reason)),
      tokenRefusedDetail(address, undefined),
      ...authenticationReasons.map((reason) => tokenRefusedDetail(address, reason, "admin token")),
      tokenRefusedDetail(address, undefined, "admin token"),
      unreachableDetail(address, "connection refused"),
      notReadyDetail(address, 2.5),
      incompatibleDetail(address),
      oversizedDetail(2_000_025),
    ],
    connect,
  );
});

test("every UNAVAILABLE reason of the contract reads as an UnavailableError", () => {
  assert.deepEqual([...UNAVAILABLE_REASONS.values()].sort(), contract().unavailableReasons.sort());
});
