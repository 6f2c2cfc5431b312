/**
 * Protobuf messages (`src/gen/`) to the client's values and back: the one place that
 * knows both shapes.
 *
 * Decoding throws only `DecodeFailed`, which callers turn into the contract's
 * `decode-failed` reasons (`ListenError`, `HarnessConnectError`) or, for a send, into
 * `outcome-unknown`. Each closed enum is one `EnumBridge`, whose table the compiler
 * checks complete against the generated enum.
 */

import { create } from "@bufbuild/protobuf";
import type { JsonObject as PbJsonObject, MessageInitShape } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import type { Value } from "@bufbuild/protobuf/wkt";

import type { AcknowledgeResult, ReadSendResponse } from "./gen/harness/v1/endpoint_pb.js";
import * as errorsPb from "./gen/harness/v1/errors_pb.js";
import * as guidancePb from "./gen/harness/v1/guidance_pb.js";
import * as managementPb from "./gen/harness/v1/management_pb.js";
import * as typesPb from "./gen/harness/v1/types_pb.js";
import {
  AuthenticationError,
  CollectiveError,
  DeliveryAcknowledgeError,
  FirewallSendError,
  HarnessConnectError,
  IdempotencyConflictError,
  ListenError,
  MessageTextError,
  SendError,
} from "./errors.js";
import type {
  AnswerFieldIssue,
  AnswerFieldReason,
  AuthenticationErrorReason,
  CollectiveFailure,
  ConnectErrorReason,
  DeliveryAcknowledgeErrorReason,
  ErrorOptions,
  HarnessError,
  ListenErrorReason,
  MessageTextOperation,
  SendErrorReason,
  SendFailure,
  UnreachableMember,
} from "./errors.js";
import type {
  AgentStatus,
  AnswerContent,
  AnswerValue,
  CheckedGuidance,
  ClusterStatus,
  CollectiveMemberOutcome,
  CollectiveOp,
  CollectiveOperation,
  CollectiveResponse,
  Content,
  ContentPart,
  Expectation,
  FailureDelivery,
  FirewallRefusal,
  GatewayStatus,
  InboundItem,
  InboundMessage,
  Instruction,
  JsonObject,
  JsonValue,
  LocalGuidance,
  RegisteredAgent,
  SendInput,
  SendResult,
  SendState,
  Withheld,
} from "./values.js";

/** A message from the gateway does not have the shape this client knows. */
export class DecodeFailed extends Error {
  override name = "DecodeFailed";
}

/** One closed enum: its contract spellings by protobuf number, checked complete. */
export class EnumBridge<P extends number, V extends string> {
  private readonly back = new Map<number, V>();
  private readonly forward = new Map<V, P>();

  constructor(
    private readonly what: string,
    table: { readonly [K in P]: V },
  ) {
    for (const [key, value] of Object.entries(table) as [string, V][]) {
      this.back.set(Number(key), value);
      this.forward.set(value, Number(key) as P);
    }
  }

  /** The protobuf number of `value`. */
  toProto(value: V): P {
    const number = this.forward.get(value);
    if (number === undefined) {
      throw new TypeError(`${this.what}: ${JSON.stringify(value)} is not one of ${[...this.forward.keys()].join(", ")}`);
    }
    return number;
  }

  /** The contract spelling of `number`; `DecodeFailed` for UNSPECIFIED or an unknown value. */
  fromProto(number: number): V {
    const value = this.back.get(number);
    if (value === undefined) {
      throw new DecodeFailed(`${this.what}: unknown value ${number}`);
    }
    return value;
  }

  /** Every contract spelling, in protobuf order. */
  values(): V[] {
    return [...this.back.values()];
  }
}

