/**
 * One scenario's setting: a real gateway process, an operator's management client, and
 * the endpoints the test opened (closed, newest first, before the gateway stops). Every
 * wait is bounded by `BOUND_MS`.
 */

import { readFile } from "node:fs/promises";

import { connect, connectManagement } from "@harness-gateway/client";
import type { AgentStatus, Endpoint, InboundDelivery, InboundItem, ManagementClient } from "@harness-gateway/client";
import { GatewayProcess } from "./gateway.js";

/** What a setting uses of its gateway: a `GatewayProcess`, or one the test runner gave. */
interface ScenarioGateway {
  readonly address: string;
  readonly adminToken: string;
  readonly stderr: string;
  stop(): Promise<void>;
}

/** A gateway started by whoever runs the tests (a cluster behind a proxy, started by
 * tests/integration/cluster/test_cluster_scenarios_node.py) names a JSON file here:
 * `{"address", "adminToken", "tokens": {name: token}}`, the tokens of agents registered
 * before the test, which `agent(name)` connects as instead of registering them. */
const GIVEN_GATEWAY = "HARNESS_SCENARIO_GATEWAY";

/** Milliseconds any single wait may take before the test fails. */
export const BOUND_MS = 20_000;

export type Stream = AsyncGenerator<InboundDelivery, void, undefined>;

/** `promise`, or a rejection naming `what` once `BOUND_MS` passed. */
export async function within<T>(promise: Promise<T>, what: string, ms = BOUND_MS): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what}: nothing within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** Poll `check` (every 25 ms) until it holds; fails naming `what` once `BOUND_MS` passed. */
export async function eventually(check: () => boolean | Promise<boolean>, what: string, ms = BOUND_MS): Promise<void> {
  const giveUpAt = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > giveUpAt) {
      throw new Error(`${what}: not within ${ms} ms`);
    }
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** The next delivery of `stream`; fails when the stream ends or nothing comes in time. */
export async function nextDelivery(stream: Stream): Promise<InboundDelivery> {
  const next = await within(stream.next(), "the next delivery");
  if (next.done === true) {
    throw new Error("the stream ended");
  }
  return next.value;
}

/** The next item, acknowledged (so no later stream sees it again). */
export async function nextItem(stream: Stream): Promise<InboundItem> {
  const delivery = await nextDelivery(stream);
  await within(delivery.acknowledge(), "the acknowledgment");
  return delivery.item;
}

export class Setting {
  private readonly opened: (Endpoint | ManagementClient)[] = [];

  private constructor(
    readonly gateway: ScenarioGateway,
    readonly management: ManagementClient,
    private readonly tokens: ReadonlyMap<string, string>,
  ) {}

  static async start(): Promise<Setting> {
    const given = process.env[GIVEN_GATEWAY];
    let gateway: ScenarioGateway;
    let tokens = new Map<string, string>();
    if (given === undefined) {
      gateway = await GatewayProcess.start();
    } else {
      const file = JSON.parse(await readFile(given, "utf8")) as {
        address: string;
        adminToken: string;
        tokens: Record<string, string>;
      };
      // The runner started this gateway and stops it; its log is the runner's.
      gateway = { address: file.address, adminToken: file.adminToken, stderr: "", stop: async () => {} };
      tokens = new Map(Object.entries(file.tokens));
    }
    try {
      const management = await connectManagement(gateway.address, { adminToken: gateway.adminToken });
      return new Setting(gateway, management, tokens);
    } catch (error) {
      await gateway.stop();
      throw error;
    }
  }

  /** Register `name` and connect as it with the token registration returned (or the
   * token of `name` registered before the test, on a given gateway). */
  async agent(name: string): Promise<Endpoint> {
    const token = this.tokens.get(name) ?? (await this.management.registerAgent(name)).token;
    const endpoint = await connect(this.gateway.address, { token });
    this.opened.push(endpoint);
    return endpoint;
  }

  /** The agent's status once `check` accepts it, as the operator reads it (polled). */
  async statusUntil(name: string, check: (status: AgentStatus) => boolean): Promise<AgentStatus> {
    const giveUpAt = Date.now() + BOUND_MS;
    for (;;) {
      const status = await this.management.agentStatus(name);
      if (check(status)) {
        return status;
      }
      if (Date.now() > giveUpAt) {
        throw new Error(`agent ${name}: status never matched; last ${JSON.stringify(status, bigintJson)}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }

  /** Close what the test opened (which ends its streams), then stop the gateway. */
  async close(): Promise<void> {
    try {
      for (const client of this.opened.reverse()) {
        await client.close();
      }
      await this.management.close();
    } finally {
      await this.gateway.stop();
    }
  }
}

function bigintJson(_key: string, value: unknown): unknown {
  return typeof value === "bigint" ? value.toString() : value;
}

/** Run `body` in a fresh setting, closed however the body ends. */
export async function inSetting(body: (setting: Setting) => Promise<void>): Promise<void> {
  const setting = await Setting.start();
  try {
    await body(setting);
  } catch (error) {
    // The gateway's own account of what happened, next to the failure.
    throw new Error(`${(error as Error).stack ?? String(error)}\n--- gateway stderr (tail) ---\n${setting.gateway.stderr.split("\n").slice(-40).join("\n")}`, { cause: error });
  } finally {
    await setting.close();
  }
}
