/**
 * `HomeTransport` (src/transport.ts, cluster.md §4.2) over in-memory transports standing for
 * a Service and two replicas that send `harness-home` as cluster replicas do: calls follow
 * the hint, and fall back to the configured target when the home fails. No socket; the
 * cluster itself is tested where it runs (tests/ at the repository root).
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import type { Transport } from "@connectrpc/connect";

import { HarnessEndpointService } from "../src/gen/harness/v1/endpoint_pb.js";
import { HOME_HEADER, HomeTransport, homeChannelOptions } from "../src/transport.js";

/** What one in-memory gateway does on each call: the hint it sends, or the failure. */
interface Replica {
  readonly name: string;
  readonly calls: string[];
  hint: string | undefined;
  failWith: Code | undefined;
}

function replica(name: string, hint?: string): { replica: Replica; transport: Transport } {
  const state: Replica = { name, calls: [], hint, failWith: undefined };
  const answer = (method: string, responseHeader: Headers): void => {
    state.calls.push(method);
    if (state.failWith !== undefined) {
      throw new ConnectError(`${name} refused`, state.failWith);
    }
    if (state.hint !== undefined) {
      responseHeader.set(HOME_HEADER, state.hint);
    }
  };
  const transport = createRouterTransport(({ service }) => {
    service(HarnessEndpointService, {
      parseMessageText(_request, context) {
        answer("parse", context.responseHeader);
        return {};
      },
      async *messages(_request, context) {
        answer("messages", context.responseHeader);
        yield { delivery: { deliveryToken: `dlv_from_${name}` } };
        if (state.failWith === undefined && state.name !== "service") {
          // A home that goes away under an open stream.
          throw new ConnectError(`${name} went away`, Code.Unavailable);
        }
      },
    });
  });
  return { replica: state, transport };
}

function setting(): {
  readonly service: Replica;
  readonly home: Replica;
  readonly dialled: string[];
  readonly transport: HomeTransport;
  readonly client: ReturnType<typeof createClient<typeof HarnessEndpointService>>;
} {
  const service = replica("service", "replica-1.gw.example:7770");
  const home = replica("replica-1", "replica-1.gw.example:7770");
  const dialled: string[] = [];
  const transport = new HomeTransport(service.transport, (address) => {
    dialled.push(address);
    assert.equal(address, "replica-1.gw.example:7770");
    return home.transport;
  });
  return { service: service.replica, home: home.replica, dialled, transport, client: createClient(HarnessEndpointService, transport) };
}

const parse = { to: "agent:x", text: "" };

describe("HomeTransport", () => {
  test("calls go to the target until an answer names the home, then to the home, and back when it is unavailable", async () => {
    const { service, home, dialled, transport, client } = setting();
    assert.equal(transport.homeAddress, undefined);
    await client.parseMessageText(parse);
    assert.equal(transport.homeAddress, "replica-1.gw.example:7770");
    await client.parseMessageText(parse);
    await client.parseMessageText(parse);
    assert.deepEqual([service.calls.length, home.calls.length], [1, 2]);

    home.failWith = Code.Unavailable;
    await assert.rejects(client.parseMessageText(parse), (error: unknown) => ConnectError.from(error).code === Code.Unavailable);
    assert.equal(transport.homeAddress, undefined);
    // The next call goes through the target, whose answer names the home again.
    home.failWith = undefined;
    await client.parseMessageText(parse);
    assert.deepEqual([service.calls.length, home.calls.length], [2, 3]);
    assert.equal(transport.homeAddress, "replica-1.gw.example:7770");
    await client.parseMessageText(parse);
    assert.equal(home.calls.length, 4);
    // One transport per home address, reused.
    assert.deepEqual(dialled, ["replica-1.gw.example:7770"]);
  });

  test("a typed refusal from the home keeps it: the home answered", async () => {
    const { home, transport, client } = setting();
    await client.parseMessageText(parse);
    home.failWith = Code.Unauthenticated;
    await assert.rejects(client.parseMessageText(parse));
    assert.equal(transport.homeAddress, "replica-1.gw.example:7770");
  });

  test("a stream's headers name the home too, and a stream the home ends UNAVAILABLE drops it", async () => {
    const { service, home, transport, client } = setting();
    const tokens: string[] = [];
    for await (const response of client.messages({ takeover: false })) {
      tokens.push(response.delivery?.deliveryToken ?? "");
    }
    assert.equal(transport.homeAddress, "replica-1.gw.example:7770");
    await assert.rejects(
      (async () => {
        for await (const response of client.messages({ takeover: true })) {
          tokens.push(response.delivery?.deliveryToken ?? "");
        }
      })(),
      (error: unknown) => ConnectError.from(error).code === Code.Unavailable,
    );
    assert.deepEqual(tokens, ["dlv_from_service", "dlv_from_replica-1"]);
    assert.deepEqual([service.calls, home.calls], [["messages"], ["messages"]]);
    assert.equal(transport.homeAddress, undefined);
  });

  test("a hint that is not HOST:PORT is never followed", async () => {
    for (const hint of ["grpc://replica-1:7770", "replica-1", "replica 1:7770", "replica-1:7770/x", ""]) {
      const service = replica("service", hint);
      const transport = new HomeTransport(service.transport, () => assert.fail(`dialled ${hint}`));
      await createClient(HarnessEndpointService, transport).parseMessageText(parse);
      assert.equal(transport.homeAddress, undefined, hint);
    }
    const ipv6 = new HomeTransport(replica("service", "[fd00::1]:7770").transport, () => replica("home").transport);
    await createClient(HarnessEndpointService, ipv6).parseMessageText(parse);
    assert.equal(ipv6.homeAddress, "[fd00::1]:7770");
  });
});

describe("homeChannelOptions", () => {
  test("a home is dialled with the target's TLS, verified for its own name", () => {
    assert.deepEqual(homeChannelOptions("127.0.0.1:7770", {}), { tls: false });
    assert.deepEqual(homeChannelOptions("grpcs://gw.example:443", {}), { tls: true });
    assert.deepEqual(homeChannelOptions("gw.example:443", { tls: { ca: "CA", servername: "service.example" } }), {
      tls: { ca: "CA" },
    });
  });
});