const S = errorsPb.SendErrorReason;
export const SEND_ERROR_REASON = new EnumBridge<Exclude<errorsPb.SendErrorReason, 0>, SendErrorReason>(
  "SendErrorReason",
  {
    [S.INVALID_ADDRESS]: "invalid-address",
    [S.UNKNOWN_AGENT]: "unknown-agent",
    [S.MEMBERSHIP_INVALID]: "membership-invalid",
    [S.CONTENT_INVALID]: "content-invalid",
    [S.NOT_REGISTERED]: "not-registered",
    [S.VERSION_MISMATCH]: "version-mismatch",
    [S.CERTIFICATION_UNAVAILABLE]: "certification-unavailable",
    [S.PERSISTENCE_FAILED]: "persistence-failed",
    [S.NETWORK_UNAVAILABLE]: "network-unavailable",
    [S.DELIVERY_PENDING]: "delivery-pending",
    [S.OUTCOME_UNKNOWN]: "outcome-unknown",
    [S.TOO_MANY_OPERATIONS]: "too-many-operations",
  },
);

const F = errorsPb.AnswerFieldReason;
export const ANSWER_FIELD_REASON = new EnumBridge<Exclude<errorsPb.AnswerFieldReason, 0>, AnswerFieldReason>(
  "AnswerFieldReason",
  { [F.MISSING]: "missing", [F.UNEXPECTED]: "unexpected", [F.INVALID]: "invalid" },
);

const L = errorsPb.ListenErrorReason;
export const LISTEN_ERROR_REASON = new EnumBridge<Exclude<errorsPb.ListenErrorReason, 0>, ListenErrorReason>(
  "ListenErrorReason",
  {
    [L.ALREADY_LISTENING]: "already-listening",
    [L.INCOMPATIBLE_DAEMON]: "incompatible-daemon",
    [L.TRANSPORT_FAILED]: "transport-failed",
    [L.DECODE_FAILED]: "decode-failed",
  },
);

const D = errorsPb.DeliveryAcknowledgeErrorReason;
export const ACKNOWLEDGE_ERROR_REASON = new EnumBridge<
  Exclude<errorsPb.DeliveryAcknowledgeErrorReason, 0>,
  DeliveryAcknowledgeErrorReason
>("DeliveryAcknowledgeErrorReason", {
  [D.UNKNOWN_DELIVERY]: "unknown-delivery",
  [D.DELIVERY_CONFLICT]: "delivery-conflict",
  [D.PERSISTENCE_FAILED]: "persistence-failed",
  [D.TRANSPORT_FAILED]: "transport-failed",
});

const C = errorsPb.ConnectErrorReason;
export const CONNECT_ERROR_REASON = new EnumBridge<Exclude<errorsPb.ConnectErrorReason, 0>, ConnectErrorReason>(
  "ConnectErrorReason",
  {
    [C.TRANSPORT_FAILED]: "transport-failed",
    [C.INCOMPATIBLE_DAEMON]: "incompatible-daemon",
    [C.DECODE_FAILED]: "decode-failed",
    [C.AUTHENTICATION_FAILED]: "authentication-failed",
  },
);

const M = errorsPb.MessageTextOperation;
export const MESSAGE_TEXT_OPERATION = new EnumBridge<
  Exclude<errorsPb.MessageTextOperation, 0>,
  MessageTextOperation
>("MessageTextOperation", {
  [M.MESSAGE]: "message",
  [M.GATHER]: "gather",
  [M.ALL_GATHER]: "all_gather",
  [M.ANSWER]: "answer",
});

const A = errorsPb.AuthenticationErrorReason;
export const AUTHENTICATION_ERROR_REASON = new EnumBridge<
  Exclude<errorsPb.AuthenticationErrorReason, 0>,
  AuthenticationErrorReason
>("AuthenticationErrorReason", {
  [A.MISSING]: "missing",
  [A.MALFORMED]: "malformed",
  [A.UNKNOWN]: "unknown",
  [A.REVOKED]: "revoked",
});

const R = guidancePb.FirewallRefusal;
export const FIREWALL_REFUSAL = new EnumBridge<Exclude<guidancePb.FirewallRefusal, 0>, FirewallRefusal>(
  "FirewallRefusal",
  {
    [R.FORBIDDEN_RECIPIENT]: "forbidden-recipient",
    [R.CONTENT_BLOCKED]: "content-blocked",
    [R.RATE_LIMITED]: "rate-limited",
    [R.MIDDLEWARE_UNAVAILABLE]: "middleware-unavailable",
  },
);

