/**
 * The client's typed errors: one class per contract error, all under `HarnessError`.
 *
 *     HarnessError                  code (the gRPC code name), reason (closed, kebab-case)
 *     ├── SendError                 send failed: <detail, else the reason's text>
 *     ├── CollectiveError           members-unreachable, schema-invalid, answer-invalid, request-*
 *     ├── FirewallSendError         send refused by the local firewall (<refusal>): <instruction>
 *     ├── IdempotencyConflictError  the key already binds a different send (gateway extension)
 *     ├── MessageTextError          <operation> not sent: <detail>
 *     ├── ListenError               listen failed: <reason>
 *     ├── DeliveryAcknowledgeError  delivery acknowledgment failed: <reason>
 *     ├── HarnessConnectError       connect failed: <reason> (the contract's ConnectError)
 *     ├── AuthenticationError       a missing, malformed, unknown or revoked token
 *     ├── PermissionDeniedError     a token of the wrong role
 *     ├── UnavailableError          the gateway is not ready or is shutting down (no effect)
 *     ├── ManagementError           not-found, name-taken, invalid-name, invalid-address
 *     ├── InvalidRequestError       the gateway could not read the request
 *     ├── EndpointClosedError       the endpoint or client was closed
 *     └── TransportError            the call failed below the API (no typed status)
 *
 * Names, reasons and messages mirror the Python client (`harness_client`) and the
 * contract's vocabulary (`harness_contract.errors`): `message` is exactly the gateway's
 * model-facing text. The contract's `ConnectError` is `HarnessConnectError` here, so it
 * never shadows `@connectrpc/connect`'s `ConnectError`.
 */

import type { CheckedGuidance, FirewallRefusal } from "./guidance.js";
import type { JsonValue } from "./json.js";

/** The gRPC status code names, indexed by code number. */
export const GRPC_CODES = [
  "OK",
  "CANCELLED",
  "UNKNOWN",
  "INVALID_ARGUMENT",
  "DEADLINE_EXCEEDED",
  "NOT_FOUND",
  "ALREADY_EXISTS",
  "PERMISSION_DENIED",
  "RESOURCE_EXHAUSTED",
  "FAILED_PRECONDITION",
  "ABORTED",
  "OUT_OF_RANGE",
  "UNIMPLEMENTED",
  "INTERNAL",
  "UNAVAILABLE",
  "DATA_LOSS",
  "UNAUTHENTICATED",
] as const;

/** A gRPC status code name (`NOT_FOUND`, `UNAVAILABLE`, ...). */
export type GrpcCode = (typeof GRPC_CODES)[number];

/** The name of a gRPC status code number; `UNKNOWN` for a number outside the table. */
export function grpcCodeName(code: number): GrpcCode {
  return GRPC_CODES[code] ?? "UNKNOWN";
}

/** What every error constructor takes besides its fields. */
export interface ErrorOptions {
  /** The status code the error arrived with; each error has its contract default. */
  readonly code?: GrpcCode;
  /** What caused it (a `ConnectError` from `@connectrpc/connect`, another error). */
  readonly cause?: unknown;
}

/** Root of every error the client raises: a closed `reason`, a gRPC `code`, a `message`. */
export abstract class HarnessError extends Error {
  /** The gRPC status code name the failure travelled (or would travel) under. */
  readonly code: GrpcCode;

  protected constructor(message: string, code: GrpcCode, options: ErrorOptions) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = options.code ?? code;
  }

  /** The closed reason, kebab-case. */
  abstract get reason(): string;

  /** The typed fields beyond `reason`, in the contract's camelCase. */
  fields(): { readonly [key: string]: JsonValue } {
    return {};
  }

  /** `{type, reason, code, message, ...fields}`: every field of the typed error. */
  toJSON(): { readonly [key: string]: JsonValue } {
    return {
      type: this.name,
      reason: this.reason,
      code: this.code,
      message: this.message,
      ...this.fields(),
    };
  }
}

// --- SendError -------------------------------------------------------------------

/** The closed `SendError` reasons: the contract's eleven and the gateway's `too-many-operations`. */
export type SendErrorReason =
  | "invalid-address"
  | "unknown-agent"
  | "membership-invalid"
  | "content-invalid"
  | "not-registered"
  | "version-mismatch"
  | "certification-unavailable"
  | "persistence-failed"
  | "network-unavailable"
  | "delivery-pending"
  | "outcome-unknown"
  | "too-many-operations";

