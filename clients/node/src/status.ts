/**
 * `decodeError`: the one reader of failed calls' `google.rpc.Status` details.
 *
 * The gateway's statuses (endpoint.proto's header) carry, as `google.protobuf.Any`
 * details, at most one closed error of errors.proto, an `ErrorInfo` (domain
 * `harness.v1`, reason UPPER_SNAKE) and, for a call that had no effect, a `RetryInfo`.
 * A closed detail decodes to its typed error; the gateway's other statuses decode by
 * their ErrorInfo reason; anything else is a `TransportError`.
 *
 * `@connectrpc/connect` has already split `grpc-status-details-bin` into
 * `ConnectError.details`; `decodeStatusBytes` reads the raw trailer value, for callers
 * of another gRPC library (`@grpc/grpc-js` metadata).
 */

import { fromBinary } from "@bufbuild/protobuf";
import type { DescMessage } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";

import { ErrorInfoSchema, RetryInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "./gen/google/rpc/status_pb.js";
import * as errorsPb from "./gen/harness/v1/errors_pb.js";
import { DecodeFailed, errorFromDetail } from "./convert.js";
import type { ClosedDetail } from "./convert.js";
import {
  AuthenticationError,
  HarnessError,
  InvalidRequestError,
  ManagementError,
  PermissionDeniedError,
  TransportError,
  UnavailableError,
  grpcCodeName,
} from "./errors.js";
import type {
  AuthenticationErrorReason,
  GrpcCode,
  InvalidRequestReason,
  ManagementErrorReason,
  UnavailableReason,
} from "./errors.js";

/** The trailing metadata key holding the serialized `google.rpc.Status`. */
export const STATUS_DETAILS_KEY = "grpc-status-details-bin";

/** The `ErrorInfo.domain` the gateway sets. */
export const ERROR_DOMAIN = "harness.v1";

/** One detail of a status: the packed message's full name and its bytes. */
export interface StatusDetail {
  readonly type: string;
  readonly value: Uint8Array;
}

/** The closed details, by full message name. */
const CLOSED_DETAILS: ReadonlyMap<string, DescMessage> = new Map(
  [
    errorsPb.SendErrorSchema,
    errorsPb.CollectiveErrorSchema,
    errorsPb.FirewallSendErrorSchema,
    errorsPb.ListenErrorSchema,
    errorsPb.DeliveryAcknowledgeErrorSchema,
    errorsPb.ConnectErrorSchema,
    errorsPb.MessageTextErrorSchema,
    errorsPb.IdempotencyConflictSchema,
    errorsPb.AuthenticationErrorSchema,
  ].map((schema): [string, DescMessage] => [schema.typeName, schema]),
);

const AUTH_REASONS: ReadonlyMap<string, AuthenticationErrorReason> = new Map([
  ["MISSING", "missing"],
  ["MALFORMED", "malformed"],
  ["UNKNOWN", "unknown"],
  ["REVOKED", "revoked"],
]);
/** The ErrorInfo reasons of UNAVAILABLE the gateway gives, each an `UnavailableError`
 * (exported for the contract test that keeps it equal to the contract's list). */
export const UNAVAILABLE_REASONS: ReadonlyMap<string, UnavailableReason> = new Map([
  ["NOT_READY", "not-ready"],
  ["SHUTTING_DOWN", "shutting-down"],
  ["NOT_OWNER", "not-owner"],
  ["HOME_UNREACHABLE", "home-unreachable"],
]);
const MANAGEMENT_REASONS: ReadonlyMap<string, ManagementErrorReason> = new Map([
  ["NOT_FOUND", "not-found"],
  ["NAME_TAKEN", "name-taken"],
  ["INVALID_NAME", "invalid-name"],
  ["INVALID_ADDRESS", "invalid-address"],
]);
const INVALID_REQUEST_REASONS: ReadonlyMap<string, InvalidRequestReason> = new Map([
  ["INVALID_REQUEST", "invalid-request"],
  ["MALFORMED_REQUEST", "malformed-request"],
  ["INVALID_IDEMPOTENCY_KEY", "invalid-idempotency-key"],
]);

/** What a non-OK status carried, read from its details. */
export interface RichStatus {
  readonly code: GrpcCode;
  readonly message: string;
  /** The `ErrorInfo` reason (UPPER_SNAKE) of domain `harness.v1`. */
  readonly reason: string | undefined;
  readonly detail: ClosedDetail | undefined;
  readonly retryDelayMs: number | undefined;
}

/** Read a status's details; one that does not decode is skipped, the rest is kept. */
export function readStatus(code: GrpcCode, message: string, details: readonly StatusDetail[]): RichStatus {
  let reason: string | undefined;
  let detail: ClosedDetail | undefined;
  let retryDelayMs: number | undefined;
  for (const { type, value } of details) {
    try {
      const closed = CLOSED_DETAILS.get(type);
      if (closed !== undefined) {
        detail = fromBinary(closed, value) as ClosedDetail;
      } else if (type === ErrorInfoSchema.typeName) {
        const info = fromBinary(ErrorInfoSchema, value);
        if (info.domain === ERROR_DOMAIN) {
          reason = info.reason;
        }
      } else if (type === RetryInfoSchema.typeName) {
        const delay = fromBinary(RetryInfoSchema, value).retryDelay;
        if (delay !== undefined) {
          retryDelayMs = Number(delay.seconds) * 1000 + Math.round(delay.nanos / 1e6);
        }
      }
    } catch {
      // A detail this client cannot read says nothing it could act on.
    }
  }
  return { code, message, reason, detail, retryDelayMs };
}

/** The typed error a status stands for. */
export function errorFromStatus(status: RichStatus, cause?: unknown): HarnessError {
  const options = { code: status.code, cause };
  if (status.detail !== undefined) {
    try {
      return errorFromDetail(status.detail, status.message, options);
    } catch (error) {
      if (!(error instanceof DecodeFailed)) {
        throw error;
      }
      // An enum value from a newer gateway: nothing typed can be said about it.
      return new TransportError(status.code, status.message, { cause });
    }
  }
  const reason = status.reason ?? "";
  const auth = AUTH_REASONS.get(reason);
  if (auth !== undefined && status.code === "UNAUTHENTICATED") {
    return new AuthenticationError(auth, status.message, options);
  }
  if (reason === "WRONG_ROLE") {
    return new PermissionDeniedError(status.message, options);
  }
  const unavailable = UNAVAILABLE_REASONS.get(reason);
  if (unavailable !== undefined) {
    return new UnavailableError(unavailable, status.message, {
      ...options,
      ...(status.retryDelayMs === undefined ? {} : { retryDelayMs: status.retryDelayMs }),
    });
  }
  const management = MANAGEMENT_REASONS.get(reason);
  if (management !== undefined) {
    return new ManagementError(management, status.message, options);
  }
  const invalid = INVALID_REQUEST_REASONS.get(reason);
  if (invalid !== undefined) {
    return new InvalidRequestError(invalid, status.message, options);
  }
  return new TransportError(status.code, status.message, { cause });
}

/**
 * The typed error a failed call stands for: a `HarnessError` as it is, a `ConnectError`
 * by its status details, anything else (an abort, a defect) as a `TransportError`.
 */
export function decodeError(error: unknown): HarnessError {
  if (error instanceof HarnessError) {
    return error;
  }
  const connectError = ConnectError.from(error);
  const details = connectError.details.map(
    (detail): StatusDetail =>
      "type" in detail
        ? { type: detail.type, value: detail.value }
        : // An outgoing detail (built locally, never received): its type name is enough.
          { type: detail.desc.typeName, value: new Uint8Array() },
  );
  return errorFromStatus(
    readStatus(grpcCodeName(connectError.code), connectError.rawMessage, details),
    error,
  );
}

/**
 * The typed error a serialized `google.rpc.Status` (the `grpc-status-details-bin`
 * trailer's bytes) stands for; a `TransportError` INTERNAL when the bytes are not a Status.
 */
export function decodeStatusBytes(bytes: Uint8Array): HarnessError {
  let status;
  try {
    status = fromBinary(StatusSchema, bytes);
  } catch (cause) {
    return new TransportError("INTERNAL", "the status details do not decode", { cause });
  }
  const details = status.details.map((any) => ({
    type: any.typeUrl.slice(any.typeUrl.lastIndexOf("/") + 1),
    value: any.value,
  }));
  return errorFromStatus(readStatus(grpcCodeName(status.code), status.message, details));
}

/** True when `error` is `@connectrpc/connect`'s abort of a call this client cancelled. */
export function isCancelled(error: unknown): boolean {
  return error instanceof ConnectError && error.code === Code.Canceled;
}
