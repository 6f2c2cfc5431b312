/**
 * The contract's public values as the client holds them: plain, readonly TypeScript
 * values, never protobuf messages.
 *
 * The shapes are the contract's own (harness-endpoint-contract.txt, "Service shape" and
 * "Local guidance"): closed unions discriminated by `kind` (items, messages, outcomes),
 * `op` (collective operations) or `action` (answers), so a host dispatches with a
 * `switch` that the compiler checks for exhaustiveness. JSON values are plain JSON
 * (`JsonValue`), epoch milliseconds are numbers, and protobuf `uint64` counters are
 * `bigint`.
 */

import type { SendFailure } from "./errors.js";
import type { CheckedGuidance, LocalGuidance, Withheld } from "./guidance.js";
import type { JsonObject, JsonValue } from "./json.js";

// The JSON and guidance values live in leaves that `errors.ts` imports too, so errors and
// values never import each other; they are re-exported here with the rest of the values.
export type * from "./guidance.js";
export type * from "./json.js";

/** `agent:<AgentName>`. */
export type AgentAddress = string;
/** `agent:<name>` or `group:<name>,<name>,...`, as a send accepts it. */
export type MessageAddressInput = string;
/** `group:` and the complete canonical membership. */
export type GroupAddress = string;
/** An opaque post id (`pst_…`). */
export type PostId = string;
/** `col_` followed by 43 base64url characters: a SHA-256 digest. */
export type CollectiveId = string;

// --- content -----------------------------------------------------------------------

/** One closed part of `Content`. */
export type ContentPart =
  | { readonly type: "text"; readonly text: string }
  | { readonly type: "data"; readonly value: JsonValue };

/** A non-empty sequence of parts, at most 32,768 bytes of canonical JSON for one post. */
export type Content = readonly ContentPart[];

/** One answer field: a string, a finite number, a boolean or a list of strings. */
export type AnswerValue = string | number | boolean | readonly string[];

/** An answer's form fields. */
export type AnswerContent = { readonly [field: string]: AnswerValue };

/** An MCP form-mode schema: `{$schema?, type: "object", properties, required?}`. */
export type RequestedSchema = JsonObject;

// --- sending -----------------------------------------------------------------------

/** The two operations that ask a question. */
export type CollectiveOp = "gather" | "all_gather";

/** A send's operation: `{}` and `{op: "multicast"}` both mean an ordinary message. */
export type CollectiveOperation =
  | { readonly op?: "multicast" }
  | {
      readonly op: CollectiveOp;
      /** Whole seconds from now, 1 to 2,592,000 (30 days). */
      readonly deadline: number;
      readonly requestedSchema: RequestedSchema;
    };

/** An answer to the one request open in a conversation. */
export type CollectiveResponse =
  | { readonly action: "accept"; readonly content: AnswerContent }
  | { readonly action: "decline" };

/** `{to, text, collective?}`: a message, or the question of a gather or all_gather. */
export interface MessageInput {
  readonly to: MessageAddressInput;
  readonly text: string;
  /** Omitted and `{}` are different inputs to an idempotency key, the same post. */
  readonly collective?: CollectiveOperation;
}

/** `{to, collectiveResponse}`: an answer; `to` is the conversation the request came in. */
export interface ResponseInput {
  readonly to: MessageAddressInput;
  readonly collectiveResponse: CollectiveResponse;
}

/** What a send posts. */
export type SendInput = MessageInput | ResponseInput;

/** Where a refused gather, all_gather or answer is reported. */
export type FailureDelivery = "result" | "inbound";

/** What an admitted, completed send returns. */
export interface SendResult {
  /** The `CollectiveId` of a gather, all_gather or answered request; absent for a multicast. */
  readonly operationId?: CollectiveId;
  /** The local firewall's advice on the admitted send. */
  readonly guidance?: CheckedGuidance;
  /**
   * The `PostId`s of the posts the send certified, in binding order (a gateway extension):
   * one for a message or an answer, one per member conversation for a gather.
   */
  readonly postIds: readonly PostId[];
}

// --- inbound -----------------------------------------------------------------------

/** A message in a two-member conversation. */
export interface DirectMessage {
  readonly kind: "direct";
  readonly postId: PostId;
  /** The conversation's address as the recipient sees it (the sender's). */
  readonly address: AgentAddress;
  readonly sender: AgentAddress;
  readonly content: Content;
}

/** A message in a group conversation of 3 to 32 members. */
export interface GroupMessage {
  readonly kind: "group";
  readonly postId: PostId;
  readonly address: GroupAddress;
  readonly sender: AgentAddress;
  /** Every member in name order, this agent included (at least three). */
  readonly members: readonly AgentAddress[];
  readonly content: Content;
}

export type InboundMessage = DirectMessage | GroupMessage;

/** What one member ended with in a collective result. */
export type CollectiveMemberOutcome =
  | { readonly kind: "answered"; readonly content: AnswerContent }
  | { readonly kind: "declined" }
  | { readonly kind: "invalid"; readonly reason: string }
  | { readonly kind: "no-answer" }
  | Withheld;

/** One entry of a collective result's outcomes. */
export interface CollectiveMemberResult {
  readonly member: AgentAddress;
  readonly outcome: CollectiveMemberOutcome;
}

