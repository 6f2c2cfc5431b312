// A Harness Gateway agent in Node, on `@harness-gateway/client`: it listens, answers every
// gather and all_gather request with an answer that fits the request's form, and
// acknowledges everything it receives.
//
//   HARNESS_ADDRESS=127.0.0.1:7770 HARNESS_TOKEN=hat_... node clients/examples/node_agent.mjs
//
// HARNESS_ANSWER (optional) is a JSON object of answer fields to use where the form has
// them (`{"slot": "tue"}`); every other field gets the first value that fits: a select's
// first option, a number's minimum (or 0), `true`, or a string within the field's length
// and format. It prints one JSON line per event on stdout (`listening`, `received`,
// `answered`, `refused`) and exits 0 on SIGTERM or SIGINT, 1 when the stream fails.
import { CollectiveError, connect } from "@harness-gateway/client";

const address = process.env.HARNESS_ADDRESS ?? "127.0.0.1:7770";
const token = process.env.HARNESS_TOKEN;
if (!token) {
  console.error("node_agent: set HARNESS_TOKEN to the agent's API token (harness agents register prints it)");
  process.exit(2);
}
const fixed = JSON.parse(process.env.HARNESS_ANSWER ?? "{}");

/** One JSON line on stdout. */
function log(event, fields = {}) {
  process.stdout.write(`${JSON.stringify({ event, ...fields })}\n`);
}

/** A string that fits `field`'s length and format. */
function text(field) {
  switch (field.format) {
    case "email":
      return "node-agent@example.com";
    case "uri":
      return "https://example.com/node-agent";
    case "date":
      return new Date().toISOString().slice(0, 10);
    case "date-time":
      return new Date().toISOString().replace(/\.\d{3}Z$/, "Z");
  }
  let value = "answered by the node agent";
  if (typeof field.maxLength === "number") {
    value = value.slice(0, field.maxLength);
  }
  if (typeof field.minLength === "number") {
    value = value.padEnd(field.minLength, ".");
  }
  return value;
}

/** The first value that fits one form field (collectives.md §6: the seven field shapes). */
function fit(field) {
  switch (field.type) {
    case "string":
      if (Array.isArray(field.enum)) {
        return field.enum[0];
      }
      if (Array.isArray(field.oneOf)) {
        return field.oneOf[0].const;
      }
      return text(field);
    case "number":
    case "integer": {
      const minimum = typeof field.minimum === "number" ? field.minimum : 0;
      const value = field.type === "integer" ? Math.ceil(minimum) : minimum;
      return typeof field.maximum === "number" ? Math.min(value, field.maximum) : value;
    }
    case "boolean":
      return true;
    case "array": {
      const items = field.items ?? {};
      const options = Array.isArray(items.enum) ? items.enum : (items.anyOf ?? []).map((option) => option.const);
      const count = Math.min(Math.max(field.minItems ?? 1, 1), options.length);
      return options.slice(0, count);
    }
    default:
      return undefined;
  }
}

/** An answer to `schema`: the fixed fields where the form has them, fitted values elsewhere. */
function answer(schema) {
  const content = {};
  for (const [name, field] of Object.entries(schema.properties ?? {})) {
    const value = name in fixed ? fixed[name] : fit(field);
    if (value !== undefined) {
      content[name] = value;
    }
  }
  return content;
}

let endpoint;
try {
  endpoint = await connect(address, { token });
} catch (error) {
  // `connect failed: ...` naming the address and why: unreachable, or the token refused.
  console.error(`node_agent: ${error.message}${error.cause ? ` (${error.cause.message})` : ""}`);
  process.exit(1);
}
let stopping = false;
const stop = () => {
  stopping = true;
  // Ends the `for await` below: the stream closes and pending acknowledgments settle.
  void endpoint.close();
};
process.once("SIGTERM", stop);
process.once("SIGINT", stop);
log("listening", { address });

try {
  for await (const delivery of endpoint.messages()) {
    const item = delivery.item;
    log("received", { kind: item.kind, token: delivery.token });
    if (item.kind === "collectiveRequest") {
      const content = answer(item.requestedSchema);
      try {
        // An answer goes to the conversation the request arrived in: `item.to`.
        await endpoint.send({ to: item.to, collectiveResponse: { action: "accept", content } });
        log("answered", { op: item.op, id: item.id, to: item.to, content });
      } catch (error) {
        if (!(error instanceof CollectiveError)) {
          throw error;
        }
        // Expired, already answered, or a form this agent could not fit: say so, go on.
        log("refused", { op: item.op, id: item.id, reason: error.reason, message: error.message });
      }
    }
    await delivery.acknowledge();
  }
} catch (error) {
  if (!stopping) {
    console.error(`node_agent: ${error.message}`);
    process.exitCode = 1;
  }
} finally {
  await endpoint.close();
}
