/**
 * One `messages()` iterator across a gateway restart (beyond the shared scenarios): it
 * reconnects on its own, the acknowledged item never returns, and the unacknowledged one,
 * replayed under its token, is skipped because this iterator already yielded it.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { connect, connectManagement } from "@harness-gateway/client";
import type { Endpoint, ManagementClient } from "@harness-gateway/client";

import { GatewayProcess } from "./support/gateway.js";
import { inSetting, nextDelivery, within } from "./support/setting.js";

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

    // Keyless sends are not retried: wait until the gateway answers, as a caller would.
    for (let attempt = 0; ; attempt++) {
      try {
        await alice.send({ to: "agent:bob", text: "three" });
        break;
      } catch (error) {
        assert.ok(attempt < 50, `the gateway did not come back: ${String(error)}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
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