interface SendReasonEntry {
  /** The status code it travels under (operations.md §3). */
  readonly code: GrpcCode;
  /** The text after `send failed: ` when there is no detail (engine.md §6). */
  readonly text: string;
  /** The short text inside a members-unreachable failure (collectives.md §3.3). */
  readonly clause: string;
}

/** Every `SendError` reason's code, text and clause. */
export const SEND_ERROR_REASONS: { readonly [R in SendErrorReason]: SendReasonEntry } = {
  "invalid-address": {
    code: "INVALID_ARGUMENT",
    text: "the address must be agent:<name> or group:<name>,<name>,...",
    clause: "the address is not a valid agent: or group: address",
  },
  "unknown-agent": {
    code: "NOT_FOUND",
    text: "the address names an agent the gateway does not know",
    clause: "an agent the address names is not a known agent",
  },
  "membership-invalid": {
    code: "INVALID_ARGUMENT",
    text: "the address must name one other agent, or a group of 3 to 32 different agents including you",
    clause: "the address does not name a valid set of agents",
  },
  "content-invalid": {
    code: "INVALID_ARGUMENT",
    text: "the message is not valid content or is larger than 32,768 bytes",
    clause: "the message content is invalid",
  },
  "not-registered": {
    code: "FAILED_PRECONDITION",
    text: "this agent is not registered with the gateway yet",
    clause: "this agent is not registered with the gateway",
  },
  "version-mismatch": {
    code: "FAILED_PRECONDITION",
    text: "the gateway and the network run incompatible versions; nothing was sent",
    clause: "the gateway is unavailable (version mismatch)",
  },
  "certification-unavailable": {
    code: "UNAVAILABLE",
    text: "the gateway could not get the message certified; nothing was sent",
    clause: "the gateway is unavailable (certification unavailable)",
  },
  "persistence-failed": {
    code: "UNAVAILABLE",
    text: "the gateway could not store the message; nothing was sent",
    clause: "the gateway is unavailable (the message could not be stored)",
  },
  "network-unavailable": {
    code: "UNAVAILABLE",
    text: "the gateway cannot reach the network right now; nothing was sent",
    clause: "the gateway is unavailable (network unavailable)",
  },
  "delivery-pending": {
    code: "DEADLINE_EXCEEDED",
    text: "the message is saved and will be delivered as soon as the network allows; do not send it again",
    clause:
      "the gateway is unavailable; the message is queued and will be delivered once the gateway is reachable",
  },
  "outcome-unknown": {
    code: "UNKNOWN",
    text: "the gateway lost track of this send; the message may or may not have been sent",
    clause: "the connection was lost; the message may or may not have been sent",
  },
  "too-many-operations": {
    code: "RESOURCE_EXHAUSTED",
    text: "this agent has too many gather and all_gather operations open; nothing was sent; wait for a result before asking again",
    clause: "this agent has too many operations open",
  },
};

/** A send failed with one of the closed reasons, with an optional detail. */
export class SendError extends HarnessError {
  readonly reason: SendErrorReason;
  /** Text that replaces the reason's text in the message. */
  readonly detail: string | undefined;

  constructor(reason: SendErrorReason, options: ErrorOptions & { readonly detail?: string } = {}) {
    const detail = options.detail === "" ? undefined : options.detail;
    super(
      `send failed: ${detail ?? SEND_ERROR_REASONS[reason].text}`,
      SEND_ERROR_REASONS[reason].code,
      options,
    );
    this.reason = reason;
    this.detail = detail;
  }

  override fields(): { readonly [key: string]: JsonValue } {
    return this.detail === undefined ? {} : { detail: this.detail };
  }
}

/** Largest Content of one post, in RFC 8785 bytes (the contract's 32,768). */
export const CONTENT_MAX_BYTES = 32_768;

/**
 * Most bytes of one request the gateway takes by default (its `max_receive_bytes`, 1 MiB):
 * far above any valid request, so `send` refuses a larger one before sending it, as
 * `content-invalid` (`harness_contract.content.REQUEST_MAX_BYTES`).
 */
export const REQUEST_MAX_BYTES = 1 << 20;

/** The `content-invalid` detail of a request too large for the gateway to read, worded as
 * the Python client words it (`harness_contract.content.oversized_detail`). */
export function oversizedDetail(size: number): string {
  const bytes = (n: number): string => n.toLocaleString("en-US");
  return `the message is ${bytes(size)} bytes, more than the gateway reads in one call; the limit is ${bytes(CONTENT_MAX_BYTES)} bytes as canonical JSON`;
}

