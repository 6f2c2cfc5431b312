/**
 * `connect` and `Endpoint`: one agent's HarnessEndpoint over gRPC (the Python client's
 * `_endpoint.py`).
 *
 *     const endpoint = await connect("127.0.0.1:7770", { token });
 *     await endpoint.send({ to: "agent:bob", text: "hello" });
 *     for await (const delivery of endpoint.messages()) {
 *       ...
 *       await delivery.acknowledge();
 *     }
 *     await endpoint.close();
 */

import { create, toBinary } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import type { CallOptions, Client } from "@connectrpc/connect";

import { AckBatcher } from "./acks.js";
import { ConnectionTracker } from "./connection.js";
import type { ConnectionState, ConnectionStateListener } from "./connection.js";
import {
  DecodeFailed,
  FAILURE_DELIVERY,
  acknowledgeResultFromProto,
  itemFromProto,
  localGuidanceFromProto,
  messageTextErrorFromProto,
  sendInputFromProto,
  sendInputToProto,
  sendResultFromProto,
  sendStateFromProto,
} from "./convert.js";
import {
  AuthenticationError,
  CollectiveError,
  DeliveryAcknowledgeError,
  EndpointClosedError,
  FirewallSendError,
  HarnessError,
  IdempotencyConflictError,
  InvalidRequestError,
  ListenError,
  PermissionDeniedError,
  REQUEST_MAX_BYTES,
  SendError,
  TransportError,
  connectFailure,
  oversizedDetail,
} from "./errors.js";
import { HarnessEndpointService, ParseMessageTextRequestSchema, SendRequestSchema } from "./gen/harness/v1/endpoint_pb.js";
import type { MessagesResponse } from "./gen/harness/v1/endpoint_pb.js";
import {
  Backoff,
  SEND_RETRY_FLOOR_MS,
  UNARY_RETRY,
  postedNothing,
  sendMayRetry,
  shouldRetryUnary,
  sleep,
  untilServing,
} from "./retry.js";
import { decodeError } from "./status.js";
import { streamDeliveries } from "./stream.js";
import { DEFAULT_CONNECT_TIMEOUT_MS, HomeTransport, createTransport, homeChannelOptions, parseAddress } from "./transport.js";
import type { ChannelOptions } from "./transport.js";
import type { FailureDelivery, InboundDelivery, SendInput, SendResult, SendState } from "./values.js";

/** Milliseconds a `send` may take in all, retries of a keyed send included. */
export const SEND_TIMEOUT_MS = 60_000;
/** Milliseconds one `Acknowledge` call may take. */
export const ACKNOWLEDGE_TIMEOUT_MS = 10_000;
/** Milliseconds a `readSend` or `parseMessageText` call may take. */
export const READ_TIMEOUT_MS = 5_000;
/** Most tokens the gateway takes in one `Acknowledge` call. */
export const ACKNOWLEDGE_MAX_TOKENS = 1_000;

/** What `connect` takes. */
export interface ConnectOptions extends ChannelOptions {
  /** The agent's API token (`hat_…`). */
  readonly token: string;
}

/** What `send` takes besides the input. */
export interface SendOptions {
  /** 1 to 128 UTF-8 bytes: a retry under the key returns the kept outcome. A keyed send
   * lost in transit, or answered `outcome-unknown`, is sent again under its key until
   * `timeoutMs` passed: the key is how a send rides out a gateway restart or a cluster
   * hand-over without posting twice. */
  readonly idempotencyKey?: string;
  /** How a refused gather, all_gather or answer is reported; `"result"` by default. */
  readonly failureDelivery?: FailureDelivery;
  /** Milliseconds the send may take in all, retries included (60 s by default). */
  readonly timeoutMs?: number;
  /** Abandons the send: it fails `outcome-unknown` (or `network-unavailable` when it
   * cannot have reached the gateway), and a keyed send is not sent again. */
  readonly signal?: AbortSignal;
}

/** What `messages` takes. */
export interface MessagesOptions {
  /** End another open stream of this agent instead of failing `already-listening`. */
  readonly takeover?: boolean;
  /** Milliseconds without an open stream after which the iterator fails `ListenError`
   * `transport-failed`. Absent by default: the iterator reconnects until the gateway is
   * back, however long that takes. */
  readonly giveUpAfterMs?: number;
}

/** An Endpoint's lifecycle: a closed one refuses every call with `EndpointClosedError`. */
export type EndpointState = "open" | "closed";

/** The failures `send` passes on as the gateway decided them. */
const TYPED_SEND_FAILURES = [
  SendError,
  CollectiveError,
  FirewallSendError,
  IdempotencyConflictError,
  AuthenticationError,
  PermissionDeniedError,
  InvalidRequestError,
] as const;

function typedSendFailure(error: HarnessError): boolean {
  return TYPED_SEND_FAILURES.some((type) => error instanceof type);
}

