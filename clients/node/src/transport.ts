/**
 * Transports: one HTTP/2 gRPC transport (`@connectrpc/connect-node`) per client, with the
 * bearer token on every call, keepalive paired with the gateway's, and TLS when asked; and
 * `HomeTransport`, which follows a cluster replica's home hint (`harness-home`).
 */

import type { DescMessage, DescMethodStreaming, DescMethodUnary, MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import type { ContextValues, Interceptor, StreamResponse, Transport, UnaryResponse } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";

/** Milliseconds between keepalive pings, even on an idle `Messages` stream. The gateway
 * accepts pings 10 s apart or more (GOAWAY `too_many_pings` on the third faster one). */
export const KEEPALIVE_INTERVAL_MS = 30_000;
/** Milliseconds to wait for a ping's answer before the connection is considered dead, so a
 * half-open stream is found within about 40 s. */
export const KEEPALIVE_TIMEOUT_MS = 10_000;
/** Largest message the client accepts: the gateway sends at most 4 MiB. */
export const MAX_RECEIVE_BYTES = 4 * 1024 * 1024;
/** Milliseconds `connect` and `connectManagement` wait for the gateway. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
/** The response metadata by which a cluster replica names the agent's home replica,
 * `HOST:PORT` (its `--advertise-address`, cluster.md §4.2). */
export const HOME_HEADER = "harness-home";
/** Home transports kept, one per address: a home moves only when partitions move, so a
 * client sees a handful of homes in its life; the least recently used is dropped past this
 * (its idle connection closes on its own). */
export const HOME_TRANSPORTS_MAX = 8;

/** TLS settings: PEM strings or buffers, as `node:tls` takes them. */
export interface TlsOptions {
  /** Roots to verify the gateway against; the system's roots when absent. */
  readonly ca?: string | Buffer;
  /** A client certificate, for a gateway that requires mTLS. */
  readonly cert?: string | Buffer;
  /** The client certificate's private key. */
  readonly key?: string | Buffer;
  /** The name to verify the gateway's certificate for, when it differs from the host. */
  readonly servername?: string;
}

/** How to reach a gateway. */
export interface ChannelOptions {
  /** `true` (or TLS settings) for TLS; a `grpcs://` or `https://` address implies it. */
  readonly tls?: boolean | TlsOptions;
  /** Milliseconds the first check of the gateway may take (10 s by default). */
  readonly connectTimeoutMs?: number;
}

const SECURE_SCHEMES = ["grpcs://", "https://"];
const PLAIN_SCHEMES = ["grpc://", "http://", "dns:///"];

/** `HOST:PORT`, `grpc://HOST:PORT` or `grpcs://HOST:PORT` as its authority and whether
 * the scheme asks for TLS. */
export function parseAddress(address: string): { readonly authority: string; readonly tls: boolean } {
  const strip = (rest: string): string => rest.replace(/\/+$/, "");
  for (const scheme of SECURE_SCHEMES) {
    if (address.startsWith(scheme)) {
      return { authority: strip(address.slice(scheme.length)), tls: true };
    }
  }
  for (const scheme of PLAIN_SCHEMES) {
    if (address.startsWith(scheme)) {
      return { authority: strip(address.slice(scheme.length)), tls: false };
    }
  }
  return { authority: strip(address), tls: false };
}

function bearer(token: string): Interceptor {
  return (next) => async (request) => {
    request.header.set("authorization", `Bearer ${token}`);
    return next(request);
  };
}

/** A gRPC transport to `address` sending `token` on every call (no I/O yet). */
export function createTransport(address: string, token: string, options: ChannelOptions): Transport {
  const { authority, tls: schemeTls } = parseAddress(address);
  const tls = options.tls ?? schemeTls;
  const tlsOptions = typeof tls === "object" ? tls : {};
  return createGrpcTransport({
    baseUrl: `${tls === false ? "http" : "https"}://${authority}`,
    interceptors: [bearer(token)],
    pingIntervalMs: KEEPALIVE_INTERVAL_MS,
    pingTimeoutMs: KEEPALIVE_TIMEOUT_MS,
    // Pings with no call open keep an idle connection checked too.
    pingIdleConnection: true,
    readMaxBytes: MAX_RECEIVE_BYTES,
    ...(tls === false ? {} : { nodeOptions: { ...tlsOptions } }),
  });
}

/** A call's request headers, as `Transport` takes them. */
type RequestHeader = Parameters<Transport["unary"]>[3];

/** `HOST:PORT` with a DNS name, an IPv4 address or a bracketed IPv6 address: the only hint
 * followed, so a malformed header can never make the client dial something else. */
const HOME_ADDRESS = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?):\d{1,5}$/;

