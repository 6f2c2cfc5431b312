/**
 * Unit tests of the converters (src/convert.ts): every value shape through protobuf and
 * back, JSON values, the enum tables, and what `DecodeFailed` refuses. No socket.
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";

import {
  COLLECTIVE_OP,
  DecodeFailed,
  MESSAGE_TEXT_OPERATION,
  SEND_ERROR_REASON,
  answerContentFromProto,
  answerContentToProto,
  gatewayStatusFromProto,
  itemFromProto,
  jsonToValue,
  localGuidanceFromProto,
  sendInputFromProto,
  sendInputToProto,
  sendStateFromProto,
  valueToJson,
} from "../src/convert.js";
import { SEND_ERROR_REASONS, SendError } from "../src/errors.js";
import * as errorsPb from "../src/gen/harness/v1/errors_pb.js";
import { ReadSendResponseSchema } from "../src/gen/harness/v1/endpoint_pb.js";
import { LocalGuidanceSchema } from "../src/gen/harness/v1/guidance_pb.js";
import * as managementPb from "../src/gen/harness/v1/management_pb.js";
import { GetGatewayStatusResponseSchema } from "../src/gen/harness/v1/management_pb.js";
import { AnswerContentSchema, InboundItemSchema, SendInputSchema } from "../src/gen/harness/v1/types_pb.js";
import type { JsonValue, SendInput } from "../src/values.js";

/** `input` through the wire and back. */
function roundTrip(input: SendInput): SendInput {
  const bytes = toBinary(SendInputSchema, create(SendInputSchema, sendInputToProto(input)));
  return sendInputFromProto(fromBinary(SendInputSchema, bytes));
}

describe("JSON values", () => {
  test("every JSON shape survives google.protobuf.Value", () => {
    const value: JsonValue = { a: [1, 2.5, -0.125], b: { c: null, d: true, e: "text" }, f: [], g: {} };
    const bytes = toBinary(ValueSchema, jsonToValue(value));
    assert.deepEqual(valueToJson(fromBinary(ValueSchema, bytes)), value);
  });

  test("a non-finite number is refused before anything is sent, naming its path", () => {
    assert.throws(() => jsonToValue({ a: [1, Number.NaN] }), { name: "TypeError", message: "value.a[1]: a JSON number must be finite" });
    assert.throws(() => jsonToValue({ big: 1n } as unknown as JsonValue), /value.big: a bigint is not a JSON value/);
  });

  test("a Value with no kind is a decode failure", () => {
    assert.throws(() => valueToJson(create(ValueSchema)), DecodeFailed);
  });
});

describe("send inputs", () => {
  const schema = { type: "object", properties: { slot: { type: "string" } }, required: ["slot"] };
  const inputs: [string, SendInput][] = [
    ["a message", { to: "agent:bob", text: "hello" }],
    ["an omitted op ({})", { to: "agent:bob", text: "hello", collective: {} }],
    ["an explicit multicast", { to: "agent:bob", text: "hello", collective: { op: "multicast" } }],
    ["a gather", { to: "agent:bob", text: "when?", collective: { op: "gather", deadline: 60, requestedSchema: schema } }],
    [
      "an all_gather",
      { to: "group:a-1,b-2,c-3", text: "when?", collective: { op: "all_gather", deadline: 2_592_000, requestedSchema: schema } },
    ],
    [
      "an accept",
      { to: "agent:alice", collectiveResponse: { action: "accept", content: { s: "x", n: 1.5, b: false, l: ["p", "q"] } } },
    ],
    ["a decline", { to: "agent:alice", collectiveResponse: { action: "decline" } }],
  ];
  for (const [what, input] of inputs) {
    test(`${what} round-trips`, () => {
      assert.deepEqual(roundTrip(input), input);
    });
  }

  test("an omitted collective and {} are different messages on the wire", () => {
    const omitted = toBinary(SendInputSchema, create(SendInputSchema, sendInputToProto({ to: "agent:b", text: "t" })));
    const empty = toBinary(
      SendInputSchema,
      create(SendInputSchema, sendInputToProto({ to: "agent:b", text: "t", collective: {} })),
    );
    assert.notDeepEqual(omitted, empty);
  });

  test("an answer value outside the form's types is refused", () => {
    assert.throws(
      () => answerContentToProto({ bad: { nested: 1 } as unknown as string }),
      /answer field bad: a string, number, boolean or list of strings/,
    );
  });

  test("answer content with no value decodes as a failure", () => {
    const content = create(AnswerContentSchema, { fields: { x: {} } });
    assert.throws(() => answerContentFromProto(content), DecodeFailed);
  });

  test("an input with no shape decodes as a failure", () => {
    assert.throws(() => sendInputFromProto(create(SendInputSchema)), /a send input has no input/);
    assert.throws(() => sendInputFromProto(undefined), /input is missing/);
  });
});

