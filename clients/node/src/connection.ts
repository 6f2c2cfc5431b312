/**
 * The endpoint's connection state, as the agent sees it (the Python client's
 * `ConnectionState`, operations.md §10): whether the gateway is reachable now, or the
 * client is reconnecting to it. Its `messages()` loops, its retried sends and its retried
 * unary calls report what they saw; listeners hear each change once.
 */

import type { HarnessError } from "./errors.js";

/**
 * `connecting` until `connect` has checked the gateway; `ready` once a call was answered
 * (a stream opened, a send or a read answered); `reconnecting` while a stream or a call is
 * retried after a failure that reaching the gateway again can fix (a restart, a hand-over,
 * a lost connection); `closed` once the endpoint closed, for good.
 */
export type ConnectionState = "connecting" | "ready" | "reconnecting" | "closed";

/** Hears each change of state; `detail` is the failure that made it `reconnecting`. */
export type ConnectionStateListener = (state: ConnectionState, detail?: HarnessError) => void;

/** Rethrow `error` outside the call that changed the state: an uncaught exception. */
function rethrowLater(error: unknown): void {
  queueMicrotask(() => {
    throw error;
  });
}

/** The current state and its listeners; `closed` is final. */
export class ConnectionTracker {
  private current: ConnectionState = "connecting";
  // One entry per subscription (a wrapper each), so the same function subscribed twice is
  // told twice and unsubscribed once per call.
  private readonly listeners = new Set<{ readonly listener: ConnectionStateListener }>();

  /** `reportListenerError` gets what a listener threw (an uncaught exception by default). */
  constructor(private readonly reportListenerError: (error: unknown) => void = rethrowLater) {}

  get state(): ConnectionState {
    return this.current;
  }

  /** Call `listener` on every later change; returns the function that stops it. */
  subscribe(listener: ConnectionStateListener): () => void {
    const entry = { listener };
    this.listeners.add(entry);
    return () => {
      this.listeners.delete(entry);
    };
  }

  /** Move to `state` and tell the listeners, unless it is the current one or closed. */
  set(state: ConnectionState, detail?: HarnessError): void {
    if (this.current === state || this.current === "closed") {
      return;
    }
    this.current = state;
    for (const { listener } of [...this.listeners]) {
      try {
        listener(state, detail);
      } catch (error) {
        // A listener's defect is its own: it never fails the stream or the call that
        // changed the state, and still surfaces.
        this.reportListenerError(error);
      }
    }
    if (state === "closed") {
      this.listeners.clear();
    }
  }
}
