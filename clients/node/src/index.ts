/**
 * `@harness-gateway/client`: a typed client of the Harness Gateway agent API
 * (`harness.v1`) over gRPC, for Node.js.
 *
 *     import { connect } from "@harness-gateway/client";
 *
 *     const endpoint = await connect("127.0.0.1:7770", { token: process.env.HARNESS_TOKEN! });
 *     await endpoint.send({ to: "agent:bob", text: "hello" });
 *     for await (const delivery of endpoint.messages()) {
 *       console.log(delivery.item);
 *       await delivery.acknowledge();
 *     }
 *
 * Values are plain readonly objects (closed unions discriminated by `kind`, `op` or
 * `action`); failures are `HarnessError`s with a closed `reason` and the gateway's
 * model-facing `message`. `decodeError` reads any failed call's status details.
 */

export { connect, Endpoint } from "./endpoint.js";
export type { ConnectOptions, EndpointState, MessagesOptions, SendOptions } from "./endpoint.js";
export type { ConnectionState, ConnectionStateListener } from "./connection.js";
export { ACKNOWLEDGE_MAX_TOKENS, ACKNOWLEDGE_TIMEOUT_MS, READ_TIMEOUT_MS, SEND_TIMEOUT_MS } from "./endpoint.js";
export { ManagementClient, connectManagement, MANAGEMENT_TIMEOUT_MS } from "./management.js";
export type { ConversationRecord, HistoryPage, ManagementOptions } from "./management.js";
export { DEFAULT_CONNECT_TIMEOUT_MS, parseAddress } from "./transport.js";
export type { ChannelOptions, TlsOptions } from "./transport.js";
export { ACK_BATCH_DELAY_MS, ACK_BATCH_MAX } from "./acks.js";
export { STREAM_OPEN_HEADER } from "./stream.js";
export { decodeError, decodeStatusBytes, STATUS_DETAILS_KEY, ERROR_DOMAIN } from "./status.js";
export {
  AuthenticationError,
  CollectiveError,
  DeliveryAcknowledgeError,
  EndpointClosedError,
  FirewallSendError,
  GRPC_CODES,
  HarnessConnectError,
  HarnessError,
  IdempotencyConflictError,
  InvalidRequestError,
  ListenError,
  ManagementError,
  MessageTextError,
  PermissionDeniedError,
  SEND_ERROR_REASONS,
  SendError,
  TransportError,
  UnavailableError,
  answerFieldClause,
  collectiveFailureMessage,
  unreachableClause,
} from "./errors.js";
export type {
  AnswerFieldIssue,
  AnswerFieldReason,
  AuthenticationErrorReason,
  CollectiveErrorKind,
  CollectiveFailure,
  ConnectErrorReason,
  DeliveryAcknowledgeErrorReason,
  ErrorOptions,
  FirewallRefusalFields,
  GrpcCode,
  InvalidRequestReason,
  ListenErrorReason,
  ManagementErrorReason,
  MessageTextOperation,
  SendErrorReason,
  SendFailure,
  UnavailableReason,
  UnreachableMember,
} from "./errors.js";
export type * from "./values.js";
export type * from "./guidance.js";
export type * from "./json.js";
