// Real agents for the tests: `handoff agent` processes with their embedded
// NATS server, built from this repository (or HANDOFF_BIN).

import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { TestContext } from "node:test";

/** The repository's root: the first directory above this file with a go.mod. */
function repoRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!existsSync(path.join(dir, "go.mod"))) {
    const up = path.dirname(dir);
    if (up === dir) throw new Error("no go.mod above the tests: set HANDOFF_BIN to a handoff binary");
    dir = up;
  }
  return dir;
}

/** hangGuard ends a test that hangs (ms): a guard, not a measure; the tests take seconds. */
export const hangGuard = 180_000;

let built: string | undefined;

/** handoffBinary is HANDOFF_BIN, or ./cmd/handoff built once per test process. */
export function handoffBinary(): string {
  if (process.env["HANDOFF_BIN"]) return process.env["HANDOFF_BIN"];
  if (!built) {
    const dir = mkdtempSync(path.join(tmpdir(), "handoff-ts-bin-"));
    const bin = path.join(dir, "handoff");
    execFileSync("go", ["build", "-o", bin, "./cmd/handoff"], { cwd: repoRoot(), stdio: "inherit" });
    process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
    built = bin;
  }
  return built;
}

export interface AgentOptions {
  group?: string;
  member: string;
  tasks?: string;
  statelessTasks?: string;
  /** Join this NATS server instead of running an embedded one. */
  nats?: string;
  token?: string;
  /** Listen on a Unix socket in the agent's directory. */
  unix?: boolean;
  extra?: string[];
}

/** Agent is a running `handoff agent`. */
export interface Agent {
  /** The worker API's address, as a Client takes it. */
  url: string;
  /** The NATS server the agent uses. */
  nats: string;
  dir: string;
  proc: ChildProcess;
  /** Lines the agent logged (JSON). */
  lines: Record<string, unknown>[];
  /** exited resolves to the exit code once the agent has exited. */
  exited: Promise<number | null>;
}

/**
 * startAgent starts an agent and waits until it serves its API (its log
 * names the address). The test kills it when it ends.
 */
export async function startAgent(t: TestContext, o: AgentOptions): Promise<Agent> {
  const dir = mkdtempSync(path.join(tmpdir(), `handoff-ts-${o.member}-`));
  const args = ["agent", "--group", o.group ?? "ts", "--member-id", o.member, "--data-dir", path.join(dir, "data"), "--log-format", "json"];
  args.push("--listen", o.unix ? `unix:${path.join(dir, "api.sock")}` : "127.0.0.1:0");
  if (o.nats) args.push("--nats", o.nats);
  else args.push("--embedded-nats-listen", "127.0.0.1:0");
  if (o.tasks) args.push("--tasks", o.tasks);
  if (o.statelessTasks) args.push("--stateless-tasks", o.statelessTasks);
  if (o.token) args.push("--api-token", o.token);
  args.push(...(o.extra ?? []));
  const proc = spawn(handoffBinary(), args, { stdio: ["ignore", "pipe", "pipe"] });
  const exited = new Promise<number | null>((resolve) => proc.on("exit", (code) => resolve(code)));
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
    await exited;
    rmSync(dir, { recursive: true, force: true });
  });
  const lines: Record<string, unknown>[] = [];
  let api = "";
  let nats = o.nats ?? "";
  const started = new Promise<void>((resolve, reject) => {
    const onLine = (line: string) => {
      let l: Record<string, unknown>;
      try {
        l = JSON.parse(line) as Record<string, unknown>;
      } catch {
        return;
      }
      lines.push(l);
      if (typeof l["url"] === "string" && String(l["message"]).startsWith("embedded NATS server started")) nats = l["url"];
      if (l["message"] === "agent started") {
        api = String(l["api"]);
        resolve();
      }
    };
    for (const s of [proc.stdout!, proc.stderr!]) {
      let buf = "";
      s.setEncoding("utf8");
      s.on("data", (chunk: string) => {
        buf += chunk;
        let i;
        while ((i = buf.indexOf("\n")) >= 0) {
          onLine(buf.slice(0, i));
          buf = buf.slice(i + 1);
        }
      });
    }
    void exited.then((code) => reject(new Error(`agent ${o.member} exited with ${code} while starting: ${JSON.stringify(lines.slice(-5))}`)));
  });
  await started;
  return { url: api.startsWith("unix:") ? api : `http://${api}`, nats, dir, proc, lines, exited };
}

/** until polls cond every 20 ms until it returns a value other than undefined or false, for at most ms. */
export async function until<T>(what: string, cond: () => T | undefined | false | Promise<T | undefined | false>, ms = 30_000): Promise<T> {
  const deadline = Date.now() + ms;
  let last: unknown;
  for (;;) {
    try {
      const v = await cond();
      if (v !== undefined && v !== false) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms${last ? ` (last error: ${String(last)})` : ""}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
