/**
 * The shared client scenarios (`clients/scenarios.txt`), run by the TypeScript client.
 *
 * Every Harness Gateway client passes the same list against a real gateway; this file is
 * the TypeScript side, tests/integration/clients/test_client_scenarios.py the Python one,
 * and tests/unit/test_client_scenarios_listed.py keeps both equal to the list: one node:test
 * `test` per scenario, named by its id, and nothing else.
 *
 * Each test starts a real `harness-gateway serve` process (test/support/gateway.ts) and
 * talks to it only through the package's public API, as a user would: the agents are
 * registered over ManagementService. "Never arrives" is proved by a later marker arriving
 * first, never by waiting and hoping.
 */

import assert from "node:assert/strict";
import { createServer } from "node:net";
import type { AddressInfo } from "node:net";
import { test } from "node:test";

import {
  AuthenticationError,
  CollectiveError,
  DeliveryAcknowledgeError,
  HarnessConnectError,
  IdempotencyConflictError,
  ListenError,
  MessageTextError,
  SendError,
  connect,
} from "@harness-gateway/client";
import type {
  CollectiveOp,
  CollectiveRequestItem,
  InboundItem,
  InboundMessage,
  JsonObject,
  MessageInput,
} from "@harness-gateway/client";

import { inSetting, nextDelivery, nextItem, within } from "./support/setting.js";
import type { Stream } from "./support/setting.js";

const QUESTION = "Which day works for the review?";
/** The form every gather here asks for: one closed choice. */
const SCHEMA: JsonObject = {
  type: "object",
  properties: { slot: { type: "string", enum: ["mon", "tue"] } },
  required: ["slot"],
};

function messageOf(item: InboundItem): InboundMessage {
  assert.equal(item.kind, "multicast", `expected a multicast item, got ${JSON.stringify(item)}`);
  return item.message;
}

function textOf(item: InboundItem): string {
  const content = messageOf(item).content;
  assert.equal(content.length, 1);
  const [part] = content;
  assert.equal(part?.type, "text", `expected one text part, got ${JSON.stringify(content)}`);
  return part.text;
}

function gather(to: string, op: CollectiveOp = "gather"): MessageInput {
  return { to, text: QUESTION, collective: { op, deadline: 120, requestedSchema: SCHEMA } };
}

/** A loopback port nothing listens on (the kernel's next ephemeral one, released). */
async function unusedPort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

function requestOf(item: InboundItem): CollectiveRequestItem {
  assert.equal(item.kind, "collectiveRequest", `expected a request, got ${JSON.stringify(item)}`);
  return item;
}

/** `promise`'s rejection, which must be an instance of `type`. */
async function rejection<E extends Error>(promise: Promise<unknown>, type: new (...args: never[]) => E): Promise<E> {
  try {
    await within(promise, "the call");
  } catch (error) {
    assert.ok(error instanceof type, `expected ${type.name}, got ${String(error)}`);
    return error;
  }
  assert.fail(`expected ${type.name}, but the call succeeded`);
}

// --- sends -------------------------------------------------------------------------

test("direct-send", () =>
  inSetting(async (setting) => {
    const alice = await setting.agent("alice");
    const bob = await setting.agent("bob");
    const aliceStream = alice.messages();
    const bobStream = bob.messages();

    const result = await alice.send({ to: "agent:bob", text: "hello bob" });

    assert.equal(result.operationId, undefined);
    const message = messageOf(await nextItem(bobStream));
    const { records } = await setting.management.history("bob", "agent:alice");
    assert.deepEqual(
      records.map((record) => record.postId),
      [message.postId],
    );
    assert.deepEqual(result.postIds, [message.postId]);
    assert.deepEqual(message, {
      kind: "direct",
      postId: records[0]?.postId,
      address: "agent:alice",
      sender: "agent:alice",
      content: [{ type: "text", text: "hello bob" }],
    });
    // The sender is not a recipient: the first thing alice receives is bob's later reply.
    await bob.send({ to: "agent:alice", text: "hello alice" });
    assert.equal(textOf(await nextItem(aliceStream)), "hello alice");
  }));

