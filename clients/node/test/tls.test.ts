/**
 * The client over TLS (`connect(address, {token, tls})`, transport.ts) against a real
 * gateway serving `--tls-cert/--tls-key` with a CA made for the test (support/certs.ts).
 *
 * A client that trusts the CA sends and receives. One that does not (another CA, or the
 * system's roots) fails `connect` with `HarnessConnectError` `transport-failed`, whose
 * `cause` is a `TransportError`: `INTERNAL`, the handshake's "unable to verify the first
 * certificate" (`@connectrpc/connect-node` reports a refused certificate so), with Node's
 * `UNABLE_TO_VERIFY_LEAF_SIGNATURE` further down the cause chain. A plaintext client on the
 * TLS port fails the same way, with a `TransportError` that is not a certificate refusal.
 */

import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import { after, before, test } from "node:test";

import { HarnessConnectError, TransportError, connect, connectManagement } from "@harness-gateway/client";
import type { ChannelOptions, Endpoint, ManagementClient } from "@harness-gateway/client";

import { writePki } from "./support/certs.js";
import type { Pki } from "./support/certs.js";
import { GatewayProcess } from "./support/gateway.js";
import { nextItem, within } from "./support/setting.js";

/** Node's code for a server certificate no trusted root signed. */
const UNTRUSTED = "UNABLE_TO_VERIFY_LEAF_SIGNATURE";

let pki: Pki | undefined;
let gateway: GatewayProcess | undefined;
let admin: ManagementClient | undefined;
const opened: Endpoint[] = [];
let agents = 0;

before(async () => {
  pki = await writePki();
  gateway = await GatewayProcess.start({ args: ["--tls-cert", pki.serverCert, "--tls-key", pki.serverKey] });
  admin = await connectManagement(gateway.address, { adminToken: gateway.adminToken, tls: { ca: pki.ca } });
});

after(async () => {
  try {
    for (const endpoint of opened.reverse()) {
      await endpoint.close();
    }
    await admin?.close();
  } finally {
    await gateway?.stop();
    if (pki !== undefined) {
      await rm(pki.directory, { recursive: true, force: true });
    }
  }
});

function setting(): { readonly pki: Pki; readonly gateway: GatewayProcess; readonly admin: ManagementClient } {
  assert.ok(pki !== undefined && gateway !== undefined && admin !== undefined, "the TLS gateway did not start");
  return { pki, gateway, admin };
}

/** A freshly registered agent's token. */
async function newToken(): Promise<string> {
  agents += 1;
  return (await setting().admin.registerAgent(`agent-${agents}`)).token;
}

/** `127.0.0.1:PORT` as `grpcs://localhost:PORT` (the certificate names both). */
function grpcsLocalhost(address: string): string {
  return `grpcs://localhost:${address.slice(address.lastIndexOf(":") + 1)}`;
}

/** The `code` of every error along `error`'s cause chain. */
function causeCodes(error: unknown): unknown[] {
  const codes: unknown[] = [];
  for (let at: unknown = error; at instanceof Error; at = at.cause) {
    codes.push((at as { code?: unknown }).code);
  }
  return codes;
}

/** `connect`'s rejection, which must be `HarnessConnectError` `transport-failed` caused by
 * a `TransportError` (the call failed below the API); returns that cause. */
async function refusedConnect(address: string, channel: ChannelOptions): Promise<TransportError> {
  const token = await newToken();
  let endpoint: Endpoint | undefined;
  try {
    endpoint = await within(connect(address, { token, ...channel }), "the refused connect");
  } catch (error) {
    assert.ok(error instanceof HarnessConnectError, `expected HarnessConnectError, got ${String(error)}`);
    assert.equal(error.reason, "transport-failed");
    // Named with the address dialled and the cause, as the Python client names it.
    assert.ok(error.address !== undefined && address.endsWith(error.address), `address ${String(error.address)}`);
    assert.ok(error.message.startsWith(`connect failed: cannot reach ${error.address}: `), error.message);
    assert.ok(error.cause instanceof TransportError, `expected a TransportError cause, got ${String(error.cause)}`);
    return error.cause;
  }
  await endpoint.close();
  assert.fail("connect succeeded with a client that must not reach the gateway");
}

test("a client that trusts the gateway's CA sends and receives over TLS", async () => {
  const { pki, gateway } = setting();
  const alice = await connect(gateway.address, { token: await newToken(), tls: { ca: pki.ca } });
  opened.push(alice);
  // `grpcs://` and a host name: verified against the certificate's DNS name.
  const bob = await connect(grpcsLocalhost(gateway.address), { token: await newToken(), tls: { ca: pki.ca } });
  opened.push(bob);
  const stream = bob.messages();

  const result = await alice.send({ to: "agent:agent-2", text: "hello over tls" });

  const item = await nextItem(stream);
  assert.equal(item.kind, "multicast");
  assert.deepEqual(item.message.content, [{ type: "text", text: "hello over tls" }]);
  assert.equal(item.message.sender, "agent:agent-1");
  assert.deepEqual(result.postIds, [item.message.postId]);
  await stream.return();
});

test("a client that trusts another CA fails connect with the refused certificate", async () => {
  const { pki, gateway } = setting();
  const cause = await refusedConnect(gateway.address, { tls: { ca: pki.otherCa } });
  assert.equal(cause.code, "INTERNAL");
  assert.equal(cause.reason, "internal");
  assert.match(cause.message, /unable to verify the first certificate/);
  assert.ok(causeCodes(cause).includes(UNTRUSTED), `expected ${UNTRUSTED} in ${JSON.stringify(causeCodes(cause))}`);
});

test("a grpcs:// address is TLS by itself, verified against the system's roots", async () => {
  const { gateway } = setting();
  // No `tls` option: the scheme alone asks for TLS, and no system root signed the test CA.
  const cause = await refusedConnect(grpcsLocalhost(gateway.address), {});
  assert.equal(cause.code, "INTERNAL");
  assert.ok(causeCodes(cause).includes(UNTRUSTED), `expected ${UNTRUSTED} in ${JSON.stringify(causeCodes(cause))}`);
});

test("a plaintext client on the TLS port fails connect with a typed error", async () => {
  const { gateway } = setting();
  const cause = await refusedConnect(gateway.address, { tls: false });
  assert.ok(!causeCodes(cause).includes(UNTRUSTED), "a plaintext client never sees a certificate");
});
