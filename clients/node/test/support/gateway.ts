/**
 * A real `harness-gateway serve` process for a test, the Node twin of
 * `gateway.testing.GatewayProcess`: 127.0.0.1:0, metrics off, a fresh data directory,
 * JSON logs; it is ready once it logs its `ready` line, which names the bound address and
 * the admin token file. `stop()` sends SIGTERM (SIGKILL past a bound) and removes the
 * data directory.
 *
 * The command is `$HARNESS_GATEWAY_BIN`, else the repository's `.venv/bin/harness-gateway`
 * (`make install` creates it).
 */

import { spawn } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

/** Milliseconds the process may take to log `ready` before it is killed. */
export const READY_TIMEOUT_MS = 30_000;
/** Milliseconds it may take to exit after SIGTERM before it is killed. */
export const STOP_TIMEOUT_MS = 30_000;
/** stderr lines kept for a failure's message. */
const LOG_LINES = 2_000;

/** The repository root: the nearest directory above this file holding `clients/scenarios.txt`. */
export function repositoryRoot(): string {
  for (let dir = dirname(fileURLToPath(import.meta.url)); ; dir = dirname(dir)) {
    if (existsSync(join(dir, "clients", "scenarios.txt"))) {
      return dir;
    }
    if (dirname(dir) === dir) {
      throw new Error("cannot find the repository root (clients/scenarios.txt) above the tests");
    }
  }
}

/** The `harness-gateway` command the tests run. */
export function gatewayCommand(): string {
  const command = process.env.HARNESS_GATEWAY_BIN ?? resolve(repositoryRoot(), ".venv", "bin", "harness-gateway");
  if (!existsSync(command)) {
    throw new Error(`${command} does not exist: run \`make install\`, or set HARNESS_GATEWAY_BIN`);
  }
  return command;
}

/** The caller's environment without `HARNESS_*` settings: the flags alone decide. */
function hermeticEnvironment(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("HARNESS_")));
}

/** A running gateway. */
export class GatewayProcess {
  private constructor(
    private readonly child: ChildProcess,
    private readonly exited: Promise<number | null>,
    /** The data directory. */
    readonly dataDir: string,
    /** `127.0.0.1:PORT`. */
    readonly address: string,
    /** The operator token. */
    readonly adminToken: string,
    /** The last stderr lines, kept for a failure's message. */
    private readonly log: string[],
  ) {}

  /** Start a gateway and wait (bounded) for its `ready` line: on a fresh data directory
   * and port 0 unless told otherwise (a restart passes the last ones); `args` are more
   * `serve` flags (`--tls-cert`, ...). */
  static async start(
    options: { readonly dataDir?: string; readonly listen?: string; readonly args?: readonly string[] } = {},
  ): Promise<GatewayProcess> {
    const dataDir = options.dataDir ?? (await mkdtemp(join(tmpdir(), "harness-node-")));
    const child = spawn(
      gatewayCommand(),
      [
        "serve",
        "--listen",
        options.listen ?? "127.0.0.1:0",
        "--metrics-listen",
        "off",
        "--log-format",
        "json",
        "--shutdown-grace",
        "2s",
        "--data-dir",
        dataDir,
        ...(options.args ?? []),
      ],
      { stdio: ["ignore", "ignore", "pipe"], env: hermeticEnvironment() },
    );
    const exited = new Promise<number | null>((resolveExit) => child.once("exit", (code) => resolveExit(code)));
    const log: string[] = [];
    const ready = new Promise<Record<string, unknown>>((resolveReady, rejectReady) => {
      const lines = createInterface({ input: child.stderr! });
      lines.on("line", (line) => {
        log.push(line);
        if (log.length > LOG_LINES) {
          log.shift();
        }
        const entry = readyEntry(line);
        if (entry !== undefined) {
          resolveReady(entry);
        }
      });
      child.once("error", rejectReady);
      void exited.then((code) =>
        rejectReady(new Error(`harness-gateway exited with status ${code} before it was ready`)),
      );
    });
    let timer: NodeJS.Timeout | undefined;
    try {
      const entry = await Promise.race([
        ready,
        new Promise<never>((_, rejectTimeout) => {
          timer = setTimeout(
            () => rejectTimeout(new Error(`harness-gateway logged no ready line within ${READY_TIMEOUT_MS} ms`)),
            READY_TIMEOUT_MS,
          );
        }),
      ]);
      const tokenFile = String(entry.admin_token_file);
      const adminToken = (await readFile(tokenFile, "utf8")).trim();
      return new GatewayProcess(child, exited, dataDir, String(entry.listen), adminToken, log);
    } catch (error) {
      child.kill("SIGKILL");
      await exited;
      if (options.dataDir === undefined) {
        await rm(dataDir, { recursive: true, force: true });
      }
      throw new Error(`${(error as Error).message}\n--- harness-gateway stderr ---\n${log.join("\n")}`);
    } finally {
      clearTimeout(timer);
    }
  }

  /** What the process wrote on stderr (the last lines). */
  get stderr(): string {
    return this.log.join("\n");
  }

  /** SIGTERM, then SIGKILL past `STOP_TIMEOUT_MS`; removes the data directory unless
   * `keepData` (for a restart on it). Idempotent. */
  async stop(options: { readonly keepData?: boolean } = {}): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      this.child.kill("SIGTERM");
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        this.exited,
        new Promise<void>((resolveKill) => {
          timer = setTimeout(() => {
            this.child.kill("SIGKILL");
            resolveKill();
          }, STOP_TIMEOUT_MS);
        }),
      ]);
      clearTimeout(timer);
      await this.exited;
    }
    if (options.keepData !== true) {
      await rm(this.dataDir, { recursive: true, force: true });
    }
  }
}

function readyEntry(line: string): Record<string, unknown> | undefined {
  try {
    const entry: unknown = JSON.parse(line);
    if (typeof entry === "object" && entry !== null && (entry as { msg?: unknown }).msg === "ready" && "listen" in entry) {
      return entry as Record<string, unknown>;
    }
  } catch {
    // Not a JSON log line.
  }
  return undefined;
}
