/**
 * Unit tests of the error decoder (src/status.ts): statuses built as the gateway builds
 * them (a closed detail, an ErrorInfo, a RetryInfo), read both from the raw
 * `grpc-status-details-bin` bytes and from a `ConnectError`. No socket.
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { create, toBinary } from "@bufbuild/protobuf";
import type { DescMessage, MessageInitShape } from "@bufbuild/protobuf";
import { anyPack } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";

import {
  AuthenticationError,
  CollectiveError,
  FirewallSendError,
  HarnessError,
  IdempotencyConflictError,
  InvalidRequestError,
  ListenError,
  ManagementError,
  MessageTextError,
  PermissionDeniedError,
  SendError,
  TransportError,
  UnavailableError,
} from "../src/errors.js";
import { ErrorInfoSchema, RetryInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../src/gen/google/rpc/status_pb.js";
import * as errorsPb from "../src/gen/harness/v1/errors_pb.js";
import { decodeError, decodeStatusBytes } from "../src/status.js";

interface Packed {
  readonly schema: DescMessage;
  readonly value: MessageInitShape<DescMessage>;
}

function detail<Desc extends DescMessage>(schema: Desc, value: MessageInitShape<Desc>): Packed {
  return { schema, value: value as MessageInitShape<DescMessage> };
}

function info(reason: string, domain = "harness.v1"): Packed {
  return detail(ErrorInfoSchema, { reason, domain });
}

/** The bytes of the gateway's `grpc-status-details-bin` for these details. */
function statusBytes(code: number, message: string, details: readonly Packed[]): Uint8Array {
  return toBinary(
    StatusSchema,
    create(StatusSchema, {
      code,
      message,
      details: details.map(({ schema, value }) => anyPack(schema, create(schema, value))),
    }),
  );
}

/** The same status as `@connectrpc/connect` hands it over. */
function connectError(code: Code, message: string, details: readonly Packed[]): ConnectError {
  const error = new ConnectError(message, code);
  error.details = details.map(({ schema, value }) => ({
    type: schema.typeName,
    value: toBinary(schema, create(schema, value)),
  }));
  return error;
}

/** Decode one status both ways and check that they agree. */
function decodeBoth(code: Code, message: string, details: readonly Packed[]): HarnessError {
  const fromBytes = decodeStatusBytes(statusBytes(code, message, details));
  const fromConnect = decodeError(connectError(code, message, details));
  assert.equal(fromBytes.constructor, fromConnect.constructor);
  assert.deepEqual(fromBytes.toJSON(), fromConnect.toJSON());
  return fromBytes;
}