// --- CollectiveError -------------------------------------------------------------

/** The closed kinds of a `CollectiveError`. */
export type CollectiveErrorKind =
  | "members-unreachable"
  | "schema-invalid"
  | "answer-invalid"
  | "request-none"
  | "request-ambiguous"
  | "request-answered"
  | "request-expired";

/** One member of a members-unreachable failure. */
export interface UnreachableMember {
  readonly member: string;
  readonly reason: SendErrorReason;
  readonly detail?: string;
}

/** Why one field of an answer does not fit the form. */
export type AnswerFieldReason = "missing" | "unexpected" | "invalid";

/** One field clause of an answer-invalid failure. */
export interface AnswerFieldIssue {
  readonly field: string;
  readonly reason: AnswerFieldReason;
  /** For `invalid`: the failed keyword checks, joined by `, `. */
  readonly detail?: string;
}

/** A `CollectiveError`'s failure: its kind and the kind's payload. */
export type CollectiveFailure =
  | { readonly kind: "members-unreachable"; readonly members: readonly UnreachableMember[] }
  | { readonly kind: "schema-invalid"; readonly detail: string }
  | { readonly kind: "answer-invalid"; readonly fields: readonly AnswerFieldIssue[] }
  /** `ownQuestion`: the question open there is the answerer's own; its members answer it. */
  | { readonly kind: "request-none"; readonly ownQuestion?: true }
  | { readonly kind: "request-ambiguous" }
  | { readonly kind: "request-answered" }
  | { readonly kind: "request-expired" };

/** `<member> is not a known agent`, or `<member> could not be reached: <text>`. */
export function unreachableClause(member: UnreachableMember): string {
  if (member.reason === "unknown-agent") {
    return `${member.member} is not a known agent`;
  }
  return `${member.member} could not be reached: ${member.detail || SEND_ERROR_REASONS[member.reason].clause}`;
}

/** One answer field's clause text, as every party writes it. */
export function answerFieldClause(issue: AnswerFieldIssue): string {
  switch (issue.reason) {
    case "missing":
      return `field "${issue.field}" is missing`;
    case "unexpected":
      return `field "${issue.field}" is not in the form`;
    case "invalid":
      return `field "${issue.field}" is invalid (${issue.detail ?? ""})`;
  }
}

/** The model-facing message of a collective failure (collectives.md §3.2). */
export function collectiveFailureMessage(failure: CollectiveFailure): string {
  switch (failure.kind) {
    case "members-unreachable":
      return `send failed: ${failure.members.map(unreachableClause).join("; ")}`;
    case "schema-invalid":
      return `send failed: the form is invalid (${failure.detail})`;
    case "answer-invalid":
      return `reply failed: ${failure.fields.map(answerFieldClause).join("; ")}`;
    case "request-none":
      return failure.ownQuestion === true
        ? "reply failed: the question open in this conversation is your own; its members answer it, and their answers come to you as its result"
        : "reply failed: no question is open in this conversation";
    case "request-ambiguous":
      return "reply failed: more than one question is open in this conversation; answering one of several is not supported";
    case "request-answered":
      return "reply failed: the question was already answered";
    case "request-expired":
      return "reply failed: the question's deadline has passed";
  }
}

function collectiveCode(kind: CollectiveErrorKind): GrpcCode {
  return kind === "schema-invalid" || kind === "answer-invalid" ? "INVALID_ARGUMENT" : "FAILED_PRECONDITION";
}

/** A gather, all_gather or answer was refused; `id` names the operation. */
export class CollectiveError extends HarnessError {
  /** The `CollectiveId` (see errors.proto for which id each kind names). */
  readonly id: string;
  readonly failure: CollectiveFailure;

  constructor(id: string, failure: CollectiveFailure, options: ErrorOptions = {}) {
    super(collectiveFailureMessage(failure), collectiveCode(failure.kind), options);
    this.id = id;
    this.failure = failure;
  }

  /** The closed kind of `failure`. */
  get kind(): CollectiveErrorKind {
    return this.failure.kind;
  }

  get reason(): CollectiveErrorKind {
    return this.failure.kind;
  }

  override fields(): { readonly [key: string]: JsonValue } {
    const { kind: _kind, ...payload } = this.failure;
    return { id: this.id, ...(payload as { readonly [key: string]: JsonValue }) };
  }
}

// --- FirewallSendError -----------------------------------------------------------

