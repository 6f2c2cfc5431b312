/**
 * Unit tests of the stream loop's parts (src/stream.ts, src/acks.ts, src/retry.ts) with a
 * fake `Messages` call and a fake batch sender: the replay filter, the takeover rule,
 * when the loop reconnects (always, unless bounded) and what it reports, which failed sends
 * are sent again, the connection state, and the acknowledgment batcher. No socket.
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";

import { AckBatcher } from "../src/acks.js";
import { ConnectionTracker } from "../src/connection.js";
import type { ConnectionState } from "../src/connection.js";
import {
  AuthenticationError,
  DeliveryAcknowledgeError,
  EndpointClosedError,
  ListenError,
  SendError,
  TransportError,
  UnavailableError,
} from "../src/errors.js";
import { MessagesResponseSchema } from "../src/gen/harness/v1/endpoint_pb.js";
import type { MessagesResponse } from "../src/gen/harness/v1/endpoint_pb.js";
import { Backoff, RECONNECT_MAX_MS, neverSent, postedNothing, sendMayRetry } from "../src/retry.js";
import { ReplayFilter, streamDeliveries } from "../src/stream.js";
import type { OpenStream } from "../src/stream.js";
import type { InboundDelivery } from "../src/values.js";

function response(token: string): MessagesResponse {
  return create(MessagesResponseSchema, { delivery: { deliveryToken: token } });
}

function decode(message: MessagesResponse): InboundDelivery {
  const token = message.delivery?.deliveryToken ?? "";
  return { token, item: { kind: "operationFailed", id: "col_x", to: "agent:x", error: token }, acknowledge: async () => {} };
}

/** One scripted call: whether it says `harness-stream: open`, what it yields, how it ends. */
interface Script {
  readonly open: boolean;
  readonly tokens: readonly string[];
  readonly end?: Error;
}

/** A fake `Messages` that plays `scripts` in order and records each call's `takeover`. */
function fakeMessages(scripts: readonly Script[]): { open: OpenStream; takeovers: boolean[] } {
  const takeovers: boolean[] = [];
  let call = 0;
  const open: OpenStream = ({ takeover, onHeader }) => {
    takeovers.push(takeover);
    const script = scripts[call++];
    return (async function* () {
      if (script === undefined) {
        throw new ConnectError("no more scripts", Code.FailedPrecondition);
      }
      if (script.open) {
        onHeader(new Headers({ "harness-stream": "open" }));
      }
      for (const token of script.tokens) {
        yield response(token);
      }
      if (script.end !== undefined) {
        throw script.end;
      }
    })();
  };
  return { open, takeovers };
}

const noDelay = (): Backoff => new Backoff(0, 0);

