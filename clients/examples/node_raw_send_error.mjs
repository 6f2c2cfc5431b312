// Decode a Harness Gateway `SendError` with nothing but @grpc/grpc-js, @grpc/proto-loader
// and the repository's proto/ directory: the worked example for Node developers who call
// the gateway without `@harness-gateway/client`.
//
//   HARNESS_URL=127.0.0.1:7770 HARNESS_TOKEN=hat_... node clients/examples/node_raw_send_error.mjs [to]
//
// It sends "hello" to `to` (default `agent:nobody`, an agent that does not exist), expects
// the send to fail, and prints one JSON line such as
//   {"code":5,"status":"NOT_FOUND","reason":"unknown-agent","detail":"agent:nobody is ...",...}
//
// How a failure travels (proto/harness/v1/endpoint.proto and errors.proto say the same):
// the status's trailing metadata `grpc-status-details-bin` holds a serialized
// `google.rpc.Status` (proto/google/rpc/status.proto, vendored here); its `details` are
// `google.protobuf.Any` values, one of them a `harness.v1.SendError`, another a
// `google.rpc.ErrorInfo` (domain `harness.v1`).
import { fileURLToPath } from "node:url";

import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";

const PROTO_DIR = fileURLToPath(new URL("../../proto/", import.meta.url));
const DEADLINE_MS = 10_000;

// Load the service and the vendored google.rpc messages. `keepCase: true` keeps the proto
// field names: an Any reads `type_url` and `value`. Without it (proto-loader's default) the
// same fields are `typeUrl` and `value`, and every snake_case field becomes camelCase.
const definition = protoLoader.loadSync(
  ["harness/v1/endpoint.proto", "google/rpc/status.proto", "google/rpc/error_details.proto"],
  { includeDirs: [PROTO_DIR], keepCase: true, enums: String, longs: String, oneofs: true },
);

// proto-loader can decode any message type it loaded: `definition[<full name>].deserialize`.
// No protobufjs import and no other download is needed.
const decode = (typeName, bytes) => definition[typeName].deserialize(bytes);

const target = process.env.HARNESS_URL ?? "127.0.0.1:7770";
const token = process.env.HARNESS_TOKEN;
const to = process.argv[2] ?? "agent:nobody";
if (!token) {
  console.error("set HARNESS_TOKEN to an agent token (harness agents register <name>)");
  process.exit(2);
}

const { HarnessEndpointService } = grpc.loadPackageDefinition(definition).harness.v1;
const client = new HarnessEndpointService(
  target.replace(/^grpc:\/\//, ""),
  grpc.credentials.createInsecure(),
);
const metadata = new grpc.Metadata();
metadata.set("authorization", `Bearer ${token}`);

client.Send(
  { input: { message: { to, text: "hello" } } },
  metadata,
  { deadline: Date.now() + DEADLINE_MS },
  (error, response) => {
    client.close();
    if (!error) {
      console.error(`the send succeeded: ${JSON.stringify(response)}`);
      process.exit(1);
    }
    const failure = sendErrorOf(error);
    if (!failure) {
      console.error(`no harness.v1.SendError in the status: ${error.code} ${error.details}`);
      process.exit(1);
    }
    console.log(JSON.stringify(failure));
  },
);

// The SendError a failed call carries, as plain JSON, or undefined.
function sendErrorOf(error) {
  // Binary metadata (a key ending in -bin) arrives as Buffers, one per value.
  const [raw] = error.metadata.get("grpc-status-details-bin");
  if (!raw) return undefined;
  const status = decode("google.rpc.Status", raw);
  let sendError;
  let errorInfo;
  for (const any of status.details) {
    // type_url is `type.googleapis.com/<full message name>`; value is the message's bytes.
    const typeName = any.type_url.slice(any.type_url.lastIndexOf("/") + 1);
    if (typeName === "harness.v1.SendError") sendError = decode(typeName, any.value);
    if (typeName === "google.rpc.ErrorInfo") errorInfo = decode(typeName, any.value);
  }
  if (!sendError) return undefined;
  return {
    code: error.code, // the gRPC status code, e.g. 5
    status: grpc.status[error.code], // its name, e.g. NOT_FOUND
    // With `enums: String` the reason is the enum value's name; the contract's form is
    // kebab-case without the prefix: SEND_ERROR_REASON_UNKNOWN_AGENT -> unknown-agent.
    reason: sendError.reason.replace(/^SEND_ERROR_REASON_/, "").toLowerCase().replaceAll("_", "-"),
    detail: sendError.detail ?? null, // optional: replaces the reason's text when set
    message: status.message, // the model-facing text, "send failed: ..."
    errorInfo: errorInfo ? { domain: errorInfo.domain, reason: errorInfo.reason } : null,
  };
}
