/**
 * One `messages()` iterator across a gateway restart (beyond the shared scenarios): it
 * reconnects on its own, the acknowledged item never returns, and the unacknowledged one,
 * replayed under its token, is skipped because this iterator already yielded it; the
 * connection state the agent sees; a keyed send retried across a restart posts once; a
 * revoked token ends the loop.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { AuthenticationError, connect, connectManagement } from "@harness-gateway/client";
import type { Endpoint, InboundItem, ManagementClient } from "@harness-gateway/client";

import { GatewayProcess } from "./support/gateway.js";
import { eventually, inSetting, nextDelivery, within } from "./support/setting.js";

test("an iterator survives a gateway restart and skips the replay it already yielded", async () => {
  let gateway = await GatewayProcess.start();
  const opened: (Endpoint | ManagementClient)[] = [];
  try {
    const admin = await connectManagement(gateway.address, { adminToken: gateway.adminToken });
    opened.push(admin);
    const alice = await connect(gateway.address, { token: (await admin.registerAgent("alice")).token });
    const bob = await connect(gateway.address, { token: (await admin.registerAgent("bob")).token });
    opened.push(alice, bob);
    await alice.send({ to: "agent:bob", text: "one" });
    await alice.send({ to: "agent:bob", text: "two" });
    const stream = bob.messages();
    const one = await nextDelivery(stream);
    const two = await nextDelivery(stream);
    await within(one.acknowledge(), "the acknowledgment");

    // Same data directory and port: the clients' connections drop and come back.
    const { address, dataDir } = gateway;
    await gateway.stop({ keepData: true });
    gateway = await GatewayProcess.start({ dataDir, listen: address });

    // Sent once the gateway is back: a keyless send is retried only while no connection can
    // be made, so nothing of it is lost or doubled by the restart.
    await alice.send({ to: "agent:bob", text: "three" });
    const next = await nextDelivery(stream);
    // "two" came back first (unacknowledged), under its token, and was skipped.
    assert.notEqual(next.token, two.token);
    assert.equal(next.item.kind === "multicast" && next.item.message.content[0]?.type === "text" && next.item.message.content[0].text, "three");
    await within(Promise.all([two.acknowledge(), next.acknowledge()]), "the acknowledgments");
    const status = await admin.agentStatus("bob");
    assert.equal(status.backlog, 0n);
  } finally {
    for (const client of opened.reverse()) {
      await client.close();
    }
    await gateway.stop();
  }
});

test("an agent that leaves its stream and opens another at once gets it, unary calls between", () =>
  // The reopen race of a cancelled stream (the gateway's handover wait): grpc-js may send
  // the new call before the old one's RST_STREAM, and the agent's unary calls in between
  // must not make the new stream fail `already-listening`.
  inSetting(async (setting) => {
    const alice = await setting.agent("alice");
    const bob = await setting.agent("bob");
    for (let round = 0; round < 20; round++) {
      await alice.send({ to: "agent:bob", text: `round ${round}` });
      const stream = bob.messages();
      const delivery = await nextDelivery(stream);
      await within(delivery.acknowledge(), "the acknowledgment");
      // Leaving the iterator cancels its call; the next one opens straight away.
      await stream.return(undefined);
      await bob.readSend(`never-used-${round}`);
      await bob.parseMessageText("agent:alice", "hello");
    }
    await alice.send({ to: "agent:bob", text: "last" });
    const last = await nextDelivery(bob.messages());
    assert.equal(last.item.kind === "multicast" && last.item.message.content[0]?.type === "text" && last.item.message.content[0].text, "last");
  }));

/** A gateway with alice and bob registered and connected, restartable on its port and data
 * directory; everything opened is closed, newest first, before the gateway stops. */