describe("streamDeliveries", () => {
  test("skips replays of yielded tokens and takes over only after holding a stream", async () => {
    const lost = new ConnectError("connection reset", Code.Unavailable);
    const { open, takeovers } = fakeMessages([
      // Refused before it held the slot (no header): the next try keeps the caller's choice.
      { open: false, tokens: [], end: lost },
      { open: true, tokens: ["dlv_1", "dlv_2"], end: lost },
      // The replay after the reconnect starts again at the first unacknowledged item.
      { open: true, tokens: ["dlv_2", "dlv_3"], end: new ConnectError("taken over", Code.PermissionDenied) },
    ]);
    const seen: string[] = [];
    const closing = new AbortController();
    await assert.rejects(
      (async () => {
        for await (const delivery of streamDeliveries({ open, decode, takeover: false, closed: closing.signal, backoff: noDelay() })) {
          seen.push(delivery.token);
        }
      })(),
      (error: unknown) => error instanceof TransportError && error.code === "PERMISSION_DENIED",
    );
    assert.deepEqual(seen, ["dlv_1", "dlv_2", "dlv_3"]);
    assert.deepEqual(takeovers, [false, false, true]);
  });

  test("a typed refusal ends it at once; a decode failure is a ListenError", async () => {
    const status = new ConnectError("listen failed: already-listening", Code.FailedPrecondition);
    const { open } = fakeMessages([{ open: false, tokens: [], end: status }]);
    const closing = new AbortController();
    const stream = streamDeliveries({ open, decode, takeover: false, closed: closing.signal, backoff: noDelay() });
    await assert.rejects(stream.next(), TransportError);

    const broken = fakeMessages([{ open: true, tokens: ["dlv_1"] }]);
    const failing = streamDeliveries({
      open: broken.open,
      decode: () => {
        throw new ListenError("decode-failed");
      },
      takeover: false,
      closed: closing.signal,
    });
    await assert.rejects(failing.next(), (error: unknown) => error instanceof ListenError && error.reason === "decode-failed");
  });

  test("gives up with transport-failed once no stream opened for the bound", async () => {
    let clock = 0;
    const lost = new ConnectError("unreachable", Code.Unavailable);
    const { open, takeovers } = fakeMessages(Array.from({ length: 10 }, () => ({ open: false, tokens: [], end: lost })));
    const stream = streamDeliveries({
      open: (options) => {
        clock += 100;
        return open(options);
      },
      decode,
      takeover: false,
      closed: new AbortController().signal,
      giveUpAfterMs: 250,
      backoff: noDelay(),
      now: () => clock,
    });
    await assert.rejects(stream.next(), (error: unknown) => error instanceof ListenError && error.reason === "transport-failed");
    assert.equal(takeovers.length, 3);
  });

  test("without a bound it never gives up, and reports ready, reconnecting, ready, connecting", async () => {
    // An hour of refused attempts on a fake clock, then the gateway is back.
    let clock = 0;
    const lost = new ConnectError("connect ECONNREFUSED", Code.Unavailable);
    const { open, takeovers } = fakeMessages([
      // Refused before any stream opened: still connecting, not reconnecting.
      { open: false, tokens: [], end: lost },
      { open: true, tokens: ["dlv_1"], end: lost },
      ...Array.from({ length: 60 }, () => ({ open: false, tokens: [], end: lost })),
      { open: true, tokens: ["dlv_2"] },
    ]);
    const states: string[] = [];
    const stream = streamDeliveries({
      open: (options) => {
        clock += 60_000;
        return open(options);
      },
      decode,
      takeover: false,
      closed: new AbortController().signal,
      backoff: noDelay(),
      now: () => clock,
      onState: (state, detail) => states.push(detail === undefined ? state : `${state} (${detail.code})`),
    });
    assert.equal((await stream.next()).value?.token, "dlv_1");
    assert.equal((await stream.next()).value?.token, "dlv_2");
    assert.equal(takeovers.length, 63);
    await stream.return(undefined);
    // One report per failed attempt once a stream was held; the tracker keeps only changes.
    assert.deepEqual(
      states.filter((state, index) => state !== states[index - 1]),
      ["ready", "reconnecting (UNAVAILABLE)", "ready", "connecting"],
    );
  });

  test("closing ends the iteration quietly, and leaving the loop aborts the call", async () => {
    const closing = new AbortController();
    let aborted: AbortSignal | undefined;
    const stream = streamDeliveries({
      open: ({ signal }) => {
        aborted = signal;
        return (async function* () {
          yield response("dlv_1");
          await new Promise((resolve) => signal.addEventListener("abort", resolve));
          throw new ConnectError("cancelled", Code.Canceled);
        })();
      },
      decode,
      takeover: false,
      closed: closing.signal,
    });
    assert.equal((await stream.next()).value?.token, "dlv_1");
    const pending = stream.next();
    closing.abort();
    assert.deepEqual(await pending, { done: true, value: undefined });
    assert.equal(aborted?.aborted, true);
  });
});

describe("ReplayFilter", () => {
  test("remembers up to its capacity, oldest forgotten first", () => {
    const filter = new ReplayFilter(2);
    assert.deepEqual(["a", "b", "a", "c", "a", "b"].map((token) => filter.firstTime(token)), [true, true, false, true, true, true]);
  });
});