/** gRPC's text of a request over the receiving side's limit: `Received message larger than
 * max (2000015 vs. 1048576)`; the first number is the request's size in bytes. */
const OVERSIZED = /larger than max \((\d+) vs\. \d+\)/;

/** A request over the gateway's default receive limit cannot hold a valid message:
 * `content-invalid` naming the limit, before the gateway refuses it unread. */
function refuseOversized(size: number): void {
  if (size > REQUEST_MAX_BYTES) {
    throw new SendError("content-invalid", { detail: oversizedDetail(size) });
  }
}

/** gRPC's bare refusal of a request over the gateway's receive limit (one set below the
 * default) as the same `content-invalid`. */
function refuseRefusedUnread(failure: HarnessError): void {
  const oversized = failure.code === "RESOURCE_EXHAUSTED" ? OVERSIZED.exec(failure.message) : null;
  if (oversized !== null) {
    throw new SendError("content-invalid", { detail: oversizedDetail(Number(oversized[1])), cause: failure });
  }
}

/**
 * Acquire the HarnessEndpoint of the agent `token` names.
 *
 * One authenticated call with no effect checks the gateway and the token within
 * `connectTimeoutMs` (waiting out a gateway that is still starting). Rejects with
 * `HarnessConnectError` naming the address (`address`, and `detail` in the message):
 * `transport-failed` (unreachable, or not serving in time), `authentication-failed` (the
 * token refused: the `AuthenticationError` is its `cause`), `incompatible-daemon` (no
 * HarnessEndpointService), worded as the Python client words them.
 */
export async function connect(address: string, options: ConnectOptions): Promise<Endpoint> {
  const endpoint = new Endpoint(address, options);
  try {
    await endpoint.checkToken(options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS);
  } catch (error) {
    await endpoint.close();
    throw error;
  }
  return endpoint;
}

/** One agent's HarnessEndpoint. Close it with `close()` (or `await using`). */
export class Endpoint {
  private readonly client: Client<typeof HarnessEndpointService>;
  /** The `HOST:PORT` connect failures name. */
  private readonly authority: string;
  private readonly acks: AckBatcher;
  /** Aborts when the endpoint closes: every open call and stream ends. */
  private readonly closing = new AbortController();
  private readonly connection = new ConnectionTracker();

  /** Use `connect`, which checks the token first. */
  constructor(address: string, options: ConnectOptions) {
    this.authority = parseAddress(address).authority;
    // Through a cluster's Service, calls follow the agent's home replica once one names it.
    const home = homeChannelOptions(address, options);
    const transport = new HomeTransport(createTransport(address, options.token, options), (hint) =>
      createTransport(hint, options.token, home),
    );
    this.client = createClient(HarnessEndpointService, transport);
    this.acks = new AckBatcher((tokens, signal) => this.acknowledgeBatch(tokens, signal));
  }

  /** The lifecycle state. */
  get state(): EndpointState {
    return this.closing.signal.aborted ? "closed" : "open";
  }

  /** The agent's link to the gateway as `messages()` sees it: `connecting` (no stream
   * yet, or the last loop ended), `ready` (a stream is open), `reconnecting` (the stream
   * was lost and the loop is opening a new one), `closed` (after `close()`, for good). */
  get connectionState(): ConnectionState {
    return this.connection.state;
  }

  /** Call `listener` on each later change of `connectionState` (not with the current one;
   * `detail` is the failure that made it `reconnecting`); returns the function that
   * unsubscribes. The listener runs synchronously and must not throw: an exception it
   * throws surfaces as an uncaught exception, never in the stream. */
  onConnectionState(listener: ConnectionStateListener): () => void {
    return this.connection.subscribe(listener);
  }