/** The fields of a `FirewallSendError`. */
export interface FirewallRefusalFields {
  readonly checkId: string;
  readonly refusal: FirewallRefusal;
  readonly middlewareId: string;
  readonly ruleId: string;
  readonly instruction: string;
  readonly guidance: CheckedGuidance;
}

/** The local firewall refused the send; nothing was bound and no post exists. */
export class FirewallSendError extends HarnessError {
  readonly checkId: string;
  readonly refusal: FirewallRefusal;
  readonly middlewareId: string;
  readonly ruleId: string;
  readonly instruction: string;
  readonly guidance: CheckedGuidance;

  constructor(fields: FirewallRefusalFields, options: ErrorOptions = {}) {
    super(
      `send refused by the local firewall (${fields.refusal}): ${fields.instruction}`,
      "PERMISSION_DENIED",
      options,
    );
    this.checkId = fields.checkId;
    this.refusal = fields.refusal;
    this.middlewareId = fields.middlewareId;
    this.ruleId = fields.ruleId;
    this.instruction = fields.instruction;
    this.guidance = fields.guidance;
  }

  get reason(): FirewallRefusal {
    return this.refusal;
  }

  override fields(): { readonly [key: string]: JsonValue } {
    return {
      checkId: this.checkId,
      middlewareId: this.middlewareId,
      ruleId: this.ruleId,
      instruction: this.instruction,
      guidance: this.guidance as unknown as JsonValue,
    };
  }
}

/** The closed failures of a send (and of a kept keyed outcome). */
export type SendFailure = SendError | CollectiveError | FirewallSendError;

// --- the other closed errors -----------------------------------------------------

/** The idempotency key already binds a different send; nothing ran. */
export class IdempotencyConflictError extends HarnessError {
  readonly key: string;

  constructor(key: string, options: ErrorOptions = {}) {
    super("send failed: this send repeats an earlier send with different content", "ALREADY_EXISTS", options);
    this.key = key;
  }

  get reason(): "idempotency-conflict" {
    return "idempotency-conflict";
  }

  override fields(): { readonly [key: string]: JsonValue } {
    return { key: this.key };
  }
}

/** The operation a refused message text stated. */
export type MessageTextOperation = "message" | "gather" | "all_gather" | "answer";

/** A message text stated an operation but does not fit its shape; nothing was sent. */
export class MessageTextError extends HarnessError {
  readonly operation: MessageTextOperation;
  /** Every issue joined by `; `, each `<path>: <problem>`. */
  readonly detail: string;

  constructor(operation: MessageTextOperation, detail: string, options: ErrorOptions = {}) {
    super(`${operation} not sent: ${detail}`, "INVALID_ARGUMENT", options);
    this.operation = operation;
    this.detail = detail;
  }

  get reason(): "message-text-invalid" {
    return "message-text-invalid";
  }

  override fields(): { readonly [key: string]: JsonValue } {
    return { operation: this.operation, detail: this.detail };
  }
}

/** Why a `messages()` iterator failed. */
export type ListenErrorReason = "already-listening" | "incompatible-daemon" | "transport-failed" | "decode-failed";

/** The delivery stream failed. */
export class ListenError extends HarnessError {
  readonly reason: ListenErrorReason;

  constructor(reason: ListenErrorReason, options: ErrorOptions = {}) {
    super(
      `listen failed: ${reason}`,
      reason === "already-listening" || reason === "incompatible-daemon" ? "FAILED_PRECONDITION" : "UNAVAILABLE",
      options,
    );
    this.reason = reason;
  }
}

/** Why one delivery was not acknowledged. */
export type DeliveryAcknowledgeErrorReason =
  | "unknown-delivery"
  | "delivery-conflict"
  | "persistence-failed"
  | "transport-failed";

/** One delivery could not be acknowledged. */
export class DeliveryAcknowledgeError extends HarnessError {
  readonly reason: DeliveryAcknowledgeErrorReason;

  constructor(reason: DeliveryAcknowledgeErrorReason, options: ErrorOptions = {}) {
    super(
      `delivery acknowledgment failed: ${reason}`,
      reason === "transport-failed" ? "UNAVAILABLE" : "FAILED_PRECONDITION",
      options,
    );
    this.reason = reason;
  }
}

/** Why `connect` failed; `authentication-failed` is a client extension (a refused token). */
export type ConnectErrorReason = "transport-failed" | "incompatible-daemon" | "decode-failed" | "authentication-failed";