test("group-send", () =>
  inSetting(async (setting) => {
    const [alice, bob, carol] = [await setting.agent("alice"), await setting.agent("bob"), await setting.agent("carol")];
    const streams = [alice.messages(), bob.messages(), carol.messages()];

    // Out of order and without the sender: the gateway puts the address in canonical form.
    await alice.send({ to: "group:carol,bob", text: "hello both" });

    const received = [messageOf(await nextItem(streams[1]!)), messageOf(await nextItem(streams[2]!))];
    const { records } = await setting.management.history("bob", "group:alice,bob,carol");
    assert.deepEqual(
      records.map((record) => record.postId),
      [received[0]?.postId],
    );
    const expected = {
      kind: "group",
      postId: records[0]?.postId,
      address: "group:alice,bob,carol",
      sender: "agent:alice",
      members: ["agent:alice", "agent:bob", "agent:carol"],
      content: [{ type: "text", text: "hello both" }],
    };
    assert.deepEqual(received, [expected, expected]);
    await bob.send({ to: "agent:alice", text: "not the group post" });
    assert.equal(textOf(await nextItem(streams[0]!)), "not the group post");
  }));

// --- the stream --------------------------------------------------------------------

test("stream-and-acknowledge", () =>
  inSetting(async (setting) => {
    const alice = await setting.agent("alice");
    const bob = await setting.agent("bob");
    const texts = ["first", "second", "third"];
    for (const text of texts) {
      await alice.send({ to: "agent:bob", text });
    }
    await setting.statusUntil("bob", (status) => status.backlog === 3n);

    const stream = bob.messages();
    const deliveries = [await nextDelivery(stream), await nextDelivery(stream), await nextDelivery(stream)];

    assert.deepEqual(
      deliveries.map((delivery) => textOf(delivery.item)),
      texts,
    );
    assert.equal(new Set(deliveries.map((delivery) => delivery.token)).size, 3);
    // Acknowledged together: the batcher answers each waiter with its own token's result.
    await within(Promise.all(deliveries.map((delivery) => delivery.acknowledge())), "the acknowledgments");
    await setting.statusUntil("bob", (status) => status.backlog === 0n);
    // Acknowledging a retired token again is accepted too.
    assert.deepEqual(await bob.acknowledge(deliveries.map((delivery) => delivery.token)), [undefined, undefined, undefined]);
  }));

test("reconnect-replay", () =>
  inSetting(async (setting) => {
    const alice = await setting.agent("alice");
    const bob = await setting.agent("bob");
    await alice.send({ to: "agent:bob", text: "item 1" });
    await alice.send({ to: "agent:bob", text: "item 2" });

    const first = bob.messages();
    const item1 = await nextDelivery(first);
    const item2 = await nextDelivery(first);
    assert.deepEqual([textOf(item1.item), textOf(item2.item)], ["item 1", "item 2"]);
    await item1.acknowledge();
    await setting.statusUntil("bob", (status) => status.backlog === 1n);
    await first.return();
    await setting.statusUntil("bob", (status) => !status.streamAttached);

    const second = bob.messages();
    const replayed = await nextDelivery(second);
    // Item 1 was acknowledged: the reopened stream starts at item 2, under its token.
    assert.equal(replayed.token, item2.token);
    assert.deepEqual(replayed.item, item2.item);
    await alice.send({ to: "agent:bob", text: "after the reconnect" });
    const after = await nextDelivery(second);
    assert.equal(textOf(after.item), "after the reconnect");
    assert.ok(![item1.token, item2.token].includes(after.token));
  }));

// --- collectives -------------------------------------------------------------------

test("gather-answers", () =>
  inSetting(async (setting) => {
    const [alice, bob, carol] = [await setting.agent("alice"), await setting.agent("bob"), await setting.agent("carol")];
    const [aliceStream, bobStream, carolStream] = [alice.messages(), bob.messages(), carol.messages()];

    const asked = await alice.send(gather("group:alice,bob,carol"));

    assert.ok(asked.operationId !== undefined);
    const requests = [requestOf(await nextItem(bobStream)), requestOf(await nextItem(carolStream))];
    for (const request of requests) {
      assert.deepEqual([request.op, request.id, request.from, request.to, request.question], [
        "gather",
        asked.operationId,
        "agent:alice",
        "agent:alice",
        QUESTION,
      ]);
      assert.deepEqual(request.requestedSchema, SCHEMA);
      assert.ok(request.deadlineAt > Date.now());
    }
    const bobAnswer = await bob.send({
      to: requests[0]!.to,
      collectiveResponse: { action: "accept", content: { slot: "mon" } },
    });
    const carolAnswer = await carol.send({ to: requests[1]!.to, collectiveResponse: { action: "decline" } });
    assert.equal(bobAnswer.operationId, asked.operationId);
    assert.equal(carolAnswer.operationId, asked.operationId);

    assert.deepEqual(await nextItem(aliceStream), {
      kind: "collectiveResult",
      op: "gather",
      id: asked.operationId,
      to: "group:alice,bob,carol",
      question: QUESTION,
      outcomes: [
        { member: "agent:bob", outcome: { kind: "answered", content: { slot: "mon" } } },
        { member: "agent:carol", outcome: { kind: "declined" } },
      ],
    });
  }));