describe("ConnectionTracker", () => {
  test("tells each listener every change once; closed is final; unsubscribe stops it", () => {
    const reported: unknown[] = [];
    const tracker = new ConnectionTracker((error) => reported.push(error));
    const first: ConnectionState[] = [];
    const second: ConnectionState[] = [];
    const stopFirst = tracker.subscribe((state) => first.push(state));
    tracker.subscribe((state) => {
      second.push(state);
      throw new Error("a listener's own defect");
    });
    assert.equal(tracker.state, "connecting");
    tracker.set("ready");
    tracker.set("ready");
    tracker.set("reconnecting", new UnavailableError("shutting-down", "the gateway is shutting down"));
    stopFirst();
    tracker.set("ready");
    tracker.set("closed");
    tracker.set("ready");
    assert.deepEqual(first, ["ready", "reconnecting"]);
    assert.deepEqual(second, ["ready", "reconnecting", "ready", "closed"]);
    assert.equal(tracker.state, "closed");
    // The throwing listener failed nobody's call, and its error still surfaced.
    assert.equal(reported.length, 4);
  });
});

describe("sendMayRetry", () => {
  const refused = new TransportError("UNAVAILABLE", "connect ECONNREFUSED", {
    cause: Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" }),
  });
  const reset = new TransportError("UNAVAILABLE", "read ECONNRESET", {
    cause: Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" }),
  });
  const cases: readonly [string, Parameters<typeof sendMayRetry>[0], boolean, boolean][] = [
    // [what, failure, keyless retried, keyed retried]
    ["the gateway not ready", new UnavailableError("not-ready", "not ready"), true, true],
    ["the gateway shutting down", new UnavailableError("shutting-down", "shutting down"), true, true],
    ["a cluster replica that cannot reach the home", new UnavailableError("home-unreachable", "unreachable"), true, true],
    ["no connection made", refused, true, true],
    ["a connection lost under the call", reset, false, true],
    ["a transport deadline", new TransportError("DEADLINE_EXCEEDED", "deadline exceeded"), false, true],
    ["the gateway's outcome-unknown", new SendError("outcome-unknown"), false, true],
    // Nothing was sent; a key keeps this outcome, so only a keyless send tries again.
    ["the gateway's network-unavailable", new SendError("network-unavailable"), true, false],
    ["the gateway's persistence-failed", new SendError("persistence-failed"), true, false],
    ["delivery-pending (the post will still be sent)", new SendError("delivery-pending"), false, false],
    ["a definite refusal", new SendError("unknown-agent"), false, false],
    ["a revoked token", new AuthenticationError("revoked", "authentication failed: the token was revoked"), false, false],
  ];
  for (const [what, failure, keyless, keyed] of cases) {
    test(`${what}: keyless ${keyless ? "retried" : "final"}, keyed ${keyed ? "retried" : "final"}`, () => {
      assert.deepEqual([sendMayRetry(failure, false), sendMayRetry(failure, true)], [keyless, keyed]);
    });
  }
});

describe("Backoff and neverSent", () => {
  test("delays double to the maximum, jittered into [d/2, d], and reset", () => {
    const low = new Backoff(200, 1000, 2, () => 0);
    assert.deepEqual([1, 2, 3, 4].map(() => low.nextDelayMs()), [100, 200, 400, 500]);
    low.reset();
    assert.equal(low.nextDelayMs(), 100);
    assert.equal(new Backoff(200, 1000, 2, () => 1).nextDelayMs(), 200);
  });

  test("by default the delays cap at one second, so a restarted gateway is found within it", () => {
    const backoff = new Backoff(undefined, undefined, undefined, () => 1);
    const delays = Array.from({ length: 8 }, () => backoff.nextDelayMs());
    assert.deepEqual(delays.slice(0, 4), [200, 400, 800, RECONNECT_MAX_MS]);
    assert.ok(delays.every((delay) => delay <= 1_000));
  });

  test("a refused connection was never sent; a reset one may have been", () => {
    const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" });
    assert.equal(neverSent(new TransportError("UNAVAILABLE", "connect ECONNREFUSED", { cause: refused })), true);
    const reset = Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" });
    assert.equal(neverSent(new TransportError("UNAVAILABLE", "read ECONNRESET", { cause: reset })), false);
    assert.equal(neverSent(new TransportError("UNKNOWN", "?", { cause: refused })), false);
  });

  test("a send answered UNAVAILABLE posted nothing; one cut in flight or refused otherwise may have", () => {
    // What a keyless send that was retried and then lost reports: only attempts that may
    // have posted make it `outcome-unknown` rather than `network-unavailable`.
    const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" });
    assert.equal(postedNothing(new SendError("network-unavailable")), true);
    assert.equal(postedNothing(new SendError("persistence-failed")), true);
    assert.equal(postedNothing(new TransportError("UNAVAILABLE", "connect ECONNREFUSED", { cause: refused })), true);
    assert.equal(postedNothing(new SendError("outcome-unknown")), false);
    assert.equal(postedNothing(new TransportError("UNAVAILABLE", "read ECONNRESET")), false);
  });
});

