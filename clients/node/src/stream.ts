/**
 * The client side of a `Messages` stream: `streamDeliveries` and its `ReplayFilter`
 * (the Python client's `_stream.py`).
 *
 * The loop keeps one stream open: it reconnects with jittered backoff (0.2 s doubling to
 * 1 s, one attempt at a time), so it is back within about a second of the gateway answering
 * again; once the gateway said `harness-stream: open` on one of its streams, it reconnects
 * with `takeover` (that stream may be half-open on the gateway: endpoint.proto's takeover
 * rule); and it skips replays of tokens this iterator already yielded. It never gives up on
 * its own: a typed refusal (`already-listening`, a revoked token) ends it with the error,
 * closing the endpoint or leaving the loop ends it quietly, and only a caller's
 * `giveUpAfterMs` ends it `transport-failed` after that long without a stream. It reports
 * the connection state (src/connection.ts): `ready` when a stream opened, `reconnecting`
 * when a stream it held was lost, `connecting` once it ended.
 */

import type { MessagesResponse } from "./gen/harness/v1/endpoint_pb.js";
import { ListenError } from "./errors.js";
import type { HarnessError } from "./errors.js";
import { Backoff, shouldReconnect, sleep } from "./retry.js";
import { decodeError } from "./status.js";
import type { InboundDelivery } from "./values.js";

/** Tokens a `messages()` iterator remembers having yielded, oldest forgotten first. The
 * gateway replays only unacknowledged items, at most a stream window (256 by default) of
 * them, so this bound is far above what a replay can reach. */
export const REPLAY_MEMORY = 65_536;

/** The initial metadata by which the gateway says a stream holds the agent's slot. */
export const STREAM_OPEN_HEADER = { name: "harness-stream", value: "open" } as const;

/** The tokens one iterator yielded, bounded by `capacity` (oldest dropped). */
export class ReplayFilter {
  // A Set iterates in insertion order, so its first entry is the oldest.
  private readonly seen = new Set<string>();

  constructor(private readonly capacity: number = REPLAY_MEMORY) {}

  /** Remember `token`; false when it was yielded before (a replay to skip). */
  firstTime(token: string): boolean {
    if (this.seen.has(token)) {
      return false;
    }
    this.seen.add(token);
    if (this.seen.size > this.capacity) {
      const oldest = this.seen.values().next();
      if (oldest.done !== true) {
        this.seen.delete(oldest.value);
      }
    }
    return true;
  }
}

/** Opens one `Messages` call. */
export type OpenStream = (options: {
  readonly takeover: boolean;
  readonly signal: AbortSignal;
  readonly onHeader: (headers: Headers) => void;
}) => AsyncIterable<MessagesResponse>;

/** What `streamDeliveries` needs from its endpoint. */
export interface StreamLoopOptions {
  readonly open: OpenStream;
  /** Decodes one response; throws `ListenError` `decode-failed`. */
  readonly decode: (response: MessagesResponse) => InboundDelivery;
  /** The caller's `takeover`. */
  readonly takeover: boolean;
  /** Aborts when the endpoint closes: the open call ends and the iterator returns. */
  readonly closed: AbortSignal;
  /** Milliseconds without an open stream after which the loop fails `transport-failed`;
   * unbounded when absent (the default: a gateway that comes back is found again). */
  readonly giveUpAfterMs?: number;
  /** Told `ready` when a stream opened, `reconnecting` (with the failure) when a stream it
   * held was lost and it retries, `connecting` when the loop ended. */
  readonly onState?: (state: "connecting" | "ready" | "reconnecting", detail?: HarnessError) => void;
  readonly backoff?: Backoff;
  readonly now?: () => number;
}

/** Deliveries in inbox order, each token at most once, across reconnects. */
export async function* streamDeliveries(options: StreamLoopOptions): AsyncGenerator<InboundDelivery, void, undefined> {
  const onState = options.onState ?? ((): void => {});
  try {
    yield* reconnecting(options, onState);
  } finally {
    // Ended by the caller, a typed refusal, the bound or a close: no stream is open, and the
    // next `messages()` opens one (a close already reported `closed`, which stays).
    onState("connecting");
  }
}

async function* reconnecting(
  options: StreamLoopOptions,
  onState: NonNullable<StreamLoopOptions["onState"]>,
): AsyncGenerator<InboundDelivery, void, undefined> {
  const now = options.now ?? Date.now;
  const giveUpAfterMs = options.giveUpAfterMs;
  const backoff = options.backoff ?? new Backoff();
  const replay = new ReplayFilter();
  let heldStream = false;
  let lastStream = now();
  while (!options.closed.aborted) {
    const call = new AbortController();
    const onClose = (): void => call.abort();
    options.closed.addEventListener("abort", onClose, { once: true });
    let opened = false;
    // The gateway said the stream holds the agent's slot, or sent an item on it.
    const markOpen = (): void => {
      if (!opened) {
        opened = true;
        heldStream = true;
        backoff.reset();
        onState("ready");
      }
    };
    let failure: HarnessError | undefined;
    try {
      const responses = options.open({
        takeover: options.takeover || heldStream,
        signal: call.signal,
        onHeader: (headers) => {
          if (headers.get(STREAM_OPEN_HEADER.name) === STREAM_OPEN_HEADER.value) {
            markOpen();
          }
        },
      });
      for await (const response of responses) {
        markOpen();
        const delivery = options.decode(response);
        if (replay.firstTime(delivery.token)) {
          yield delivery;
        }
      }
    } catch (error) {
      if (options.closed.aborted) {
        return;
      }
      if (error instanceof ListenError) {
        throw error;
      }
      failure = decodeError(error);
      if (!shouldReconnect(failure)) {
        throw failure;
      }
    } finally {
      // Leaving by `break`, `return()` or an error ends this call on the gateway too.
      options.closed.removeEventListener("abort", onClose);
      call.abort();
      if (opened) {
        lastStream = now();
      }
    }
    if (options.closed.aborted) {
      return;
    }
    // A stream the gateway ended without an error (it never does on its own) is retried too.
    if (heldStream) {
      onState("reconnecting", failure);
    }
    if (giveUpAfterMs !== undefined && now() - lastStream > giveUpAfterMs) {
      throw new ListenError("transport-failed", failure === undefined ? {} : { cause: failure });
    }
    await sleep(backoff.nextDelayMs(), options.closed);
  }
}
