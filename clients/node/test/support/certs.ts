/**
 * Test certificates for the Node tests, made by the Python side's `tests/certs.py`
 * (`node:crypto` makes keys but cannot sign an X.509 certificate): a CA, a server
 * certificate for `127.0.0.1` and `localhost`, and a second CA nothing trusts, as PEM
 * files in a fresh directory. The interpreter is the repository's `.venv/bin/python`
 * (`make install` creates it, with `cryptography`), or `$HARNESS_PYTHON`.
 */

import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";

import { repositoryRoot } from "./gateway.js";

/** Milliseconds the certificate script may take. */
const PKI_TIMEOUT_MS = 30_000;

/** The PEM files `tests/certs.py`'s `write_pki` wrote, and the trusted CA's bytes. */
export interface Pki {
  readonly directory: string;
  /** The CA that signed `serverCert`. */
  readonly ca: Buffer;
  /** The CA nothing here trusts. */
  readonly otherCa: Buffer;
  readonly serverCert: string;
  readonly serverKey: string;
}

const WRITE_PKI = [
  "import sys",
  "from pathlib import Path",
  "sys.path.insert(0, sys.argv[1])",
  "from tests.certs import write_pki",
  "write_pki(Path(sys.argv[2]))",
].join("\n");

/** Write a fresh PKI into a new temporary directory (the caller removes it). */
export async function writePki(): Promise<Pki> {
  const root = repositoryRoot();
  const python = process.env.HARNESS_PYTHON ?? resolve(root, ".venv", "bin", "python");
  if (!existsSync(python)) {
    throw new Error(`${python} does not exist: run \`make install\`, or set HARNESS_PYTHON`);
  }
  const directory = await mkdtemp(join(tmpdir(), "harness-node-pki-"));
  await promisify(execFile)(python, ["-c", WRITE_PKI, root, directory], { timeout: PKI_TIMEOUT_MS });
  return {
    directory,
    ca: await readFile(join(directory, "ca.pem")),
    otherCa: await readFile(join(directory, "other-ca.pem")),
    serverCert: join(directory, "server-cert.pem"),
    serverKey: join(directory, "server-key.pem"),
  };
}
