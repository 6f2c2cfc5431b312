/**
 * The client side of a `Messages` stream: `streamDeliveries` and its `ReplayFilter`
 * (the Python client's `_stream.py`).
 *
 * The loop keeps one stream open: it reconnects with jittered backoff (0.2 s doubling to
 * 10 s); once the gateway said `harness-stream: open` on one of its streams, it reconnects
 * with `takeover` (that stream may be half-open on the gateway: endpoint.proto's takeover
 * rule); and it skips replays of tokens this iterator already yielded. A typed refusal
 * (`already-listening`, a revoked token) or 5 minutes without a stream (`transport-failed`)
 * ends it with the error; closing the endpoint ends it quietly.
 */

import type { MessagesResponse } from "./gen/harness/v1/endpoint_pb.js";
import { ListenError } from "./errors.js";
import { Backoff, shouldReconnect, sleep } from "./retry.js";
import { decodeError } from "./status.js";
import type { InboundDelivery } from "./values.js";

/** Tokens a `messages()` iterator remembers having yielded, oldest forgotten first. The
 * gateway replays only unacknowledged items, at most a stream window (256 by default) of
 * them, so this bound is far above what a replay can reach. */
export const REPLAY_MEMORY = 65_536;

/** Milliseconds without an open stream after which `messages()` fails `transport-failed`. */
export const LISTEN_GIVE_UP_MS = 300_000;

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
  readonly giveUpAfterMs?: number;
  readonly backoff?: Backoff;
  readonly now?: () => number;
}

/** Deliveries in inbox order, each token at most once, across reconnects. */
export async function* streamDeliveries(options: StreamLoopOptions): AsyncGenerator<InboundDelivery, void, undefined> {
  const now = options.now ?? Date.now;
  const giveUpAfterMs = options.giveUpAfterMs ?? LISTEN_GIVE_UP_MS;
  const backoff = options.backoff ?? new Backoff();
  const replay = new ReplayFilter();
  let heldStream = false;
  let lastStream = now();
  while (!options.closed.aborted) {
    const call = new AbortController();
    const onClose = (): void => call.abort();
    options.closed.addEventListener("abort", onClose, { once: true });
    let opened = false;
    try {
      const responses = options.open({
        takeover: options.takeover || heldStream,
        signal: call.signal,
        onHeader: (headers) => {
          if (headers.get(STREAM_OPEN_HEADER.name) === STREAM_OPEN_HEADER.value) {
            opened = true;
            heldStream = true;
            backoff.reset();
          }
        },
      });
      for await (const response of responses) {
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
      const failure = decodeError(error);
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
    if (now() - lastStream > giveUpAfterMs) {
      throw new ListenError("transport-failed");
    }
    await sleep(backoff.nextDelayMs(), options.closed);
  }
}