async function withRestartableGateway(
  body: (context: {
    readonly admin: ManagementClient;
    readonly alice: Endpoint;
    readonly bob: Endpoint;
    readonly stop: () => Promise<void>;
    readonly restart: () => Promise<void>;
  }) => Promise<void>,
): Promise<void> {
  let gateway = await GatewayProcess.start();
  const opened: (Endpoint | ManagementClient)[] = [];
  try {
    const admin = await connectManagement(gateway.address, { adminToken: gateway.adminToken });
    opened.push(admin);
    const alice = await connect(gateway.address, { token: (await admin.registerAgent("alice")).token });
    const bob = await connect(gateway.address, { token: (await admin.registerAgent("bob")).token });
    opened.push(alice, bob);
    const { address, dataDir } = gateway;
    await body({
      admin,
      alice,
      bob,
      stop: () => gateway.stop({ keepData: true }),
      restart: async () => {
        gateway = await GatewayProcess.start({ dataDir, listen: address });
      },
    });
  } catch (error) {
    throw new Error(`${(error as Error).stack ?? String(error)}\n--- gateway stderr (tail) ---\n${gateway.stderr.split("\n").slice(-40).join("\n")}`, { cause: error });
  } finally {
    for (const client of opened.reverse()) {
      await client.close();
    }
    await gateway.stop();
  }
}

function textOf(item: InboundItem): string | undefined {
  return item.kind === "multicast" && item.message.content[0]?.type === "text" ? item.message.content[0].text : undefined;
}

test("a messages() loop rides out a restart: ready, reconnecting, ready, and the item sent after it arrives", () =>
  withRestartableGateway(async ({ alice, bob, stop, restart }) => {
    const states: string[] = [bob.connectionState];
    bob.onConnectionState((state) => states.push(state));
    const stream = bob.messages();
    // No stream yet: connected, but not listening.
    assert.equal(bob.connectionState, "connecting");
    await alice.send({ to: "agent:bob", text: "before" });
    await within(nextDelivery(stream).then((delivery) => delivery.acknowledge()), "the first item");

    // The loop is waiting for its next item when the gateway goes away.
    const next = nextDelivery(stream);
    await stop();
    await eventually(() => bob.connectionState === "reconnecting", "bob reconnecting");
    await restart();
    // Keyless, but sent after the restart: nothing of it can be lost in the restart.
    await alice.send({ to: "agent:bob", text: "after" });
    const after = await next;
    assert.equal(textOf(after.item), "after");
    assert.equal(bob.connectionState, "ready");
    await within(after.acknowledge(), "the acknowledgment");
    await bob.close();
    assert.deepEqual(states, ["connecting", "ready", "reconnecting", "ready", "closed"]);
  }));

test("sends made while the gateway is down are retried, a keyed one under its key, and each posts once", () =>
  withRestartableGateway(async ({ admin, alice, bob, stop, restart }) => {
    await stop();
    // The gateway has exited: each attempt until it is back (a process start away) is
    // refused, so the post below is a retry's.
    const sent = alice.send({ to: "agent:bob", text: "keyed" }, { idempotencyKey: "across-the-restart" });
    // A keyless send is retried too while no connection can be made: it cannot have arrived.
    const keyless = alice.send({ to: "agent:bob", text: "keyless" });
    await restart();
    const result = await within(sent, "the keyed send");
    assert.equal(result.postIds.length, 1);
    await within(keyless, "the keyless send");

    const stream = bob.messages();
    const texts: (string | undefined)[] = [];
    for (let count = 0; count < 2; count++) {
      const delivery = await nextDelivery(stream);
      texts.push(textOf(delivery.item));
      await within(delivery.acknowledge(), "the acknowledgment");
    }
    assert.deepEqual(texts.sort(), ["keyed", "keyless"]);
    // Two items acknowledged leave nothing: the retries posted each send once.
    assert.equal((await admin.agentStatus("bob")).backlog, 0n);
    // The key keeps its outcome: sending again under it returns the same post.
    const again = await alice.send({ to: "agent:bob", text: "keyed" }, { idempotencyKey: "across-the-restart" });
    assert.deepEqual(again.postIds, result.postIds);
    assert.equal((await admin.agentStatus("bob")).backlog, 0n);
  }));

test("a messages() loop ends with AuthenticationError revoked when the token is revoked", () =>
  inSetting(async (setting) => {
    const alice = await setting.agent("alice");
    const bob = await setting.agent("bob");
    const stream = bob.messages();
    await alice.send({ to: "agent:bob", text: "hello" });
    await nextDelivery(stream);
    const ended = stream.next();
    await setting.management.revokeAgentToken("bob");
    await assert.rejects(
      within(ended, "the end of the loop"),
      (error: unknown) => error instanceof AuthenticationError && error.reason === "revoked",
    );
    // The loop is over, not reconnecting.
    assert.deepEqual(await stream.next(), { done: true, value: undefined });
  }));