/** Where `connect` failed and what went wrong there. */
export interface ConnectErrorFields {
  /** The `HOST:PORT` dialled. */
  readonly address?: string;
  /** What went wrong, as the message words it after `connect failed: `. */
  readonly detail?: string;
}

/**
 * The contract's `ConnectError`: `connect` could not acquire an endpoint. The message is
 * `connect failed: <detail>` (`connect failed: <reason>` without one), worded as the Python
 * client and the `harness` CLI word it (`harness_contract.errors`, `*_detail`).
 */
export class HarnessConnectError extends HarnessError {
  readonly reason: ConnectErrorReason;
  readonly address: string | undefined;
  readonly detail: string | undefined;

  constructor(reason: ConnectErrorReason, options: ErrorOptions & ConnectErrorFields = {}) {
    super(`connect failed: ${options.detail || reason}`, "UNAVAILABLE", options);
    this.reason = reason;
    this.address = options.address;
    this.detail = options.detail;
  }

  override fields(): { readonly [key: string]: JsonValue } {
    return {
      ...(this.address === undefined ? {} : { address: this.address }),
      ...(this.detail === undefined ? {} : { detail: this.detail }),
    };
  }
}

const TOKEN_REFUSALS: { readonly [R in AuthenticationErrorReason]: string } = {
  missing: "the gateway at {address} received no {role}",
  malformed: "the gateway at {address} cannot read this {role}",
  unknown: "the gateway at {address} does not know this {role}",
  revoked: "the gateway at {address} refused this {role}: it was revoked",
};

/**
 * An `authentication-failed` detail: `the gateway at HOST:PORT does not know this agent
 * token`. `refusal` undefined is a token of the other role (PERMISSION_DENIED `wrong-role`).
 */
export function tokenRefusedDetail(
  address: string,
  refusal: AuthenticationErrorReason | undefined,
  role: "agent token" | "admin token" = "agent token",
): string {
  if (refusal === undefined) {
    const other = role === "agent token" ? "the admin token" : "an agent's token";
    return `the gateway at ${address} refused this ${role}: it is ${other}`;
  }
  return TOKEN_REFUSALS[refusal].replace("{address}", address).replace("{role}", role);
}

/** A `transport-failed` detail: `cannot reach HOST:PORT: connection refused`. */
export function unreachableDetail(address: string, cause: string): string {
  return `cannot reach ${address}: ${cause}`;
}

/** A `transport-failed` detail when the address answers but never serves harness.v1. */
export function notReadyDetail(address: string, seconds: number): string {
  return `the gateway at ${address} did not become ready within ${seconds}s`;
}

/** An `incompatible-daemon` detail. */
export function incompatibleDetail(address: string): string {
  return `${address} does not serve this version of the harness.v1 API`;
}

// --- gateway statuses outside the contract ----------------------------------------

/** Why a token was refused. */
export type AuthenticationErrorReason = "missing" | "malformed" | "unknown" | "revoked";

/** The token was refused (UNAUTHENTICATED); `message` is the gateway's text. */
export class AuthenticationError extends HarnessError {
  readonly reason: AuthenticationErrorReason;

  constructor(reason: AuthenticationErrorReason, message: string, options: ErrorOptions = {}) {
    super(message, "UNAUTHENTICATED", options);
    this.reason = reason;
  }
}

/** A token of the wrong role (`wrong-role`): the admin token on the agent API, or an
 * agent token on the management API. */
export class PermissionDeniedError extends HarnessError {
  readonly reason: "wrong-role" = "wrong-role";

  constructor(message: string, options: ErrorOptions = {}) {
    super(message, "PERMISSION_DENIED", options);
  }
}

/** Why the gateway took no action: `not-ready` (starting or recovering), `shutting-down`,
 * and in a cluster `not-owner` (the replica no longer holds the agent's home) or
 * `home-unreachable` (a replica could not reach the agent's home; nothing was sent). */
export type UnavailableReason = "not-ready" | "shutting-down" | "not-owner" | "home-unreachable";

/** The gateway took no action (`UnavailableReason`); retry, later or elsewhere. */
export class UnavailableError extends HarnessError {
  readonly reason: UnavailableReason;
  /** The gateway's `RetryInfo` delay, when it sent one. */
  readonly retryDelayMs: number | undefined;

  constructor(
    reason: UnavailableReason,
    message: string,
    options: ErrorOptions & { readonly retryDelayMs?: number } = {},
  ) {
    super(message, "UNAVAILABLE", options);
    this.reason = reason;
    this.retryDelayMs = options.retryDelayMs;
  }
}

