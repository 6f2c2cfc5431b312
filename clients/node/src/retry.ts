/**
 * Retry policy as data: which failures are retried, and how (the Python client's
 * `_retry.py`, operations.md §3 and §10).
 *
 * The idempotent unary methods (Acknowledge, ReadSend, ParseMessageText) are retried on
 * UNAVAILABLE; any send is sent again when the call had no effect, and a keyed send also
 * when its outcome is unknown (under its key); `messages()` reconnects. Nothing else
 * retries, and each caller asks these functions rather than deciding in its own `catch`.
 */

import { SendError, TransportError, UnavailableError } from "./errors.js";
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

/** Milliseconds before the first retry of a stream or a send (drawn from 100-200 ms). */
export const RECONNECT_INITIAL_MS = 200;
/** The most milliseconds between two attempts: low, so a stream is back within about a
 * second of the gateway (or a cluster replica) answering again after a restart or a
 * hand-over; an attempt against a stopped gateway is one refused connection, cheap. */
export const RECONNECT_MAX_MS = 1_000;
/** Each failed attempt doubles the delay, up to `RECONNECT_MAX_MS`. */
export const RECONNECT_MULTIPLIER = 2;
/** Milliseconds a send's deadline must still have, after the backoff delay, for the client
 * to send it again. The gateway answers one second before a call's deadline at the latest
 * (operations.md §3); a shorter attempt could only end the client's side of the call,
 * turning a definite failure into `outcome-unknown`. */
export const SEND_RETRY_FLOOR_MS = 1_000;

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

/**
 * True when a send that failed with `error` may be sent again, the deadline permitting (the
 * Python client's `send_may_retry`, operations.md §10).
 *
 * The gateway answers UNAVAILABLE only when the call had no effect (operations.md §3), so
 * any send refused so (not ready, shutting down; for a keyless send also
 * `network-unavailable`, `certification-unavailable`, `persistence-failed`), or refused
 * before it left the client, is sent again. A keyed send is also sent again when its
 * outcome is unknown (a lost connection, a transport deadline, the gateway's
 * `outcome-unknown`): under its key the gateway returns the kept outcome or joins the live
 * invocation (engine.md §9.1), so it never posts twice. A keyless send that may have
 * arrived never is (that could post twice); a keyed send's other typed failures are the
 * key's kept outcome, which sending again would only return.
 */
export function sendMayRetry(error: HarnessError, keyed: boolean): boolean {
  if (error instanceof UnavailableError) {
    return true;
  }
  if (error instanceof SendError) {
    return error.reason === "outcome-unknown" ? keyed : error.code === "UNAVAILABLE" && !keyed;
  }
  return error instanceof TransportError && (neverSent(error) || (keyed && RECONNECT_CODES.has(error.code)));
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

/** True when a failed send attempt surely posted nothing: it never reached the gateway, or
 * the gateway answered UNAVAILABLE, which it does only when the call had no effect
 * (`network-unavailable`, `certification-unavailable`, `persistence-failed` included). */
export function postedNothing(error: HarnessError): boolean {
  return neverSent(error) || (error instanceof SendError && error.code === "UNAVAILABLE");
}

/** Jittered exponential delays: 0.2 s doubling to 1 s, each drawn from [d/2, d]. */
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