describe("inbound items", () => {
  test("a collective request carries from, to, the schema and an epoch-millisecond deadline", () => {
    const item = create(InboundItemSchema, {
      kind: {
        case: "collectiveRequest",
        value: {
          op: 2,
          id: "col_x",
          postId: "pst_y",
          sender: "agent:alice",
          to: "group:alice,bob,carol",
          question: "q?",
          requestedSchema: { type: "object", properties: {} },
          deadlineAt: 1_767_225_600_000n,
        },
      },
    });
    assert.deepEqual(itemFromProto(fromBinary(InboundItemSchema, toBinary(InboundItemSchema, item))), {
      kind: "collectiveRequest",
      op: "all_gather",
      id: "col_x",
      postId: "pst_y",
      from: "agent:alice",
      to: "group:alice,bob,carol",
      question: "q?",
      requestedSchema: { type: "object", properties: {} },
      deadlineAt: 1_767_225_600_000,
    });
  });

  test("a collective result keeps every outcome kind, a withheld question included", () => {
    const item = create(InboundItemSchema, {
      kind: {
        case: "collectiveResult",
        value: {
          op: 1,
          id: "col_x",
          to: "agent:bob",
          question: { kind: { case: "withheld", value: { checkId: "chk_1", reason: 2 } } },
          outcomes: [
            { member: "agent:a", outcome: { kind: { case: "answered", value: { content: { fields: { n: { value: { case: "numberValue", value: 3 } } } } } } } },
            { member: "agent:b", outcome: { kind: { case: "declined", value: {} } } },
            { member: "agent:c", outcome: { kind: { case: "invalid", value: { reason: 'field "n" is missing' } } } },
            { member: "agent:d", outcome: { kind: { case: "noAnswer", value: {} } } },
            { member: "agent:e", outcome: { kind: { case: "withheld", value: { checkId: "chk_2", reason: 4 } } } },
          ],
        },
      },
    });
    assert.deepEqual(itemFromProto(item), {
      kind: "collectiveResult",
      op: "gather",
      id: "col_x",
      to: "agent:bob",
      question: { kind: "withheld", checkId: "chk_1", reason: "content-blocked" },
      outcomes: [
        { member: "agent:a", outcome: { kind: "answered", content: { n: 3 } } },
        { member: "agent:b", outcome: { kind: "declined" } },
        { member: "agent:c", outcome: { kind: "invalid", reason: 'field "n" is missing' } },
        { member: "agent:d", outcome: { kind: "no-answer" } },
        { member: "agent:e", outcome: { kind: "withheld", checkId: "chk_2", reason: "middleware-unavailable" } },
      ],
    });
  });

  test("a group message keeps its members and its data parts as plain JSON", () => {
    const item = create(InboundItemSchema, {
      kind: {
        case: "multicast",
        value: {
          message: {
            kind: {
              case: "group",
              value: {
                postId: "pst_1",
                address: "group:a-1,b-2,c-3",
                sender: "agent:a-1",
                members: ["agent:a-1", "agent:b-2", "agent:c-3"],
                content: {
                  parts: [
                    { part: { case: "text", value: { text: "hi" } } },
                    { part: { case: "data", value: { value: jsonToValue({ k: [1, "two"] }) } } },
                  ],
                },
              },
            },
          },
        },
      },
    });
    assert.deepEqual(itemFromProto(item), {
      kind: "multicast",
      message: {
        kind: "group",
        postId: "pst_1",
        address: "group:a-1,b-2,c-3",
        sender: "agent:a-1",
        members: ["agent:a-1", "agent:b-2", "agent:c-3"],
        content: [
          { type: "text", text: "hi" },
          { type: "data", value: { k: [1, "two"] } },
        ],
      },
    });
  });

  test("an item of an unknown kind, an unspecified op or no outcomes is a decode failure", () => {
    assert.throws(() => itemFromProto(create(InboundItemSchema)), DecodeFailed);
    const unspecifiedOp = create(InboundItemSchema, {
      kind: { case: "collectiveRequest", value: { op: 0, requestedSchema: {} } },
    });
    assert.throws(() => itemFromProto(unspecifiedOp), /CollectiveOp: unknown value 0/);
    const noOutcomes = create(InboundItemSchema, {
      kind: { case: "collectiveResult", value: { op: 1, question: { kind: { case: "text", value: "q" } } } },
    });
    assert.throws(() => itemFromProto(noOutcomes), /no outcomes/);
  });
});