test("all-gather-answers", () =>
  inSetting(async (setting) => {
    const group = "group:alice,bob,carol";
    const [alice, bob, carol] = [await setting.agent("alice"), await setting.agent("bob"), await setting.agent("carol")];
    const streams: Stream[] = [alice.messages(), bob.messages(), carol.messages()];

    const asked = await alice.send(gather(group, "all_gather"));

    assert.ok(asked.operationId !== undefined);
    const requests = [requestOf(await nextItem(streams[1]!)), requestOf(await nextItem(streams[2]!))];
    assert.deepEqual(requests[0], requests[1]);
    assert.deepEqual([requests[0]?.op, requests[0]?.id, requests[0]?.to], ["all_gather", asked.operationId, group]);
    await bob.send({ to: group, collectiveResponse: { action: "accept", content: { slot: "tue" } } });
    await carol.send({ to: group, collectiveResponse: { action: "accept", content: { slot: "mon" } } });

    const expected = {
      kind: "collectiveResult",
      op: "all_gather",
      id: asked.operationId,
      to: group,
      question: QUESTION,
      outcomes: [
        { member: "agent:bob", outcome: { kind: "answered", content: { slot: "tue" } } },
        { member: "agent:carol", outcome: { kind: "answered", content: { slot: "mon" } } },
      ],
    };
    // The asker and every member receive the same result (the answers are never items).
    const results = [];
    for (const stream of streams) {
      results.push(await nextItem(stream));
    }
    assert.deepEqual(results, [expected, expected, expected]);
  }));

// --- closed errors -----------------------------------------------------------------

test("send-error-reasons", () =>
  inSetting(async (setting) => {
    const alice = await setting.agent("alice");
    await setting.agent("bob");
    const cases: [MessageInput, string, string, string][] = [
      [
        { to: "agent:nobody", text: "hello" },
        "unknown-agent",
        "NOT_FOUND",
        "send failed: agent:nobody is not registered with the gateway",
      ],
      [
        { to: "bob", text: "hello" },
        "invalid-address",
        "INVALID_ARGUMENT",
        "send failed: the address must be agent:<name> or group:<name>,<name>,...",
      ],
      [
        { to: "agent:bob", text: "x".repeat(40_000) },
        "content-invalid",
        "INVALID_ARGUMENT",
        "send failed: the message is 40,112 bytes as canonical JSON; the limit is 32,768 bytes",
      ],
    ];
    for (const [input, reason, code, message] of cases) {
      const error = await rejection(alice.send(input), SendError);
      assert.deepEqual([error.reason, error.code, error.message], [reason, code, message]);
    }
    // Nothing was sent: bob's inbox is empty.
    assert.equal((await setting.management.agentStatus("bob")).backlog, 0n);
  }));

test("collective-error-kinds", () =>
  inSetting(async (setting) => {
    const alice = await setting.agent("alice");
    const bob = await setting.agent("bob");
    const bobStream = bob.messages();

    const noneOpen = await rejection(
      bob.send({ to: "agent:alice", collectiveResponse: { action: "decline" } }),
      CollectiveError,
    );
    assert.equal(noneOpen.kind, "request-none");
    assert.equal(noneOpen.reason, "request-none");
    assert.deepEqual(noneOpen.failure, { kind: "request-none" });
    assert.match(noneOpen.id, /^col_[A-Za-z0-9_-]{43}$/);

    const schema = await rejection(
      alice.send({
        to: "agent:bob",
        text: QUESTION,
        collective: { op: "gather", deadline: 60, requestedSchema: { type: "array" } },
      }),
      CollectiveError,
    );
    assert.equal(schema.kind, "schema-invalid");
    assert.deepEqual(schema.failure, {
      kind: "schema-invalid",
      detail: 'type: expected "object"; properties: expected an object',
    });

    const asked = await alice.send(gather("agent:bob"));
    const request = requestOf(await nextItem(bobStream));
    const answer = await rejection(
      bob.send({ to: request.to, collectiveResponse: { action: "accept", content: { slot: "sun" } } }),
      CollectiveError,
    );
    assert.equal(answer.kind, "answer-invalid");
    assert.equal(answer.id, asked.operationId);
    assert.deepEqual(answer.failure, {
      kind: "answer-invalid",
      fields: [{ field: "slot", reason: "invalid", detail: "enum: must be one of the allowed values" }],
    });
    // The request stays open after an invalid answer.
    const answered = await bob.send({
      to: request.to,
      collectiveResponse: { action: "accept", content: { slot: "tue" } },
    });
    assert.equal(answered.operationId, asked.operationId);
  }));