const E = guidancePb.Expectation;
export const EXPECTATION = new EnumBridge<Exclude<guidancePb.Expectation, 0>, Expectation>("Expectation", {
  [E.REQUIRED]: "required",
  [E.PERMITTED]: "permitted",
  [E.WAIT]: "wait",
  [E.NONE]: "none",
});

const O = typesPb.CollectiveOp;
export const COLLECTIVE_OP = new EnumBridge<Exclude<typesPb.CollectiveOp, 0>, CollectiveOp>("CollectiveOp", {
  [O.GATHER]: "gather",
  [O.ALL_GATHER]: "all_gather",
});

const FD = typesPb.FailureDelivery;
export const FAILURE_DELIVERY = new EnumBridge<Exclude<typesPb.FailureDelivery, 0>, FailureDelivery>(
  "FailureDelivery",
  { [FD.RESULT]: "result", [FD.INBOUND]: "inbound" },
);

const GM = managementPb.GatewayMode;
export const GATEWAY_MODE = new EnumBridge<Exclude<managementPb.GatewayMode, 0>, GatewayStatus["mode"]>(
  "GatewayMode",
  {
    [GM.EMBEDDED]: "embedded",
    [GM.JOINED]: "joined",
    [GM.CLUSTER]: "cluster",
    [GM.ROUTER]: "router",
    [GM.REGISTRY]: "registry",
  },
);

const RA = managementPb.RouterAttachment;
export const ROUTER_ATTACHMENT = new EnumBridge<
  Exclude<managementPb.RouterAttachment, 0>,
  GatewayStatus["routerState"]
>("RouterAttachment", { [RA.RECOVERING]: "recovering", [RA.ACTIVE]: "active", [RA.DETACHED]: "detached" });

const RS = managementPb.ReplicaState;
export const REPLICA_STATE = new EnumBridge<Exclude<managementPb.ReplicaState, 0>, ClusterStatus["state"]>(
  "ReplicaState",
  {
    [RS.JOINED]: "joined",
    [RS.SERVING]: "serving",
    [RS.WITHDRAWN]: "withdrawn",
    [RS.LOST]: "lost",
    [RS.CLOSED]: "closed",
  },
);

function required<T>(value: T | undefined, where: string): T {
  if (value === undefined) {
    throw new DecodeFailed(`${where} is missing`);
  }
  return value;
}

// --- JSON values -------------------------------------------------------------------

/** A JsonValue as `google.protobuf.Value`; `TypeError` for what JSON cannot hold
 * (a non-finite number, undefined, a function, a bigint). */
export function jsonToValue(value: JsonValue, path = "value"): Value {
  return create(ValueSchema, { kind: jsonKind(value, path) });
}

function jsonKind(value: JsonValue, path: string): NonNullable<MessageInitShape<typeof ValueSchema>["kind"]> {
  if (value === null) {
    return { case: "nullValue", value: 0 };
  }
  switch (typeof value) {
    case "boolean":
      return { case: "boolValue", value };
    case "string":
      return { case: "stringValue", value };
    case "number":
      if (!Number.isFinite(value)) {
        throw new TypeError(`${path}: a JSON number must be finite`);
      }
      return { case: "numberValue", value };
    case "object":
      if (Array.isArray(value)) {
        const items = value as readonly JsonValue[];
        return {
          case: "listValue",
          value: { values: items.map((item, index) => jsonToValue(item, `${path}[${index}]`)) },
        };
      }
      return { case: "structValue", value: { fields: jsonObjectFields(value as JsonObject, path) } };
    default:
      throw new TypeError(`${path}: a ${typeof value} is not a JSON value`);
  }
}

function jsonObjectFields(object: JsonObject, path: string): { [key: string]: Value } {
  const fields: { [key: string]: Value } = {};
  for (const [key, item] of Object.entries(object)) {
    fields[key] = jsonToValue(item, `${path}.${key}`);
  }
  return fields;
}