describe("guidance", () => {
  test("the collective form keeps each answer's member beside its check", () => {
    const guidance = create(LocalGuidanceSchema, {
      kind: {
        case: "collective",
        value: {
          answers: [
            {
              member: "agent:bob",
              guidance: {
                checkId: "chk_a",
                subjects: [{ id: "agent:bob", sender: "agent:bob", recipients: ["agent:alice"], text: "mon" }],
                instructions: [
                  {
                    kind: {
                      case: "uncertain",
                      value: { middlewareId: "m", ruleId: "r", uncertain: { choice: "spam", probability: 0.25 }, instruction: "careful" },
                    },
                  },
                  {
                    kind: {
                      case: "expectation",
                      value: { middlewareId: "m", ruleId: "r2", expectation: 3, subjects: ["agent:bob"], instruction: "wait" },
                    },
                  },
                ],
              },
            },
          ],
        },
      },
    });
    assert.deepEqual(localGuidanceFromProto(guidance), {
      answers: [
        {
          checkId: "chk_a",
          subjects: [{ id: "agent:bob", sender: "agent:bob", recipients: ["agent:alice"], text: "mon" }],
          instructions: [
            { middlewareId: "m", ruleId: "r", uncertain: { choice: "spam", probability: 0.25 }, instruction: "careful" },
            { middlewareId: "m", ruleId: "r2", expectation: "wait", subjects: ["agent:bob"], instruction: "wait" },
          ],
          member: "agent:bob",
        },
      ],
    });
  });
});

describe("send states", () => {
  test("a returned failure is the typed error, with its detail", () => {
    const response = create(ReadSendResponseSchema, {
      state: {
        case: "returned",
        value: {
          input: sendInputToProto({ to: "agent:nobody", text: "x" }),
          outcome: { case: "failure", value: { failure: { case: "sendError", value: { reason: 2, detail: "agent:nobody is gone" } } } },
        },
      },
    });
    const state = sendStateFromProto(response);
    assert.equal(state.state, "returned");
    assert.equal(state.outcome.kind, "failure");
    assert.ok(state.outcome.error instanceof SendError);
    assert.deepEqual([state.outcome.error.reason, state.outcome.error.message], [
      "unknown-agent",
      "send failed: agent:nobody is gone",
    ]);
  });
});

describe("enum tables", () => {
  test("every SendErrorReason maps to the kebab-case of its proto name, and has a text", () => {
    for (const [name, number] of Object.entries(errorsPb.SendErrorReason)) {
      if (typeof number !== "number" || number === 0) {
        continue;
      }
      const reason = SEND_ERROR_REASON.fromProto(number);
      assert.equal(reason, name.toLowerCase().replaceAll("_", "-"));
      assert.ok(SEND_ERROR_REASONS[reason].text.length > 0);
      assert.equal(SEND_ERROR_REASON.toProto(reason), number);
    }
    assert.throws(() => SEND_ERROR_REASON.fromProto(0), DecodeFailed);
    assert.throws(() => SEND_ERROR_REASON.fromProto(99), /SendErrorReason: unknown value 99/);
  });

  test("the two spellings with an underscore keep it", () => {
    assert.equal(COLLECTIVE_OP.fromProto(2), "all_gather");
    assert.equal(MESSAGE_TEXT_OPERATION.fromProto(errorsPb.MessageTextOperation.ALL_GATHER), "all_gather");
  });
});

describe("gateway status", () => {
  const base = {
    version: "1.2.3",
    mode: managementPb.GatewayMode.CLUSTER,
    hostedAgents: 4,
    routerState: managementPb.RouterAttachment.ACTIVE,
  };

  test("a status without a cluster has no cluster field", () => {
    const status = gatewayStatusFromProto(create(GetGatewayStatusResponseSchema, base));
    assert.deepEqual(status, { version: "1.2.3", mode: "cluster", hostedAgents: 4, routerState: "active" });
    assert.ok(!("cluster" in status));
  });

  test("a cluster replica's status carries the replica, its lease, the partitions and every replica", () => {
    const message = create(GetGatewayStatusResponseSchema, {
      ...base,
      cluster: {
        replicaId: "r1",
        incarnation: 7n,
        state: managementPb.ReplicaState.SERVING,
        leaseRemainingSeconds: 4.5,
        claiming: true,
        partitions: 16,
        ownedPartitions: 9,
        unownedPartitions: 2,
        replicas: [
          {
            replicaId: "r2",
            incarnation: 3n,
            address: "10.0.0.2:7770",
            serving: false,
            live: false,
            fenced: true,
            beatAgeSeconds: 12.5,
            partitions: 5,
          },
        ],
      },
    });
    const bytes = toBinary(GetGatewayStatusResponseSchema, message);
    const status = gatewayStatusFromProto(fromBinary(GetGatewayStatusResponseSchema, bytes));
    assert.deepEqual(status.cluster, {
      replicaId: "r1",
      incarnation: 7n,
      state: "serving",
      leaseRemainingSeconds: 4.5,
      claiming: true,
      partitions: 16,
      ownedPartitions: 9,
      unownedPartitions: 2,
      replicas: [
        {
          replicaId: "r2",
          incarnation: 3n,
          address: "10.0.0.2:7770",
          serving: false,
          live: false,
          fenced: true,
          beatAgeSeconds: 12.5,
          partitions: 5,
        },
      ],
    });
  });

  test("a replica state the client does not know is refused", () => {
    const message = create(GetGatewayStatusResponseSchema, { ...base, cluster: { replicaId: "r1", state: 0 } });
    assert.throws(() => gatewayStatusFromProto(message), DecodeFailed);
  });
});