test("own-question", () =>
  inSetting(async (setting) => {
    const alice = await setting.agent("alice");
    const bob = await setting.agent("bob");
    const carol = await setting.agent("carol");
    const bobStream = bob.messages();
    const asked = await alice.send(gather("group:alice,bob,carol"));
    const request = requestOf(await nextItem(bobStream));

    // The asker answers in bob's conversation with it, where its own question is open.
    const own = await rejection(alice.send({ to: "agent:bob", collectiveResponse: { action: "decline" } }), CollectiveError);
    assert.equal(own.kind, "request-none");
    assert.deepEqual(own.failure, { kind: "request-none", ownQuestion: true });
    assert.equal(
      own.message,
      "reply failed: the question open in this conversation is your own; its members answer it, and their answers come to you as its result",
    );
    // Where alice asked nothing, no question is open, as before.
    const noneOpen = await rejection(carol.send({ to: "agent:bob", collectiveResponse: { action: "decline" } }), CollectiveError);
    assert.deepEqual(noneOpen.failure, { kind: "request-none" });
    // The refusal changed nothing: bob still answers.
    const answered = await bob.send({ to: request.to, collectiveResponse: { action: "decline" } });
    assert.equal(answered.operationId, asked.operationId);
  }));

test("oversized-message", () =>
  inSetting(async (setting) => {
    const alice = await setting.agent("alice");
    await setting.agent("bob");
    // Over the 1 MiB the gateway reads in one call: refused before it is sent.
    const error = await rejection(alice.send({ to: "agent:bob", text: "x".repeat(2_000_000) }), SendError);
    assert.deepEqual(
      [error.reason, error.message],
      [
        "content-invalid",
        "send failed: the message is 2,000,025 bytes, more than the gateway reads in one call; the limit is 32,768 bytes as canonical JSON",
      ],
    );
    // Its text can be no send either: reading it as message text fails the same way.
    const parsed = await rejection(alice.parseMessageText("agent:bob", "x".repeat(2_000_000)), SendError);
    assert.deepEqual(
      [parsed.reason, parsed.message],
      [
        "content-invalid",
        "send failed: the message is 2,000,015 bytes, more than the gateway reads in one call; the limit is 32,768 bytes as canonical JSON",
      ],
    );
    assert.equal((await setting.management.agentStatus("bob")).backlog, 0n);
  }));

test("listen-error-reason", () =>
  inSetting(async (setting) => {
    const alice = await setting.agent("alice");
    const bob = await setting.agent("bob");
    await alice.send({ to: "agent:bob", text: "the first stream is open" });
    const first = bob.messages();
    assert.equal(textOf(await nextItem(first)), "the first stream is open");

    const refused = await rejection(nextDelivery(bob.messages()), ListenError);

    assert.equal(refused.reason, "already-listening");
    assert.equal(refused.code, "FAILED_PRECONDITION");
    assert.equal(refused.message, "listen failed: already-listening");
    // The refused stream took nothing from the open one.
    await alice.send({ to: "agent:bob", text: "still listening" });
    assert.equal(textOf(await nextItem(first)), "still listening");
  }));

test("acknowledge-error-reason", () =>
  inSetting(async (setting) => {
    const alice = await setting.agent("alice");
    const bob = await setting.agent("bob");
    await alice.send({ to: "agent:bob", text: "to acknowledge" });
    const delivery = await nextDelivery(bob.messages());

    const results = await bob.acknowledge([delivery.token, "dlv_never_issued"]);

    assert.equal(results[0], undefined);
    assert.ok(results[1] instanceof DeliveryAcknowledgeError);
    assert.equal(results[1].reason, "unknown-delivery");
    assert.equal(results[1].message, "delivery acknowledgment failed: unknown-delivery");
    await setting.statusUntil("bob", (status) => status.backlog === 0n);
  }));

test("message-text-error", () =>
  inSetting(async (setting) => {
    const alice = await setting.agent("alice");
    // Plain text, even JSON-looking prose, is a message; a stated operation must fit its shape.
    assert.deepEqual(await alice.parseMessageText("agent:bob", '{"note": 1}'), {
      to: "agent:bob",
      text: '{"note": 1}',
    });
    const cases: [string, string, string][] = [
      [
        '{"gather": 1}',
        "gather",
        "gather: expected a string, actual 1; deadline: is missing; requestedSchema: is missing",
      ],
      ['{"action": "maybe"}', "answer", 'action: expected "accept" or "decline", actual "maybe"'],
    ];
    for (const [text, operation, detail] of cases) {
      const error = await rejection(alice.parseMessageText("agent:bob", text), MessageTextError);
      assert.deepEqual([error.operation, error.detail, error.reason], [operation, detail, "message-text-invalid"]);
      assert.equal(error.message, `${operation} not sent: ${detail}`);
    }
  }));

