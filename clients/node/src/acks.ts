/**
 * `AckBatcher`: many `delivery.acknowledge()` waiters, few `Acknowledge` calls (the
 * Python client's `_acks.py`).
 *
 * One call per delivery would cap throughput at a few thousand a second (operations.md
 * §10). The batcher sends up to `ACK_BATCH_MAX` tokens per call, or whatever it holds once
 * `ACK_BATCH_DELAY_MS` passed since the batch's first token, one call at a time, and
 * settles each waiter with its own token's result. A full queue makes `acknowledge()`
 * wait for room: backpressure on the consumer, never an unbounded buffer.
 */

import { DeliveryAcknowledgeError, EndpointClosedError } from "./errors.js";

/** Most tokens in one `Acknowledge` call from the batcher (the gateway takes 1,000). */
export const ACK_BATCH_MAX = 100;
/** Milliseconds the batcher waits after a batch's first token for more. */
export const ACK_BATCH_DELAY_MS = 20;
/** Tokens waiting to be sent before `acknowledge()` waits for room. */
export const ACK_QUEUE_MAX = 10_000;

/** Sends one batch; resolves one result per token (undefined: retired), rejects when the
 * whole call failed. `signal` aborts when the batcher closes. */
export type SendBatch = (
  tokens: readonly string[],
  signal: AbortSignal,
) => Promise<readonly (DeliveryAcknowledgeError | undefined)[]>;

interface Waiter {
  readonly token: string;
  readonly resolve: () => void;
  readonly reject: (error: Error) => void;
}

/** Options of an `AckBatcher`, for tests. */
export interface AckBatcherOptions {
  readonly maxBatch?: number;
  readonly maxDelayMs?: number;
  readonly maxQueue?: number;
}

/** Batches acknowledgments; owns its one loop, which `close()` stops and awaits. */
export class AckBatcher {
  private readonly maxBatch: number;
  private readonly maxDelayMs: number;
  private readonly maxQueue: number;
  private readonly queue: Waiter[] = [];
  /** Callers waiting for room in a full queue. */
  private readonly roomWaiters: (() => void)[] = [];
  private readonly abort = new AbortController();
  private loop: Promise<void> | undefined;
  /** Wakes the loop's wait for more tokens early, once a batch is full. */
  private wake: (() => void) | undefined;
  private closed = false;

  constructor(
    private readonly sendBatch: SendBatch,
    options: AckBatcherOptions = {},
  ) {
    this.maxBatch = options.maxBatch ?? ACK_BATCH_MAX;
    this.maxDelayMs = options.maxDelayMs ?? ACK_BATCH_DELAY_MS;
    this.maxQueue = options.maxQueue ?? ACK_QUEUE_MAX;
  }

  /** Queue `token` and wait for its result; rejects with `DeliveryAcknowledgeError`. */
  async acknowledge(token: string): Promise<void> {
    while (!this.closed && this.queue.length >= this.maxQueue) {
      await new Promise<void>((resolve) => this.roomWaiters.push(resolve));
    }
    if (this.closed) {
      throw new EndpointClosedError();
    }
    const result = new Promise<void>((resolve, reject) => {
      this.queue.push({ token, resolve, reject });
    });
    if (this.queue.length >= this.maxBatch) {
      this.wake?.();
    }
    this.loop ??= this.run();
    return result;
  }

  /** Stop: the batch in flight is aborted and every waiter fails `transport-failed`.
   * Idempotent. */
  async close(): Promise<void> {
    this.closed = true;
    this.abort.abort();
    this.wake?.();
    for (const resolve of this.roomWaiters.splice(0)) {
      resolve();
    }
    await this.loop;
    for (const waiter of this.queue.splice(0)) {
      waiter.reject(new DeliveryAcknowledgeError("transport-failed"));
    }
  }

  private async run(): Promise<void> {
    while (!this.closed && this.queue.length > 0) {
      if (this.queue.length < this.maxBatch) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, this.maxDelayMs);
          this.wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        this.wake = undefined;
      }
      if (this.closed) {
        break;
      }
      const batch = this.queue.splice(0, this.maxBatch);
      for (const resolve of this.roomWaiters.splice(0)) {
        resolve();
      }
      await this.flush(batch);
    }
    this.loop = undefined;
  }

  private async flush(batch: readonly Waiter[]): Promise<void> {
    let results: readonly (DeliveryAcknowledgeError | undefined)[];
    try {
      results = await this.sendBatch(
        batch.map((waiter) => waiter.token),
        this.abort.signal,
      );
    } catch (error) {
      const failure =
        error instanceof DeliveryAcknowledgeError
          ? error
          : new DeliveryAcknowledgeError("transport-failed", { cause: error });
      for (const waiter of batch) {
        waiter.reject(failure);
      }
      return;
    }
    batch.forEach((waiter, index) => {
      const result = results[index];
      if (result === undefined) {
        waiter.resolve();
      } else {
        waiter.reject(result);
      }
    });
  }
}