describe("closed details", () => {
  test("a SendError decodes with its kebab-case reason, code and detail text", () => {
    const error = decodeBoth(Code.NotFound, "send failed: agent:nobody is not registered with the gateway", [
      detail(errorsPb.SendErrorSchema, {
        reason: errorsPb.SendErrorReason.UNKNOWN_AGENT,
        detail: "agent:nobody is not registered with the gateway",
      }),
      info("UNKNOWN_AGENT"),
    ]);
    assert.ok(error instanceof SendError);
    assert.deepEqual([error.reason, error.code, error.detail, error.message], [
      "unknown-agent",
      "NOT_FOUND",
      "agent:nobody is not registered with the gateway",
      "send failed: agent:nobody is not registered with the gateway",
    ]);
  });

  test("a SendError without detail carries the reason's text", () => {
    const error = decodeBoth(Code.Unavailable, "ignored", [
      detail(errorsPb.SendErrorSchema, { reason: errorsPb.SendErrorReason.NETWORK_UNAVAILABLE }),
    ]);
    assert.equal(error.message, "send failed: the gateway cannot reach the network right now; nothing was sent");
  });

  test("a CollectiveError decodes its kind, id and payload, and writes the contract's message", () => {
    const error = decodeBoth(Code.FailedPrecondition, "", [
      detail(errorsPb.CollectiveErrorSchema, {
        id: "col_1",
        failure: {
          case: "membersUnreachable",
          value: {
            members: [
              { member: "agent:x", reason: errorsPb.SendErrorReason.UNKNOWN_AGENT },
              { member: "agent:y", reason: errorsPb.SendErrorReason.NETWORK_UNAVAILABLE },
            ],
          },
        },
      }),
    ]);
    assert.ok(error instanceof CollectiveError);
    assert.equal(error.kind, "members-unreachable");
    assert.equal(error.id, "col_1");
    assert.equal(
      error.message,
      "send failed: agent:x is not a known agent; agent:y could not be reached: the gateway is unavailable (network unavailable)",
    );
    assert.deepEqual(error.toJSON(), {
      type: "CollectiveError",
      reason: "members-unreachable",
      code: "FAILED_PRECONDITION",
      message: error.message,
      id: "col_1",
      members: [
        { member: "agent:x", reason: "unknown-agent" },
        { member: "agent:y", reason: "network-unavailable" },
      ],
    });
  });

  test("an answer-invalid names each field's clause", () => {
    const error = decodeBoth(Code.InvalidArgument, "", [
      detail(errorsPb.CollectiveErrorSchema, {
        id: "col_2",
        failure: {
          case: "answerInvalid",
          value: {
            fields: [
              { field: "slot", reason: errorsPb.AnswerFieldReason.INVALID, detail: "enum: must be one of the allowed values" },
              { field: "why", reason: errorsPb.AnswerFieldReason.UNEXPECTED },
            ],
          },
        },
      }),
    ]);
    assert.equal(
      error.message,
      'reply failed: field "slot" is invalid (enum: must be one of the allowed values); field "why" is not in the form',
    );
  });

  test("a FirewallSendError keeps its refusal, ids and guidance", () => {
    const error = decodeBoth(Code.PermissionDenied, "", [
      detail(errorsPb.FirewallSendErrorSchema, {
        checkId: "chk_1",
        refusal: 3,
        middlewareId: "limits",
        ruleId: "per-agent",
        instruction: "slow down",
        guidance: { checkId: "chk_1" },
      }),
    ]);
    assert.ok(error instanceof FirewallSendError);
    assert.deepEqual([error.reason, error.middlewareId, error.ruleId, error.message], [
      "rate-limited",
      "limits",
      "per-agent",
      "send refused by the local firewall (rate-limited): slow down",
    ]);
    assert.deepEqual(error.guidance, { checkId: "chk_1", subjects: [], instructions: [] });
  });

  test("the other closed details decode to their classes", () => {
    const cases: [Packed, new (...args: never[]) => HarnessError, string, string][] = [
      [detail(errorsPb.ListenErrorSchema, { reason: 1 }), ListenError, "already-listening", "listen failed: already-listening"],
      [
        detail(errorsPb.MessageTextErrorSchema, { operation: errorsPb.MessageTextOperation.ALL_GATHER, detail: "deadline: is missing" }),
        MessageTextError,
        "message-text-invalid",
        "all_gather not sent: deadline: is missing",
      ],
      [
        detail(errorsPb.IdempotencyConflictSchema, { key: "k" }),
        IdempotencyConflictError,
        "idempotency-conflict",
        "send failed: this send repeats an earlier send with different content",
      ],
      [
        detail(errorsPb.AuthenticationErrorSchema, { reason: errorsPb.AuthenticationErrorReason.REVOKED }),
        AuthenticationError,
        "revoked",
        "authentication failed: the token was revoked",
      ],
    ];
    for (const [packed, type, reason, message] of cases) {
      const error = decodeBoth(Code.Unauthenticated, "authentication failed: the token was revoked", [packed, info("X")]);
      assert.ok(error instanceof type, `${packed.schema.typeName} decoded as ${error.name}`);
      assert.deepEqual([error.reason, error.message], [reason, message]);
    }
  });

  test("an enum value this client does not know is a TransportError, not a wrong reason", () => {
    const error = decodeBoth(Code.InvalidArgument, "send failed: something new", [
      detail(errorsPb.SendErrorSchema, { reason: 42 as errorsPb.SendErrorReason }),
    ]);
    assert.ok(error instanceof TransportError);
    assert.deepEqual([error.reason, error.message], ["invalid-argument", "send failed: something new"]);
  });
});

