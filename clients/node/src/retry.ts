/**
 * Retry policy as data: which failures are retried, and how (the Python client's
 * `_retry.py`, operations.md §3).
 *
 * The idempotent unary methods (Acknowledge, ReadSend, ParseMessageText) are retried on
 * UNAVAILABLE; a keyed send is sent again under its key; `messages()` reconnects.
 * Nothing else retries, and each caller asks these functions rather than deciding in its
 * own `catch`.
 */

import { TransportError, UnavailableError } from "./errors.js";
import type { GrpcCode, HarnessError } from "./errors.js";
import { decodeError } from "./status.js";

/** Transport codes after which a `Messages` stream reconnects: replay makes it safe. */
export const RECONNECT_CODES: ReadonlySet<GrpcCode> = new Set<GrpcCode>([
  "UNAVAILABLE",
  "INTERNAL",
  "UNKNOWN",
  "CANCELLED",
  "DEADLINE_EXCEEDED",
  "RESOURCE_EXHAUSTED",
  "ABORTED",
]);

/** Node error codes of a connection that was never made, so no request left. */
const NEVER_CONNECTED: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
]);

/** Seconds before a stream's first reconnect, the most between two, and the growth. */
export const RECONNECT_INITIAL_MS = 200;
export const RECONNECT_MAX_MS = 10_000;
export const RECONNECT_MULTIPLIER = 2;

/** The retry of an idempotent unary call: 4 attempts, 0.2 s doubling to 3 s. */
export const UNARY_RETRY = { attempts: 4, initialMs: 200, maxMs: 3_000 } as const;

/** True when a `messages()` stream ended by `error` should reconnect: the gateway not
 * ready or shutting down, and transport failures. Typed contract failures (a takeover, a
 * revoked token) end the iterator. */
export function shouldReconnect(error: HarnessError): boolean {
  if (error instanceof UnavailableError) {
    return true;
  }
  return error instanceof TransportError && RECONNECT_CODES.has(error.code);
}

/** True when a keyed send may be sent again under its key: the gateway either never saw it
 * or keeps its outcome, so a retry joins or replays it. */
export function shouldRetryKeyedSend(error: HarnessError): boolean {
  if (error instanceof UnavailableError) {
    return true;
  }
  return error instanceof TransportError && RECONNECT_CODES.has(error.code) && error.code !== "DEADLINE_EXCEEDED";
}

/** True when an idempotent unary call may be made again: it had no effect. */
export function shouldRetryUnary(error: HarnessError): boolean {
  return error instanceof UnavailableError || (error instanceof TransportError && error.code === "UNAVAILABLE");
}

/** True when the failed call cannot have reached the gateway's handler. */
export function neverSent(error: HarnessError): boolean {
  if (error instanceof UnavailableError) {
    return true;
  }
  if (!(error instanceof TransportError) || error.code !== "UNAVAILABLE") {
    return false;
  }
  const seen = new Set<unknown>();
  for (let cause: unknown = error.cause; cause instanceof Error && !seen.has(cause); cause = cause.cause) {
    seen.add(cause);
    const code = (cause as { code?: unknown }).code;
    if (typeof code === "string" && NEVER_CONNECTED.has(code)) {
      return true;
    }
  }
  return false;
}

/** Jittered exponential delays: 0.2 s doubling to 10 s, each drawn from [d/2, d]. */
export class Backoff {
  private next: number;

  constructor(
    private readonly initialMs: number = RECONNECT_INITIAL_MS,
    private readonly maxMs: number = RECONNECT_MAX_MS,
    private readonly multiplier: number = RECONNECT_MULTIPLIER,
    private readonly random: () => number = Math.random,
  ) {
    this.next = initialMs;
  }

  /** A connection succeeded: start again from the initial delay. */
  reset(): void {
    this.next = this.initialMs;
  }

  /** The next delay in milliseconds, jittered so reconnecting clients spread out. */
  nextDelayMs(): number {
    const delay = this.next;
    this.next = Math.min(this.maxMs, this.next * this.multiplier);
    return delay / 2 + this.random() * (delay / 2);
  }
}

/** Wait `ms`, or less when `signal` aborts (then it resolves at once, never rejects). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) {
      resolve();
      return;
    }
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

/**
 * Run `check` until it succeeds, waiting out a gateway that answers `not-ready` (it is
 * still starting) with backoff, all within `timeoutMs`; rejects with the decoded failure
 * of the last attempt. `check` gets the milliseconds left.
 */
export async function untilServing(
  check: (timeoutMs: number) => Promise<unknown>,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<void> {
  const giveUpAt = Date.now() + timeoutMs;
  const backoff = new Backoff();
  for (;;) {
    try {
      await check(Math.max(1, giveUpAt - Date.now()));
      return;
    } catch (error) {
      const failure = decodeError(error);
      if (!(failure instanceof UnavailableError) || Date.now() >= giveUpAt || signal.aborted) {
        throw failure;
      }
    }
    await sleep(Math.min(backoff.nextDelayMs(), Math.max(0, giveUpAt - Date.now())), signal);
  }
}
