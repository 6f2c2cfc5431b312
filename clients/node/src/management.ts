/**
 * `connectManagement` and `ManagementClient`: the operator API with the admin token (the
 * Python client's `_management.py`), enough to register agents and look at them.
 */

import { createClient } from "@connectrpc/connect";
import type { CallOptions, Client } from "@connectrpc/connect";

import {
  DecodeFailed,
  agentStatusFromProto,
  contentFromProto,
  gatewayStatusFromProto,
  registeredAgentFromProto,
} from "./convert.js";
import { EndpointClosedError, HarnessError, TransportError, connectFailure } from "./errors.js";
import { ManagementService } from "./gen/harness/v1/management_pb.js";
import { untilServing } from "./retry.js";
import { decodeError } from "./status.js";
import { DEFAULT_CONNECT_TIMEOUT_MS, createTransport, parseAddress } from "./transport.js";
import type { ChannelOptions } from "./transport.js";
import type { AgentPage, AgentStatus, Content, GatewayStatus, RegisteredAgent } from "./values.js";

/** Milliseconds one management call may take (operations.md §3). */
export const MANAGEMENT_TIMEOUT_MS = 30_000;

/** What `connectManagement` takes. */
export interface ManagementOptions extends ChannelOptions {
  /** The gateway's admin token (`hadm_…`, the `admin-token` file in its data directory). */
  readonly adminToken: string;
}

/** One certified record of a conversation, as an operator reads it. */
export interface ConversationRecord {
  readonly recordHash: string;
  readonly postId: string;
  readonly author: string;
  readonly depth: bigint;
  /** The certified content, collective part included. */
  readonly content: Content;
  /** The exact RFC 8785 bytes of the certified record. */
  readonly certifiedRecord: Uint8Array;
}

/** One page of `history`. */
export interface HistoryPage {
  readonly records: readonly ConversationRecord[];
  readonly hasMore: boolean;
}

/**
 * A client of `harness.v1.ManagementService`, once one call (the gateway's status)
 * succeeded within `connectTimeoutMs`. Rejects with `HarnessConnectError` naming the
 * address: `authentication-failed` (a wrong admin token; the refusal is its `cause`),
 * `transport-failed`, `incompatible-daemon`.
 */
export async function connectManagement(address: string, options: ManagementOptions): Promise<ManagementClient> {
  const client = new ManagementClient(address, options);
  try {
    await untilServing(
      (timeoutMs) => client.gatewayStatus({ timeoutMs }),
      options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
      new AbortController().signal,
    );
  } catch (error) {
    await client.close();
    const failure = error instanceof HarnessError ? error : decodeError(error);
    const timeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    throw connectFailure(failure, parseAddress(address).authority, timeoutMs, "admin token");
  }
  return client;
}

/** Operator calls; failures reject with the decoded typed errors (`ManagementError`,
 * `AuthenticationError`, `PermissionDeniedError`, `UnavailableError`, `TransportError`). */
export class ManagementClient {
  private readonly client: Client<typeof ManagementService>;
  private readonly closing = new AbortController();

  /** Use `connectManagement`, which checks the gateway first. */
  constructor(address: string, options: ManagementOptions) {
    this.client = createClient(ManagementService, createTransport(address, options.adminToken, options));
  }

  /** Cancel open calls and refuse new ones; idempotent. */
  async close(): Promise<void> {
    this.closing.abort();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private async call<T>(run: (options: CallOptions) => Promise<T>, timeoutMs = MANAGEMENT_TIMEOUT_MS): Promise<T> {
    if (this.closing.signal.aborted) {
      throw new EndpointClosedError();
    }
    try {
      return await run({ timeoutMs, signal: this.closing.signal });
    } catch (error) {
      throw this.closing.signal.aborted ? new EndpointClosedError({ cause: error }) : decodeError(error);
    }
  }

  private static decoded<T>(decode: () => T): T {
    try {
      return decode();
    } catch (error) {
      if (error instanceof DecodeFailed) {
        throw new TransportError("INTERNAL", "the gateway's answer does not decode", { cause: error }) as HarnessError;
      }
      throw error;
    }
  }

  /** Register and host an agent; its token is in the answer, this once. */
  async registerAgent(name: string): Promise<RegisteredAgent> {
    const response = await this.call((options) => this.client.registerAgent({ name }, options));
    return registeredAgentFromProto(response);
  }

  /** One agent's card, hosting, stream and backlog. */
  async agentStatus(name: string): Promise<AgentStatus> {
    const response = await this.call((options) => this.client.getAgentStatus({ name }, options));
    return ManagementClient.decoded(() => agentStatusFromProto(response.agent));
  }

  /** One page of agents in name order and the next page's token (`""` at the end). */
  async listAgents(options: { readonly prefix?: string; readonly pageSize?: number; readonly pageToken?: string } = {}): Promise<AgentPage> {
    const response = await this.call((call) =>
      this.client.listAgents(
        {
          pageSize: options.pageSize ?? 0,
          pageToken: options.pageToken ?? "",
          ...(options.prefix === undefined ? {} : { prefix: options.prefix }),
        },
        call,
      ),
    );
    return ManagementClient.decoded(() => ({
      agents: response.agents.map(agentStatusFromProto),
      nextPageToken: response.nextPageToken,
    }));
  }

  /** One page (at most 50) of a conversation's certified records in chain order, as
   * `agentName` holds them; `address` is the conversation from that agent's side. */
  async history(
    agentName: string,
    address: string,
    options: { readonly afterRecordHash?: string; readonly pageSize?: number } = {},
  ): Promise<HistoryPage> {
    const response = await this.call((call) =>
      this.client.readConversation(
        {
          agentName,
          address,
          pageSize: options.pageSize ?? 0,
          ...(options.afterRecordHash === undefined ? {} : { afterRecordHash: options.afterRecordHash }),
        },
        call,
      ),
    );
    return ManagementClient.decoded(() => ({
      records: response.records.map((record) => ({
        recordHash: record.recordHash,
        postId: record.postId,
        author: record.author,
        depth: record.depth,
        content: contentFromProto(record.content),
        certifiedRecord: record.certifiedRecord,
      })),
      hasMore: response.hasMore,
    }));
  }

  /** Revoke the agent's tokens (ending its stream) and return a new one. */
  async rotateAgentToken(name: string): Promise<string> {
    const response = await this.call((options) => this.client.rotateAgentToken({ name }, options));
    return response.token;
  }

  /** Revoke every token of the agent and end its stream. */
  async revokeAgentToken(name: string): Promise<void> {
    await this.call((options) => this.client.revokeAgentToken({ name }, options));
  }

  /** The daemon's version, mode, hosted agents and Router state. */
  async gatewayStatus(options: { readonly timeoutMs?: number } = {}): Promise<GatewayStatus> {
    const response = await this.call((call) => this.client.getGatewayStatus({}, call), options.timeoutMs);
    return ManagementClient.decoded(() => gatewayStatusFromProto(response));
  }
}