/** An ordinary message. */
export interface MulticastItem {
  readonly kind: "multicast";
  readonly message: InboundMessage;
}

/** A gather or all_gather question this agent is asked. */
export interface CollectiveRequestItem {
  readonly kind: "collectiveRequest";
  readonly op: CollectiveOp;
  readonly id: CollectiveId;
  readonly postId: PostId;
  readonly from: AgentAddress;
  /** The conversation the request arrived in; answers go there. */
  readonly to: MessageAddressInput;
  readonly question: string;
  readonly requestedSchema: RequestedSchema;
  /** Epoch milliseconds. */
  readonly deadlineAt: number;
}

/** The result of a gather or all_gather. */
export interface CollectiveResultItem {
  readonly kind: "collectiveResult";
  readonly op: CollectiveOp;
  readonly id: CollectiveId;
  readonly to: MessageAddressInput;
  readonly question: string | Withheld;
  /** One entry per member, in member order (at least one). */
  readonly outcomes: readonly CollectiveMemberResult[];
}

/** A collective operation that ended without a result. */
export interface OperationFailedItem {
  readonly kind: "operationFailed";
  readonly id: CollectiveId;
  readonly to: MessageAddressInput;
  /** The error's model-facing message. */
  readonly error: string;
}

export type InboundItem =
  | MulticastItem
  | CollectiveRequestItem
  | CollectiveResultItem
  | OperationFailedItem;

/** An item offered under its stable token. */
export interface InboundDelivery {
  /** The delivery token (`dlv_…`): a replay carries the same token and item. */
  readonly token: string;
  readonly item: InboundItem;
  readonly guidance?: LocalGuidance;
  /**
   * Retire this delivery. Batched: up to 100 tokens a call, or whatever is queued 20 ms
   * after the first; rejects with `DeliveryAcknowledgeError`. Acknowledging again succeeds.
   */
  acknowledge(): Promise<void>;
}

// --- keyed sends -------------------------------------------------------------------

/** How a returned keyed send ended. */
export type SendOutcome =
  | { readonly kind: "success"; readonly result: SendResult }
  | { readonly kind: "failure"; readonly error: SendFailure };

/** The state of an idempotency key (`readSend`). */
export type SendState =
  | { readonly state: "absent" }
  | { readonly state: "pending"; readonly input: SendInput }
  | { readonly state: "indeterminate"; readonly input: SendInput }
  | { readonly state: "returned"; readonly input: SendInput; readonly outcome: SendOutcome };

// --- management --------------------------------------------------------------------

/** A registration; `token` is shown this once. */
export interface RegisteredAgent {
  readonly address: AgentAddress;
  readonly agentId: string;
  readonly token: string;
}

/** A conversation the daemon set aside, and why (for the operator). */
export interface SetAsideConversation {
  readonly conversationId: string;
  readonly reason: string;
}

/** What an operator sees of one agent. */
export interface AgentStatus {
  readonly name: string;
  readonly address: AgentAddress;
  readonly agentId: string;
  readonly publicKey: string;
  readonly issuedAt: string;
  readonly hosted: boolean;
  readonly streamAttached: boolean;
  /** Unacknowledged deliveries. */
  readonly backlog: bigint;
  readonly oldestUnackedAgeSeconds: number;
  readonly setAside: readonly SetAsideConversation[];
}

/** One page of `listAgents`. */
export interface AgentPage {
  readonly agents: readonly AgentStatus[];
  /** The next page's token; `""` on the last page. */
  readonly nextPageToken: string;
}

/** The daemon's version, mode, hosted agents and Router state; a cluster replica adds its
 * view of the cluster. */
export interface GatewayStatus {
  readonly version: string;
  readonly mode: "embedded" | "joined" | "cluster" | "router" | "registry";
  readonly hostedAgents: number;
  readonly routerState: "recovering" | "active" | "detached";
  /** Set only by a cluster replica. */
  readonly cluster?: ClusterStatus;
}

/** A cluster replica's view of its cluster (`harness status`). */
export interface ClusterStatus {
  /** The answering replica. */
  readonly replicaId: string;
  readonly incarnation: bigint;
  readonly state: "joined" | "serving" | "withdrawn" | "lost" | "closed";
  /** Until the answering replica's own lease ends unless a beat renews it (≤ 0: ended). */
  readonly leaseRemainingSeconds: number;
  /** Serving with fresh beats for one TTL: it may claim partitions. */
  readonly claiming: boolean;
  /** P, fixed at set-up. */
  readonly partitions: number;
  readonly ownedPartitions: number;
  readonly unownedPartitions: number;
  /** By id, those that beat within the last minute or hold a partition. */
  readonly replicas: readonly ClusterReplica[];
}

/** One replica of a cluster, as the answering replica's last view saw it. */
export interface ClusterReplica {
  readonly replicaId: string;
  readonly incarnation: bigint;
  /** The `HOST:PORT` other replicas and clients dial. */
  readonly address: string;
  readonly serving: boolean;
  /** Beat within the lease TTL, in database time. */
  readonly live: boolean;
  /** Its incarnation was fenced by a claimer. */
  readonly fenced: boolean;
  readonly beatAgeSeconds: number;
  readonly partitions: number;
}