/** A `google.protobuf.Value` as plain JSON; `DecodeFailed` for a value with no kind. */
export function valueToJson(value: Value): JsonValue {
  const kind = value.kind;
  switch (kind.case) {
    case "nullValue":
      return null;
    case "boolValue":
    case "stringValue":
      return kind.value;
    case "numberValue":
      if (!Number.isFinite(kind.value)) {
        throw new DecodeFailed("a JSON number is not finite");
      }
      return kind.value;
    case "listValue":
      return kind.value.values.map(valueToJson);
    case "structValue": {
      const object: { [key: string]: JsonValue } = {};
      for (const [key, item] of Object.entries(kind.value.fields)) {
        object[key] = valueToJson(item);
      }
      return object;
    }
    case undefined:
      throw new DecodeFailed("a JSON value has no kind");
  }
}

// --- content and answers -----------------------------------------------------------

export function contentToProto(content: Content): MessageInitShape<typeof typesPb.ContentSchema> {
  return {
    parts: content.map((part, index) =>
      part.type === "text"
        ? { part: { case: "text", value: { text: part.text } } }
        : { part: { case: "data", value: { value: jsonToValue(part.value, `content[${index}].value`) } } },
    ),
  };
}

export function contentFromProto(content: typesPb.Content | undefined): Content {
  const parts = required(content, "content").parts;
  return parts.map((part): ContentPart => {
    switch (part.part.case) {
      case "text":
        return { type: "text", text: part.part.value.text };
      case "data":
        return { type: "data", value: valueToJson(required(part.part.value.value, "a data part's value")) };
      case undefined:
        throw new DecodeFailed("a content part has no part");
    }
  });
}

export function answerContentToProto(content: AnswerContent): MessageInitShape<typeof typesPb.AnswerContentSchema> {
  const fields: { [key: string]: MessageInitShape<typeof typesPb.AnswerValueSchema> } = {};
  for (const [key, value] of Object.entries(content)) {
    fields[key] = { value: answerValueToProto(value, key) };
  }
  return { fields };
}

function answerValueToProto(
  value: AnswerValue,
  field: string,
): NonNullable<MessageInitShape<typeof typesPb.AnswerValueSchema>["value"]> {
  switch (typeof value) {
    case "string":
      return { case: "stringValue", value };
    case "boolean":
      return { case: "boolValue", value };
    case "number":
      if (!Number.isFinite(value)) {
        throw new TypeError(`answer field ${field}: a number must be finite`);
      }
      return { case: "numberValue", value };
    default:
      if (Array.isArray(value) && value.every((item) => typeof item === "string")) {
        return { case: "stringListValue", value: { values: [...value] } };
      }
      throw new TypeError(`answer field ${field}: a string, number, boolean or list of strings`);
  }
}

export function answerContentFromProto(content: typesPb.AnswerContent | undefined): AnswerContent {
  const result: { [key: string]: AnswerValue } = {};
  for (const [key, value] of Object.entries(required(content, "answer content").fields)) {
    const kind = value.value;
    switch (kind.case) {
      case "stringValue":
      case "numberValue":
      case "boolValue":
        result[key] = kind.value;
        break;
      case "stringListValue":
        result[key] = [...kind.value.values];
        break;
      case undefined:
        throw new DecodeFailed(`answer field ${key} has no value`);
    }
  }
  return result;
}

// --- send inputs and results --------------------------------------------------------

function collectiveToProto(
  collective: CollectiveOperation,
): MessageInitShape<typeof typesPb.CollectiveOperationSchema> {
  if (!("deadline" in collective)) {
    // `{}` (no op) and `{op: "multicast"}` are different inputs to an idempotency key.
    return collective.op === "multicast" ? { op: { case: "multicast", value: {} } } : {};
  }
  // Checked as JSON here (finite numbers), then handed over: protobuf-es writes a JSON
  // object field as a google.protobuf.Struct itself.
  jsonToValue(collective.requestedSchema, "requestedSchema");
  const ask = {
    deadlineSeconds: collective.deadline,
    requestedSchema: collective.requestedSchema as PbJsonObject,
  };
  return collective.op === "gather"
    ? { op: { case: "gather", value: ask } }
    : { op: { case: "allGather", value: ask } };
}