/** Why a management call failed. */
export type ManagementErrorReason = "not-found" | "name-taken" | "invalid-name" | "invalid-address";

/** A management call failed; `message` is the gateway's text. */
export class ManagementError extends HarnessError {
  readonly reason: ManagementErrorReason;

  constructor(reason: ManagementErrorReason, message: string, options: ErrorOptions = {}) {
    super(
      message,
      reason === "not-found" ? "NOT_FOUND" : reason === "name-taken" ? "ALREADY_EXISTS" : "INVALID_ARGUMENT",
      options,
    );
    this.reason = reason;
  }
}

/** Why the gateway could not read a request: a client defect; nothing ran. */
export type InvalidRequestReason = "invalid-request" | "malformed-request" | "invalid-idempotency-key";

/** The gateway could not read the request (INVALID_ARGUMENT); sending it again fails again. */
export class InvalidRequestError extends HarnessError {
  readonly reason: InvalidRequestReason;

  constructor(reason: InvalidRequestReason, message: string, options: ErrorOptions = {}) {
    super(message, "INVALID_ARGUMENT", options);
    this.reason = reason;
  }
}

/** The endpoint or management client was closed (`closed`); open a new one. */
export class EndpointClosedError extends HarnessError {
  readonly reason: "closed" = "closed";

  constructor(options: ErrorOptions = {}) {
    super("the endpoint is closed", "CANCELLED", options);
  }
}

/** The call failed below the API: `reason` is the gRPC code in kebab-case (`unavailable`,
 * `deadline-exceeded`, ...), `message` the transport's own text. Whether the call had an
 * effect is unknown unless the code says. */
export class TransportError extends HarnessError {
  constructor(code: GrpcCode, message: string, options: Omit<ErrorOptions, "code"> = {}) {
    super(message, code, options);
  }

  get reason(): string {
    return this.code.toLowerCase().replaceAll("_", "-");
  }
}

// --- connect failures ------------------------------------------------------------

/**
 * The cause in a transport's text of a failed connection, in the words the Python client
 * uses (`harness_client._channel.ReachCause`): `connection refused`, `the host name does not
 * resolve`, a failed TLS handshake, or `the connection failed: <text>`.
 */
export function reachCause(text: string): string {
  const lowered = text.toLowerCase();
  if (lowered.includes("econnrefused") || lowered.includes("connection refused")) {
    return "connection refused";
  }
  if (["enotfound", "eai_again", "getaddrinfo", "resolv", "dns"].some((word) => lowered.includes(word))) {
    return "the host name does not resolve";
  }
  if (["handshake", "ssl", "tls", "certificate", "eproto"].some((word) => lowered.includes(word))) {
    return "the TLS handshake failed (does the gateway serve TLS, and are its roots trusted?)";
  }
  return `the connection failed: ${text.replace(/^\[[a-z_]+\]\s*/, "")}`;
}

/**
 * The `HarnessConnectError` a failed first call stands for, naming `address`: a refused
 * token is `authentication-failed`, no such service `incompatible-daemon`, a gateway that
 * never served in time or could not be reached `transport-failed`. The failure is the cause.
 */
export function connectFailure(
  failure: HarnessError,
  address: string,
  timeoutMs: number,
  role: "agent token" | "admin token" = "agent token",
): HarnessConnectError {
  const options = { cause: failure, address };
  if (failure instanceof AuthenticationError) {
    return new HarnessConnectError("authentication-failed", { ...options, detail: tokenRefusedDetail(address, failure.reason, role) });
  }
  if (failure instanceof PermissionDeniedError) {
    return new HarnessConnectError("authentication-failed", { ...options, detail: tokenRefusedDetail(address, undefined, role) });
  }
  if (failure instanceof TransportError && failure.code === "UNIMPLEMENTED") {
    return new HarnessConnectError("incompatible-daemon", { ...options, detail: incompatibleDetail(address) });
  }
  if (failure instanceof UnavailableError) {
    return new HarnessConnectError("transport-failed", { ...options, detail: notReadyDetail(address, timeoutMs / 1000) });
  }
  if (failure instanceof TransportError && failure.code === "DEADLINE_EXCEEDED") {
    return new HarnessConnectError("transport-failed", {
      ...options,
      detail: unreachableDetail(address, `no answer within ${timeoutMs / 1000}s`),
    });
  }
  return new HarnessConnectError("transport-failed", { ...options, detail: unreachableDetail(address, reachCause(failure.message)) });
}