describe("AckBatcher", () => {
  test("one call per batch, each waiter settled with its own token's result", async () => {
    const calls: string[][] = [];
    const batcher = new AckBatcher(
      async (tokens) => {
        calls.push([...tokens]);
        return tokens.map((token) => (token === "bad" ? new DeliveryAcknowledgeError("unknown-delivery") : undefined));
      },
      { maxBatch: 3, maxDelayMs: 5 },
    );
    const results = await Promise.allSettled(["a", "bad", "b", "c"].map((token) => batcher.acknowledge(token)));
    assert.deepEqual(
      results.map((result) => result.status),
      ["fulfilled", "rejected", "fulfilled", "fulfilled"],
    );
    const rejected = results[1] as PromiseRejectedResult;
    assert.ok(rejected.reason instanceof DeliveryAcknowledgeError);
    assert.equal(rejected.reason.reason, "unknown-delivery");
    // A full batch goes at once; the rest waits out the delay.
    assert.deepEqual(calls, [["a", "bad", "b"], ["c"]]);
    await batcher.close();
  });

  test("a failed call fails its whole batch transport-failed; close fails what waits", async () => {
    let release: (() => void) | undefined;
    const batcher = new AckBatcher(
      (_tokens, signal) =>
        new Promise((_resolve, reject) => {
          release = () => reject(new Error("connection lost"));
          signal.addEventListener("abort", () => reject(new Error("aborted")));
        }),
      { maxBatch: 1, maxDelayMs: 1 },
    );
    const first = batcher.acknowledge("a");
    const queued = batcher.acknowledge("b");
    await new Promise((resolve) => setTimeout(resolve, 20));
    release?.();
    await assert.rejects(first, (error: unknown) => error instanceof DeliveryAcknowledgeError && error.reason === "transport-failed");
    await batcher.close();
    await assert.rejects(queued, (error: unknown) => error instanceof DeliveryAcknowledgeError && error.reason === "transport-failed");
    await assert.rejects(batcher.acknowledge("c"), EndpointClosedError);
  });

  test("a full queue makes acknowledge wait for room", async () => {
    const sent: string[] = [];
    let unblock: (() => void) | undefined;
    const gate = new Promise<void>((resolve) => (unblock = resolve));
    const batcher = new AckBatcher(
      async (tokens) => {
        await gate;
        sent.push(...tokens);
        return tokens.map(() => undefined);
      },
      { maxBatch: 1, maxDelayMs: 1, maxQueue: 1 },
    );
    const first = batcher.acknowledge("a"); // taken into the blocked call
    await new Promise((resolve) => setTimeout(resolve, 10));
    const second = batcher.acknowledge("b"); // fills the queue
    let thirdQueued = false;
    const third = batcher.acknowledge("c").then(() => (thirdQueued = true));
    await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(thirdQueued, false);
    unblock?.();
    await Promise.all([first, second, third]);
    assert.deepEqual(sent, ["a", "b", "c"]);
    await batcher.close();
  });
});