function responseToProto(response: CollectiveResponse): MessageInitShape<typeof typesPb.CollectiveResponseSchema> {
  return response.action === "accept"
    ? { action: { case: "accept", value: { content: answerContentToProto(response.content) } } }
    : { action: { case: "decline", value: {} } };
}

export function sendInputToProto(input: SendInput): MessageInitShape<typeof typesPb.SendInputSchema> {
  if ("collectiveResponse" in input) {
    return {
      input: {
        case: "answer",
        value: { to: input.to, collectiveResponse: responseToProto(input.collectiveResponse) },
      },
    };
  }
  return {
    input: {
      case: "message",
      value: {
        to: input.to,
        text: input.text,
        ...(input.collective === undefined ? {} : { collective: collectiveToProto(input.collective) }),
      },
    },
  };
}

function collectiveFromProto(collective: typesPb.CollectiveOperation): CollectiveOperation {
  const op = collective.op;
  switch (op.case) {
    case undefined:
      return {};
    case "multicast":
      return { op: "multicast" };
    case "gather":
    case "allGather":
      return {
        op: op.case === "gather" ? "gather" : "all_gather",
        deadline: op.value.deadlineSeconds,
        requestedSchema: required(op.value.requestedSchema, "requestedSchema") as JsonObject,
      };
  }
}

export function sendInputFromProto(input: typesPb.SendInput | undefined): SendInput {
  const shape = required(input, "input").input;
  switch (shape.case) {
    case "message": {
      const { to, text, collective } = shape.value;
      return collective === undefined ? { to, text } : { to, text, collective: collectiveFromProto(collective) };
    }
    case "answer": {
      const action = required(shape.value.collectiveResponse, "collectiveResponse").action;
      switch (action.case) {
        case "accept":
          return {
            to: shape.value.to,
            collectiveResponse: { action: "accept", content: answerContentFromProto(action.value.content) },
          };
        case "decline":
          return { to: shape.value.to, collectiveResponse: { action: "decline" } };
        case undefined:
          throw new DecodeFailed("an answer has no action");
      }
    }
    case undefined:
      throw new DecodeFailed("a send input has no input");
  }
}

export function sendResultFromProto(result: typesPb.SendResult | undefined): SendResult {
  const value = required(result, "result");
  return {
    ...(value.operationId === undefined ? {} : { operationId: value.operationId }),
    ...(value.guidance === undefined ? {} : { guidance: checkedGuidanceFromProto(value.guidance) }),
    postIds: [...value.postIds],
  };
}

// --- guidance ----------------------------------------------------------------------

function instructionFromProto(instruction: guidancePb.Instruction): Instruction {
  const kind = instruction.kind;
  switch (kind.case) {
    case "expectation":
      return {
        middlewareId: kind.value.middlewareId,
        ruleId: kind.value.ruleId,
        expectation: EXPECTATION.fromProto(kind.value.expectation),
        subjects: [...kind.value.subjects],
        instruction: kind.value.instruction,
      };
    case "uncertain": {
      const judgement = required(kind.value.uncertain, "uncertain");
      return {
        middlewareId: kind.value.middlewareId,
        ruleId: kind.value.ruleId,
        uncertain: { choice: judgement.choice, probability: judgement.probability },
        instruction: kind.value.instruction,
      };
    }
    case undefined:
      throw new DecodeFailed("an instruction has no kind");
  }
}

export function checkedGuidanceFromProto(guidance: guidancePb.CheckedGuidance): CheckedGuidance {
  return {
    checkId: guidance.checkId,
    subjects: guidance.subjects.map((subject) => ({
      id: subject.id,
      sender: subject.sender,
      recipients: [...subject.recipients],
      text: subject.text,
    })),
    instructions: guidance.instructions.map(instructionFromProto),
  };
}

export function localGuidanceFromProto(guidance: guidancePb.LocalGuidance): LocalGuidance {
  const kind = guidance.kind;
  switch (kind.case) {
    case "checked":
      return checkedGuidanceFromProto(kind.value);
    case "collective":
      return {
        ...(kind.value.question === undefined ? {} : { question: checkedGuidanceFromProto(kind.value.question) }),
        answers: kind.value.answers.map((answer) => ({
          ...checkedGuidanceFromProto(required(answer.guidance, "an answer's guidance")),
          member: answer.member,
        })),
      };
    case undefined:
      throw new DecodeFailed("a local guidance has no kind");
  }
}