test("authentication-error", () =>
  inSetting(async (setting) => {
    // A token the gateway never issued: `connect` checks it and names the failure and the
    // address; the gateway's refusal is its cause.
    const address = setting.gateway.address;
    const refused = await rejection(connect(address, { token: "hat_never_issued" }), HarnessConnectError);
    assert.deepEqual(
      [refused.reason, refused.address, refused.message],
      ["authentication-failed", address, `connect failed: the gateway at ${address} does not know this agent token`],
    );
    const cause = refused.cause;
    assert.ok(cause instanceof AuthenticationError, `the cause is ${String(cause)}`);
    assert.deepEqual([cause.reason, cause.code, cause.message], [
      "unknown",
      "UNAUTHENTICATED",
      "authentication failed: the token is not known to this gateway",
    ]);

    // A token revoked while its endpoint is open: the next call fails with the reason.
    const alice = await setting.agent("alice");
    await setting.management.revokeAgentToken("alice");
    const revoked = await rejection(alice.send({ to: "agent:alice", text: "after the revoke" }), AuthenticationError);
    assert.deepEqual([revoked.reason, revoked.message], ["revoked", "authentication failed: the token was revoked"]);
  }));

test("connect-unreachable", async () => {
  // A port nothing listens on: the failure names the address and the cause.
  const address = `127.0.0.1:${await unusedPort()}`;
  const unreachable = await rejection(connect(address, { token: "hat_any", connectTimeoutMs: 2_000 }), HarnessConnectError);
  assert.deepEqual(
    [unreachable.reason, unreachable.address, unreachable.message],
    ["transport-failed", address, `connect failed: cannot reach ${address}: connection refused`],
  );
});

// --- idempotency -------------------------------------------------------------------

test("idempotent-send", () =>
  inSetting(async (setting) => {
    const alice = await setting.agent("alice");
    const bob = await setting.agent("bob");
    const bobStream = bob.messages();
    const question = gather("agent:bob");

    const first = await alice.send(question, { idempotencyKey: "review-day" });
    const again = await alice.send(question, { idempotencyKey: "review-day" });

    assert.ok(first.operationId !== undefined);
    assert.deepEqual(again, first);
    assert.equal(requestOf(await nextItem(bobStream)).id, first.operationId);
    // One send ran: the next item after the one request is a later marker.
    await alice.send({ to: "agent:bob", text: "marker" });
    assert.equal(textOf(await nextItem(bobStream)), "marker");

    const conflict = await rejection(
      alice.send({ to: "agent:bob", text: "another send under the same key" }, { idempotencyKey: "review-day" }),
      IdempotencyConflictError,
    );
    assert.deepEqual([conflict.reason, conflict.key, conflict.code], ["idempotency-conflict", "review-day", "ALREADY_EXISTS"]);
  }));

test("read-send", () =>
  inSetting(async (setting) => {
    const alice = await setting.agent("alice");
    const bob = await setting.agent("bob");
    const sent: MessageInput = { to: "agent:bob", text: "kept under a key" };
    const refused: MessageInput = { to: "agent:nobody", text: "refused under a key" };

    const result = await alice.send(sent, { idempotencyKey: "sent" });
    await rejection(alice.send(refused, { idempotencyKey: "refused" }), SendError);

    const delivered = messageOf(await nextItem(bob.messages()));
    const { records } = await setting.management.history("bob", "agent:alice");
    assert.deepEqual(
      records.map((record) => record.postId),
      [delivered.postId],
    );
    assert.deepEqual(await alice.readSend("sent"), {
      state: "returned",
      input: sent,
      outcome: { kind: "success", result },
    });
    const keptFailure = await alice.readSend("refused");
    assert.equal(keptFailure.state, "returned");
    assert.deepEqual(keptFailure.input, refused);
    assert.equal(keptFailure.outcome.kind, "failure");
    assert.ok(keptFailure.outcome.error instanceof SendError);
    assert.equal(keptFailure.outcome.error.reason, "unknown-agent");
    assert.deepEqual(await alice.readSend("never-used"), { state: "absent" });
  }));
