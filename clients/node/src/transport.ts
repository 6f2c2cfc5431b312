/**
 * Transports: one HTTP/2 gRPC transport (`@connectrpc/connect-node`) per client, with the
 * bearer token on every call, keepalive paired with the gateway's, and TLS when asked.
 */

import type { Interceptor, Transport } from "@connectrpc/connect";
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