/** The options to dial a home with: TLS as the configured target has it, verified for the
 * home's own name (the advertised address is in the replica certificate's SANs), so a
 * `servername` given for the configured target is dropped. */
export function homeChannelOptions(address: string, options: ChannelOptions): ChannelOptions {
  const tls = options.tls ?? parseAddress(address).tls;
  if (typeof tls !== "object") {
    return { tls };
  }
  const { servername: _forTheTarget, ...rest } = tls;
  return { tls: rest };
}

/**
 * The transport an endpoint's calls go through (cluster.md §4.2): the configured target
 * (a Service in front of cluster replicas, or one gateway) until an answer names the agent's
 * home replica in `harness-home`; then that home, dialled directly, so calls skip the
 * forwarding hop; and the configured target again after any UNAVAILABLE or deadline from
 * the home (it moved, stopped or cannot be reached), until an answer names a home again.
 * A gateway that sends no hint (every non-cluster gateway) is always called directly.
 */
export class HomeTransport implements Transport {
  private home: { readonly address: string; readonly transport: Transport } | undefined;
  // Insertion order is use order: a hit is deleted and set again.
  private readonly dialled = new Map<string, Transport>();

  constructor(
    private readonly configured: Transport,
    /** A transport to `HOST:PORT` (no I/O yet). */
    private readonly dial: (address: string) => Transport,
  ) {}

  /** The home replica calls go to, when an answer named one. */
  get homeAddress(): string | undefined {
    return this.home?.address;
  }

  async unary<I extends DescMessage, O extends DescMessage>(
    method: DescMethodUnary<I, O>,
    signal: AbortSignal | undefined,
    timeoutMs: number | undefined,
    header: RequestHeader,
    input: MessageInitShape<I>,
    contextValues?: ContextValues,
  ): Promise<UnaryResponse<I, O>> {
    const via = this.home;
    try {
      const response = await (via?.transport ?? this.configured).unary(method, signal, timeoutMs, header, input, contextValues);
      this.observe(response.header);
      return response;
    } catch (error) {
      this.failed(error, via);
      throw error;
    }
  }

  async stream<I extends DescMessage, O extends DescMessage>(
    method: DescMethodStreaming<I, O>,
    signal: AbortSignal | undefined,
    timeoutMs: number | undefined,
    header: RequestHeader,
    input: AsyncIterable<MessageInitShape<I>>,
    contextValues?: ContextValues,
  ): Promise<StreamResponse<I, O>> {
    const via = this.home;
    let response: StreamResponse<I, O>;
    try {
      // Resolves once the response headers arrived.
      response = await (via?.transport ?? this.configured).stream(method, signal, timeoutMs, header, input, contextValues);
    } catch (error) {
      this.failed(error, via);
      throw error;
    }
    this.observe(response.header);
    const failed = (error: unknown): void => this.failed(error, via);
    return { ...response, message: watched(response.message, failed) };
  }

  /** Follow the hint an answer carries, if any. */
  private observe(header: Headers): void {
    const hint = header.get(HOME_HEADER);
    if (hint === null || !HOME_ADDRESS.test(hint) || hint === this.home?.address) {
      return;
    }
    let transport = this.dialled.get(hint);
    this.dialled.delete(hint);
    transport ??= this.dial(hint);
    this.dialled.set(hint, transport);
    for (const address of this.dialled.keys()) {
      if (this.dialled.size <= HOME_TRANSPORTS_MAX) {
        break;
      }
      this.dialled.delete(address);
    }
    this.home = { address: hint, transport };
  }

  /** A call through the home failed so that the home may be gone: back to the target. */
  private failed(error: unknown, via: HomeTransport["home"]): void {
    if (via === undefined || this.home !== via) {
      return;
    }
    const code = ConnectError.from(error).code;
    if (code === Code.Unavailable || code === Code.DeadlineExceeded) {
      this.home = undefined;
    }
  }
}

/** `messages`, telling `failed` what ended it with an error. */
async function* watched<T>(messages: AsyncIterable<T>, failed: (error: unknown) => void): AsyncIterable<T> {
  try {
    yield* messages;
  } catch (error) {
    failed(error);
    throw error;
  }
}
