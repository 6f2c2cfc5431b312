// Generates src/gen/ from the repository's proto/ with buf and the local protoc-gen-es
// (buf.gen.yaml), or, with --check, generates into a temporary directory and fails when
// the committed src/gen/ differs from it (what `make check-generated` runs).
//
// Offline: both tools come from node_modules (`npm ci`); nothing is downloaded.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const generated = join(packageDir, "src", "gen");

/** The nearest node_modules/.bin holding protoc-gen-es (hoisted to the workspace root). */
function binDirectory() {
  for (let dir = packageDir; ; dir = dirname(dir)) {
    const bin = join(dir, "node_modules", ".bin");
    if (existsSync(join(bin, "protoc-gen-es")) && existsSync(join(bin, "buf"))) {
      return bin;
    }
    if (dirname(dir) === dir) {
      console.error("generate: buf and protoc-gen-es are not installed; run `npm ci` at the repository root");
      process.exit(2);
    }
  }
}

function bufGenerate(outputBase) {
  const bin = binDirectory();
  const args = ["generate", "--template", "buf.gen.yaml"];
  if (outputBase !== undefined) {
    args.push("--output", outputBase);
  }
  const result = spawnSync(join(bin, "buf"), args, {
    cwd: packageDir,
    stdio: "inherit",
    // buf.gen.yaml names the plugin `protoc-gen-es`: found on PATH, from node_modules.
    env: { ...process.env, PATH: `${bin}${delimiter}${process.env.PATH ?? ""}` },
  });
  if (result.status !== 0) {
    throw new Error(`buf generate failed (${result.error?.message ?? `status ${result.status}`})`);
  }
}

/** Every file under `root`, as paths relative to it, sorted. */
function files(root) {
  if (!existsSync(root)) {
    return [];
  }
  const found = [];
  const walk = (dir) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) {
        walk(path);
      } else {
        found.push(relative(root, path));
      }
    }
  };
  walk(root);
  return found.sort();
}

if (process.argv.includes("--check")) {
  const scratch = mkdtempSync(join(tmpdir(), "harness-node-gen-"));
  try {
    bufGenerate(scratch);
    const fresh = join(scratch, "src", "gen");
    const committed = files(generated);
    const expected = files(fresh);
    const problems = [];
    for (const path of expected) {
      if (!committed.includes(path)) {
        problems.push(`missing: src/gen/${path}`);
      } else if (!readFileSync(join(generated, path)).equals(readFileSync(join(fresh, path)))) {
        problems.push(`differs: src/gen/${path}`);
      }
    }
    for (const path of committed) {
      if (!expected.includes(path)) {
        problems.push(`not generated: src/gen/${path}`);
      }
    }
    if (problems.length > 0) {
      console.error(
        `clients/node/src/gen is not what proto/ generates; run \`npm run generate --workspace clients/node\`:\n  ${problems.join("\n  ")}`,
      );
      process.exitCode = 1;
    } else {
      console.log(`clients/node/src/gen: ${expected.length} files match proto/`);
    }
  } catch (error) {
    console.error(`generate: ${error.message}`);
    process.exitCode = 1;
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
} else {
  // Start from nothing, so a file whose proto is gone does not linger.
  rmSync(generated, { recursive: true, force: true });
  try {
    bufGenerate(undefined);
    console.log(`clients/node/src/gen: ${files(generated).length} files generated`);
  } catch (error) {
    console.error(`generate: ${error.message}`);
    process.exitCode = 1;
  }
}