describe("statuses by their ErrorInfo reason", () => {
  test("authentication without a detail (an older gateway) reads the ErrorInfo", () => {
    const error = decodeBoth(Code.Unauthenticated, "authentication failed: the token is not known to this gateway", [
      info("UNKNOWN"),
    ]);
    assert.ok(error instanceof AuthenticationError);
    assert.equal(error.reason, "unknown");
  });

  test("wrong-role, not-ready with its retry delay, management and request reasons", () => {
    const denied = decodeBoth(Code.PermissionDenied, "permission denied: an admin token", [info("WRONG_ROLE")]);
    assert.ok(denied instanceof PermissionDeniedError);
    assert.equal(denied.reason, "wrong-role");

    const notReady = decodeBoth(Code.Unavailable, "the gateway is not ready yet (recovering)", [
      info("NOT_READY"),
      detail(RetryInfoSchema, { retryDelay: { seconds: 1n, nanos: 500_000_000 } }),
    ]);
    assert.ok(notReady instanceof UnavailableError);
    assert.deepEqual([notReady.reason, notReady.retryDelayMs], ["not-ready", 1500]);

    // A cluster replica's refusals: nothing ran, so every send may be sent again.
    for (const [reason, expected] of [["NOT_OWNER", "not-owner"], ["HOME_UNREACHABLE", "home-unreachable"]] as const) {
      const refused = decodeBoth(Code.Unavailable, "the agent's home replica is unreachable", [info(reason)]);
      assert.ok(refused instanceof UnavailableError);
      assert.equal(refused.reason, expected);
    }

    const taken = decodeBoth(Code.AlreadyExists, "agent:alice is already registered", [info("NAME_TAKEN")]);
    assert.ok(taken instanceof ManagementError);
    assert.deepEqual([taken.reason, taken.code], ["name-taken", "ALREADY_EXISTS"]);

    const malformed = decodeBoth(Code.InvalidArgument, "the request body is not a valid harness.v1.SendRequest", [
      info("MALFORMED_REQUEST"),
    ]);
    assert.ok(malformed instanceof InvalidRequestError);
    assert.equal(malformed.reason, "malformed-request");
  });

  test("an ErrorInfo of another domain says nothing", () => {
    const error = decodeBoth(Code.Unauthenticated, "no", [info("UNKNOWN", "example.com")]);
    assert.ok(error instanceof TransportError);
    assert.equal(error.reason, "unauthenticated");
  });

  test("a status without details, an undecodable detail, and bytes that are no Status", () => {
    const plain = decodeError(new ConnectError("upstream connect error", Code.Unavailable));
    assert.ok(plain instanceof TransportError);
    assert.deepEqual([plain.code, plain.reason, plain.message], ["UNAVAILABLE", "unavailable", "upstream connect error"]);

    const broken = new ConnectError("send failed", Code.NotFound);
    broken.details = [{ type: errorsPb.SendErrorSchema.typeName, value: new Uint8Array([0xff, 0xff]) }];
    assert.ok(decodeError(broken) instanceof TransportError);

    const garbage = decodeStatusBytes(new Uint8Array([0xff, 0x01]));
    assert.ok(garbage instanceof TransportError);
    assert.equal(garbage.code, "INTERNAL");
  });

  test("a HarnessError passes through, anything else becomes a TransportError", () => {
    const error = new SendError("outcome-unknown");
    assert.equal(decodeError(error), error);
    const unknown = decodeError(new Error("boom"));
    assert.ok(unknown instanceof TransportError);
    assert.equal(unknown.code, "UNKNOWN");
  });
});