  /** Stop acknowledging, end every `messages()` iterator and open call; idempotent. */
  async close(): Promise<void> {
    if (this.closing.signal.aborted) {
      return;
    }
    // Closed before the abort, so nothing the ending streams report comes after it.
    this.connection.set("closed");
    this.closing.abort();
    await this.acks.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private checkOpen(): void {
    if (this.closing.signal.aborted) {
      throw new EndpointClosedError();
    }
  }

  /** Call options: a deadline, and cancellation when the endpoint (or `signal`) aborts. */
  private callOptions(timeoutMs: number, signal?: AbortSignal): CallOptions {
    return { timeoutMs, signal: signal === undefined ? this.closing.signal : AbortSignal.any([this.closing.signal, signal]) };
  }

  /** A call's failure, or `EndpointClosedError` when the endpoint closed under it. */
  private failure(error: unknown): HarnessError {
    return this.closing.signal.aborted ? new EndpointClosedError({ cause: error }) : decodeError(error);
  }

  /** An idempotent unary call, retried on UNAVAILABLE (it had no effect). */
  private async idempotent<T>(call: (options: CallOptions) => Promise<T>, timeoutMs: number): Promise<T> {
    const backoff = new Backoff(UNARY_RETRY.initialMs, UNARY_RETRY.maxMs);
    for (let attempt = 1; ; attempt++) {
      try {
        return await call(this.callOptions(timeoutMs));
      } catch (error) {
        const failure = this.failure(error);
        if (attempt >= UNARY_RETRY.attempts || !shouldRetryUnary(failure)) {
          throw failure;
        }
      }
      await sleep(backoff.nextDelayMs(), this.closing.signal);
      this.checkOpen();
    }
  }

  /** @internal One authenticated call with no effect: a refused token fails `connect`. */
  async checkToken(timeoutMs: number): Promise<void> {
    try {
      await untilServing(
        (left) => this.client.parseMessageText({ to: "agent:connect-check", text: "" }, this.callOptions(left)),
        timeoutMs,
        this.closing.signal,
      );
    } catch (error) {
      throw connectFailure(decodeError(error), this.authority, timeoutMs);
    }
  }

  // --- send ------------------------------------------------------------------------

  /**
   * Send; resolves once the post is certified (a gather: once its posts settled).
   *
   * Rejects with `SendError`, `CollectiveError`, `FirewallSendError`, or
   * `IdempotencyConflictError` for a key bound to another send.
   *
   * A send refused before it had any effect (the gateway restarting or handing the agent
   * over answers UNAVAILABLE, or the request never left) is sent again with capped backoff
   * (0.2 s doubling to 1 s) while `timeoutMs` leaves time for an answer. A keyed send whose
   * outcome is unknown (the connection dropped with it in flight, a transport deadline, or
   * the gateway answered `outcome-unknown`) is also sent again under its key, which returns
   * the kept outcome or joins the running send: give a key to ride out restarts and
   * hand-overs. A keyless one is never sent twice: it fails `outcome-unknown` when it may
   * have reached the gateway, `network-unavailable` when it cannot have.
   */
  async send(input: SendInput, options: SendOptions = {}): Promise<SendResult> {
    this.checkOpen();
    const request = create(SendRequestSchema, {
      input: sendInputToProto(input),
      failureDelivery: FAILURE_DELIVERY.toProto(options.failureDelivery ?? "result"),
      ...(options.idempotencyKey === undefined ? {} : { idempotencyKey: options.idempotencyKey }),
    });
    refuseOversized(toBinary(SendRequestSchema, request).length);
    const giveUpAt = Date.now() + (options.timeoutMs ?? SEND_TIMEOUT_MS);
    const keyed = options.idempotencyKey !== undefined;
    const backoff = new Backoff();
    let mayHaveArrived = false;
    for (;;) {
      let response;
      try {
        response = await this.client.send(request, this.callOptions(Math.max(1, giveUpAt - Date.now()), options.signal));
      } catch (error) {
        const failure = this.failure(error);
        if (failure instanceof EndpointClosedError) {
          throw failure;
        }
        refuseRefusedUnread(failure);
        mayHaveArrived ||= !postedNothing(failure);
        const delay = backoff.nextDelayMs();
        // The caller's own abort ends the send: it is never retried past it.
        const abandoned = options.signal?.aborted === true;
        if (!abandoned && giveUpAt - Date.now() - delay >= SEND_RETRY_FLOOR_MS && sendMayRetry(failure, keyed)) {
          await sleep(delay, AbortSignal.any([this.closing.signal, ...(options.signal === undefined ? [] : [options.signal])]));
          this.checkOpen();
          continue;
        }
        if (typedSendFailure(failure)) {
          throw failure;
        }
        throw new SendError(mayHaveArrived ? "outcome-unknown" : "network-unavailable", { cause: failure });
      }
      try {
        return sendResultFromProto(response.result);
      } catch (error) {
        // The send succeeded, but this client cannot read what it returned.
        throw new SendError("outcome-unknown", { cause: error });
      }
    }
  }

  // --- messages --------------------------------------------------------------------

  /**
   * The agent's deliveries in inbox order, as an async iterator (leave the `for await`
   * loop, or call `return()`, to end the stream).
   *
   * Reconnects on its own with backoff capped at 1 s (`connectionState` follows it), and
   * skips replays of tokens it already yielded (each call
   * starts with an empty memory). It never gives up on its own: a gateway that restarts,
   * or a cluster replica that hands the agent over, is found again within about a second
   * of answering. Rejects with `ListenError`: `already-listening` when another stream is
   * open (unless `takeover`) or takes this one over, `transport-failed` only past the
   * caller's `giveUpAfterMs` without a stream, `decode-failed`; or with the typed failure
   * that ended the stream (`AuthenticationError` `revoked` for a revoked token). Closing
   * the endpoint, or leaving the loop, ends the iteration.
   */
  messages(options: MessagesOptions = {}): AsyncGenerator<InboundDelivery, void, undefined> {
    this.checkOpen();
    return streamDeliveries({
      open: ({ takeover, signal, onHeader }) =>
        this.client.messages({ takeover }, { signal: AbortSignal.any([signal, this.closing.signal]), onHeader, timeoutMs: 0 }),
      decode: (response) => this.delivery(response),
      takeover: options.takeover ?? false,
      closed: this.closing.signal,
      ...(options.giveUpAfterMs === undefined ? {} : { giveUpAfterMs: options.giveUpAfterMs }),
      onState: (state, detail) => this.connection.set(state, detail),
    });
  }

  private delivery(response: MessagesResponse): InboundDelivery {
    const delivery = response.delivery;
    try {
      if (delivery === undefined) {
        throw new DecodeFailed("a response has no delivery");
      }
      const token = delivery.deliveryToken;
      const acks = this.acks;
      return {
        token,
        item: itemFromProto(delivery.item),
        ...(delivery.guidance === undefined ? {} : { guidance: localGuidanceFromProto(delivery.guidance) }),
        acknowledge: () => acks.acknowledge(token),
      };
    } catch (error) {
      if (error instanceof DecodeFailed) {
        throw new ListenError("decode-failed", { cause: error });
      }
      throw error;
    }
  }

  // --- acknowledgments -------------------------------------------------------------

  /**
   * Acknowledge tokens directly, 1,000 per call; one result per token (undefined:
   * retired). Rejects with the decoded failure of a call (`AuthenticationError`,
   * `TransportError`). `delivery.acknowledge()` is the batched way for deliveries in hand.
   */
  async acknowledge(tokens: readonly string[]): Promise<(DeliveryAcknowledgeError | undefined)[]> {
    this.checkOpen();
    const results: (DeliveryAcknowledgeError | undefined)[] = [];
    for (let start = 0; start < tokens.length; start += ACKNOWLEDGE_MAX_TOKENS) {
      const chunk = tokens.slice(start, start + ACKNOWLEDGE_MAX_TOKENS);
      const response = await this.idempotent(
        (options) => this.client.acknowledge({ deliveryTokens: chunk }, options),
        ACKNOWLEDGE_TIMEOUT_MS,
      );
      if (response.results.length !== chunk.length) {
        throw new TransportError("INTERNAL", "acknowledge results do not match the tokens");
      }
      try {
        results.push(...response.results.map(acknowledgeResultFromProto));
      } catch (error) {
        throw new TransportError("INTERNAL", "acknowledge results do not decode", { cause: error });
      }
    }
    return results;
  }

  private async acknowledgeBatch(
    tokens: readonly string[],
    signal: AbortSignal,
  ): Promise<(DeliveryAcknowledgeError | undefined)[]> {
    if (signal.aborted) {
      throw new DeliveryAcknowledgeError("transport-failed");
    }
    try {
      return await this.acknowledge(tokens);
    } catch (error) {
      throw new DeliveryAcknowledgeError("transport-failed", { cause: error });
    }
  }

  // --- pure and state reads --------------------------------------------------------

  /** The send a message's text states; rejects with `MessageTextError` when it states an
   * operation that does not fit its shape, and `SendError` `content-invalid` for a text too
   * large for the gateway to read (no send could carry it). */
  async parseMessageText(to: string, text: string): Promise<SendInput> {
    this.checkOpen();
    const request = create(ParseMessageTextRequestSchema, { to, text });
    refuseOversized(toBinary(ParseMessageTextRequestSchema, request).length);
    let response;
    try {
      response = await this.idempotent((options) => this.client.parseMessageText(request, options), READ_TIMEOUT_MS);
    } catch (error) {
      refuseRefusedUnread(decodeError(error));
      throw error;
    }
    const result = response.result;
    try {
      switch (result.case) {
        case "input":
          return sendInputFromProto(result.value);
        case "error":
          throw messageTextErrorFromProto(result.value);
        case undefined:
          throw new DecodeFailed("a parse answered nothing");
      }
    } catch (error) {
      if (error instanceof DecodeFailed) {
        throw new TransportError("INTERNAL", "the parse answer does not decode", { cause: error });
      }
      throw error;
    }
  }

  /** The state of an idempotency key: absent, pending, indeterminate or returned. */
  async readSend(idempotencyKey: string): Promise<SendState> {
    this.checkOpen();
    const response = await this.idempotent(
      (options) => this.client.readSend({ idempotencyKey }, options),
      READ_TIMEOUT_MS,
    );
    try {
      return sendStateFromProto(response);
    } catch (error) {
      if (error instanceof DecodeFailed) {
        throw new TransportError("INTERNAL", "the send state does not decode", { cause: error });
      }
      throw error;
    }
  }
}