function withheldFromProto(withheld: guidancePb.Withheld): Withheld {
  return { kind: "withheld", checkId: withheld.checkId, reason: FIREWALL_REFUSAL.fromProto(withheld.reason) };
}

// --- inbound items -----------------------------------------------------------------

function messageFromProto(message: typesPb.InboundMessage | undefined): InboundMessage {
  const kind = required(message, "message").kind;
  switch (kind.case) {
    case "direct":
      return {
        kind: "direct",
        postId: kind.value.postId,
        address: kind.value.address,
        sender: kind.value.sender,
        content: contentFromProto(kind.value.content),
      };
    case "group":
      return {
        kind: "group",
        postId: kind.value.postId,
        address: kind.value.address,
        sender: kind.value.sender,
        members: [...kind.value.members],
        content: contentFromProto(kind.value.content),
      };
    case undefined:
      throw new DecodeFailed("a message has no kind");
  }
}

function outcomeFromProto(outcome: typesPb.CollectiveMemberOutcome | undefined): CollectiveMemberOutcome {
  const kind = required(outcome, "outcome").kind;
  switch (kind.case) {
    case "answered":
      return { kind: "answered", content: answerContentFromProto(kind.value.content) };
    case "declined":
      return { kind: "declined" };
    case "invalid":
      return { kind: "invalid", reason: kind.value.reason };
    case "noAnswer":
      return { kind: "no-answer" };
    case "withheld":
      return withheldFromProto(kind.value);
    case undefined:
      throw new DecodeFailed("an outcome has no kind");
  }
}

/** Epoch milliseconds as a number (exact far beyond any deadline). */
function epochMillis(value: bigint): number {
  const millis = Number(value);
  if (!Number.isSafeInteger(millis)) {
    throw new DecodeFailed(`deadlineAt ${value} is out of range`);
  }
  return millis;
}

export function itemFromProto(item: typesPb.InboundItem | undefined): InboundItem {
  const kind = required(item, "item").kind;
  switch (kind.case) {
    case "multicast":
      return { kind: "multicast", message: messageFromProto(kind.value.message) };
    case "collectiveRequest": {
      const request = kind.value;
      return {
        kind: "collectiveRequest",
        op: COLLECTIVE_OP.fromProto(request.op),
        id: request.id,
        postId: request.postId,
        from: request.sender,
        to: request.to,
        question: request.question,
        requestedSchema: required(request.requestedSchema, "requestedSchema") as JsonObject,
        deadlineAt: epochMillis(request.deadlineAt),
      };
    }
    case "collectiveResult": {
      const result = kind.value;
      const question = required(result.question, "question").kind;
      if (result.outcomes.length === 0) {
        throw new DecodeFailed("a collective result has no outcomes");
      }
      return {
        kind: "collectiveResult",
        op: COLLECTIVE_OP.fromProto(result.op),
        id: result.id,
        to: result.to,
        question:
          question.case === "text"
            ? question.value
            : question.case === "withheld"
              ? withheldFromProto(question.value)
              : (() => {
                  throw new DecodeFailed("a question has no kind");
                })(),
        outcomes: result.outcomes.map((entry) => ({
          member: entry.member,
          outcome: outcomeFromProto(entry.outcome),
        })),
      };
    }
    case "operationFailed":
      return { kind: "operationFailed", id: kind.value.id, to: kind.value.to, error: kind.value.error };
    case undefined:
      throw new DecodeFailed("an item has no kind");
  }
}

// --- closed errors -----------------------------------------------------------------

function unreachableFromProto(member: errorsPb.CollectiveError_UnreachableMember): UnreachableMember {
  return {
    member: member.member,
    reason: SEND_ERROR_REASON.fromProto(member.reason),
    ...(member.detail === undefined ? {} : { detail: member.detail }),
  };
}

