/**
 * The package's public face is explicit: its runtime exports are exactly this list, and
 * every error class shares the one `HarnessError` base (a unit test; no socket).
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import * as client from "../src/index.js";

const EXPORTS = [
  "ACKNOWLEDGE_MAX_TOKENS",
  "ACKNOWLEDGE_TIMEOUT_MS",
  "ACK_BATCH_DELAY_MS",
  "ACK_BATCH_MAX",
  "AuthenticationError",
  "CollectiveError",
  "DEFAULT_CONNECT_TIMEOUT_MS",
  "DeliveryAcknowledgeError",
  "ERROR_DOMAIN",
  "Endpoint",
  "EndpointClosedError",
  "FirewallSendError",
  "GRPC_CODES",
  "HarnessConnectError",
  "HarnessError",
  "IdempotencyConflictError",
  "InvalidRequestError",
  "ListenError",
  "MANAGEMENT_TIMEOUT_MS",
  "ManagementClient",
  "ManagementError",
  "MessageTextError",
  "PermissionDeniedError",
  "READ_TIMEOUT_MS",
  "SEND_ERROR_REASONS",
  "SEND_TIMEOUT_MS",
  "STATUS_DETAILS_KEY",
  "STREAM_OPEN_HEADER",
  "SendError",
  "TransportError",
  "UnavailableError",
  "answerFieldClause",
  "collectiveFailureMessage",
  "connect",
  "connectManagement",
  "decodeError",
  "decodeStatusBytes",
  "parseAddress",
  "unreachableClause",
];

test("the runtime exports are exactly the pinned list", () => {
  assert.deepEqual(Object.keys(client).sort(), EXPORTS);
});

test("every error class extends HarnessError and is named as exported", () => {
  for (const [name, value] of Object.entries(client)) {
    if (typeof value === "function" && /^[A-Z]\w*Error$/.test(name) && name !== "HarnessError") {
      assert.ok(value.prototype instanceof client.HarnessError, `${name} does not extend HarnessError`);
    }
  }
  const error = new client.SendError("unknown-agent");
  assert.deepEqual([error.name, error.code, String(error)], [
    "SendError",
    "NOT_FOUND",
    "SendError: send failed: the address names an agent the gateway does not know",
  ]);
});

test("addresses: plain, grpc:// and grpcs://", () => {
  assert.deepEqual(client.parseAddress("127.0.0.1:7770"), { authority: "127.0.0.1:7770", tls: false });
  assert.deepEqual(client.parseAddress("grpc://gw.example:7770/"), { authority: "gw.example:7770", tls: false });
  assert.deepEqual(client.parseAddress("grpcs://gw.example:443"), { authority: "gw.example:443", tls: true });
});