function answerFieldFromProto(field: errorsPb.CollectiveError_AnswerField): AnswerFieldIssue {
  return {
    field: field.field,
    reason: ANSWER_FIELD_REASON.fromProto(field.reason),
    ...(field.detail === undefined ? {} : { detail: field.detail }),
  };
}

function collectiveFailureFromProto(error: errorsPb.CollectiveError): CollectiveFailure {
  const failure = error.failure;
  switch (failure.case) {
    case "membersUnreachable":
      return { kind: "members-unreachable", members: failure.value.members.map(unreachableFromProto) };
    case "schemaInvalid":
      return { kind: "schema-invalid", detail: failure.value.detail };
    case "answerInvalid":
      return { kind: "answer-invalid", fields: failure.value.fields.map(answerFieldFromProto) };
    case "requestNone":
      return failure.value.ownQuestion ? { kind: "request-none", ownQuestion: true } : { kind: "request-none" };
    case "requestAmbiguous":
      return { kind: "request-ambiguous" };
    case "requestAnswered":
      return { kind: "request-answered" };
    case "requestExpired":
      return { kind: "request-expired" };
    case undefined:
      throw new DecodeFailed("a collective error has no failure");
  }
}

export function sendErrorFromProto(error: errorsPb.SendError, options: ErrorOptions = {}): SendError {
  return new SendError(SEND_ERROR_REASON.fromProto(error.reason), {
    ...options,
    ...(error.detail === undefined ? {} : { detail: error.detail }),
  });
}

export function collectiveErrorFromProto(error: errorsPb.CollectiveError, options: ErrorOptions = {}): CollectiveError {
  return new CollectiveError(error.id, collectiveFailureFromProto(error), options);
}

export function firewallErrorFromProto(error: errorsPb.FirewallSendError, options: ErrorOptions = {}): FirewallSendError {
  return new FirewallSendError(
    {
      checkId: error.checkId,
      refusal: FIREWALL_REFUSAL.fromProto(error.refusal),
      middlewareId: error.middlewareId,
      ruleId: error.ruleId,
      instruction: error.instruction,
      guidance: checkedGuidanceFromProto(required(error.guidance, "guidance")),
    },
    options,
  );
}

export function messageTextErrorFromProto(error: errorsPb.MessageTextError, options: ErrorOptions = {}): MessageTextError {
  return new MessageTextError(MESSAGE_TEXT_OPERATION.fromProto(error.operation), error.detail, options);
}

export function sendFailureFromProto(failure: errorsPb.SendFailure): SendFailure {
  const kind = failure.failure;
  switch (kind.case) {
    case "sendError":
      return sendErrorFromProto(kind.value);
    case "collectiveError":
      return collectiveErrorFromProto(kind.value);
    case "firewallSendError":
      return firewallErrorFromProto(kind.value);
    case undefined:
      throw new DecodeFailed("a send failure has no failure");
  }
}

/** A closed harness detail of a status, as its typed error (`message` is the status's). */
export type ClosedDetail =
  | errorsPb.SendError
  | errorsPb.CollectiveError
  | errorsPb.FirewallSendError
  | errorsPb.ListenError
  | errorsPb.DeliveryAcknowledgeError
  | errorsPb.ConnectError
  | errorsPb.MessageTextError
  | errorsPb.IdempotencyConflict
  | errorsPb.AuthenticationError;

export function errorFromDetail(detail: ClosedDetail, message: string, options: ErrorOptions): HarnessError {
  switch (detail.$typeName) {
    case "harness.v1.SendError":
      return sendErrorFromProto(detail, options);
    case "harness.v1.CollectiveError":
      return collectiveErrorFromProto(detail, options);
    case "harness.v1.FirewallSendError":
      return firewallErrorFromProto(detail, options);
    case "harness.v1.ListenError":
      return new ListenError(LISTEN_ERROR_REASON.fromProto(detail.reason), options);
    case "harness.v1.DeliveryAcknowledgeError":
      return new DeliveryAcknowledgeError(ACKNOWLEDGE_ERROR_REASON.fromProto(detail.reason), options);
    case "harness.v1.ConnectError":
      return new HarnessConnectError(CONNECT_ERROR_REASON.fromProto(detail.reason), {
        ...options,
        ...(detail.address === undefined ? {} : { address: detail.address }),
        ...(detail.detail === undefined ? {} : { detail: detail.detail }),
      });
    case "harness.v1.MessageTextError":
      return messageTextErrorFromProto(detail, options);
    case "harness.v1.IdempotencyConflict":
      return new IdempotencyConflictError(detail.key, options);
    case "harness.v1.AuthenticationError":
      return new AuthenticationError(AUTHENTICATION_ERROR_REASON.fromProto(detail.reason), message, options);
  }
}

/** One token's acknowledgment: undefined when it is retired. */
export function acknowledgeResultFromProto(result: AcknowledgeResult): DeliveryAcknowledgeError | undefined {
  switch (result.result.case) {
    case "ok":
      return undefined;
    case "error":
      return new DeliveryAcknowledgeError(ACKNOWLEDGE_ERROR_REASON.fromProto(result.result.value.reason));
    case undefined:
      throw new DecodeFailed("an acknowledge result has no result");
  }
}

export function sendStateFromProto(response: ReadSendResponse): SendState {
  const state = response.state;
  switch (state.case) {
    case "absent":
      return { state: "absent" };
    case "pending":
      return { state: "pending", input: sendInputFromProto(state.value.input) };
    case "indeterminate":
      return { state: "indeterminate", input: sendInputFromProto(state.value.input) };
    case "returned": {
      const outcome = state.value.outcome;
      const input = sendInputFromProto(state.value.input);
      switch (outcome.case) {
        case "result":
          return { state: "returned", input, outcome: { kind: "success", result: sendResultFromProto(outcome.value) } };
        case "failure":
          return { state: "returned", input, outcome: { kind: "failure", error: sendFailureFromProto(outcome.value) } };
        case undefined:
          throw new DecodeFailed("a returned send has no outcome");
      }
    }
    case undefined:
      throw new DecodeFailed("a send state has no state");
  }
}

// --- management --------------------------------------------------------------------

export function registeredAgentFromProto(agent: managementPb.RegisterAgentResponse): RegisteredAgent {
  return { address: agent.address, agentId: agent.agentId, token: agent.token };
}

export function agentStatusFromProto(status: managementPb.AgentStatus | undefined): AgentStatus {
  const agent = required(status, "agent");
  return {
    name: agent.name,
    address: agent.address,
    agentId: agent.agentId,
    publicKey: agent.publicKey,
    issuedAt: agent.issuedAt,
    hosted: agent.hosted,
    streamAttached: agent.streamAttached,
    backlog: agent.backlog,
    oldestUnackedAgeSeconds: agent.oldestUnackedAgeSeconds,
    setAside: agent.setAside.map((item) => ({ conversationId: item.conversationId, reason: item.reason })),
  };
}

export function gatewayStatusFromProto(status: managementPb.GetGatewayStatusResponse): GatewayStatus {
  const base = {
    version: status.version,
    mode: GATEWAY_MODE.fromProto(status.mode),
    hostedAgents: status.hostedAgents,
    routerState: ROUTER_ATTACHMENT.fromProto(status.routerState),
  };
  return status.cluster === undefined ? base : { ...base, cluster: clusterStatusFromProto(status.cluster) };
}

/** A cluster replica's view of its cluster. */
export function clusterStatusFromProto(status: managementPb.ClusterStatus): ClusterStatus {
  return {
    replicaId: status.replicaId,
    incarnation: status.incarnation,
    state: REPLICA_STATE.fromProto(status.state),
    leaseRemainingSeconds: status.leaseRemainingSeconds,
    claiming: status.claiming,
    partitions: status.partitions,
    ownedPartitions: status.ownedPartitions,
    unownedPartitions: status.unownedPartitions,
    replicas: status.replicas.map((replica) => ({
      replicaId: replica.replicaId,
      incarnation: replica.incarnation,
      address: replica.address,
      serving: replica.serving,
      live: replica.live,
      fenced: replica.fenced,
      beatAgeSeconds: replica.beatAgeSeconds,
      partitions: replica.partitions,
    })),
  };
}
