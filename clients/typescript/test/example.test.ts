// The example worker (examples/dist/counter.js, as committed) against real
// agents: it counts every input message exactly once across a scale-up, the
// tasks moved to the newcomer start on the input its worker prepared while
// learning them, and SIGTERM stops it with its final commits and status 0.

import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { test, type TestContext } from "node:test";

import { Client } from "@handoffhq/client";

import { Nats, ensureStream } from "../examples/nats.js";
import { hangGuard, startAgent, until, type Agent } from "./agent.js";

const group = "tsx";
const tasks = ["t-0", "t-1", "t-2", "t-3"];
const keys = ["apple", "banana", "a/b c%", "cherry"];
const counter = fileURLToPath(new URL("../../examples/dist/counter.js", import.meta.url));

interface Worker {
  proc: ChildProcess;
  log: string[];
  exited: Promise<number | null>;
}

function startWorker(t: TestContext, agent: Agent): Worker {
  const proc = spawn(process.execPath, [counter], {
    env: { ...process.env, SIDECAR_URL: agent.url, NATS_URL: agent.nats, HANDOFF_GROUP: group },
    stdio: ["ignore", "ignore", "pipe"],
  });
  const w: Worker = { proc, log: [], exited: new Promise((resolve) => proc.on("exit", (code) => resolve(code))) };
  let buf = "";
  proc.stderr!.setEncoding("utf8");
  proc.stderr!.on("data", (chunk: string) => {
    buf += chunk;
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      w.log.push(buf.slice(0, i));
      buf = buf.slice(i + 1);
    }
  });
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
    await w.exited;
  });
  return w;
}

/** Input publishes the job's input and remembers what it published. */
class Input {
  readonly published = new Map<string, { seq: number; key: string }[]>(tasks.map((id) => [id, []]));
  constructor(readonly nc: Nats) {}

  async publish(rounds: number): Promise<void> {
    for (let r = 0; r < rounds; r++) {
      for (const id of tasks) {
        const key = keys[(r + id.length + Number(id.slice(2))) % keys.length]!;
        const ack = JSON.parse((await this.nc.request(`input.${group}.${id}`, key)).data.toString()) as { seq?: number; error?: unknown };
        assert.ok(ack.seq, `publish: ${JSON.stringify(ack)}`);
        this.published.get(id)!.push({ seq: ack.seq, key });
      }
    }
  }

  /** counts of task's input: every key with its occurrences. */
  counts(id: string): Map<string, number> {
    const m = new Map<string, number>();
    for (const { key } of this.published.get(id)!) m.set(key, (m.get(key) ?? 0) + 1);
    return m;
  }

  last(id: string): number {
    return this.published.get(id)!.at(-1)!.seq;
  }
}

/** owner finds the agent whose view shows task active, and its view of it. */
async function owner(clients: Client[], id: string) {
  for (const c of clients) {
    const tv = (await c.assignment()).tasks.find((tv) => tv.id === id && tv.role === "active");
    if (tv) return { c, tv };
  }
  return undefined;
}

/** caughtUp reports whether every task's checkpoint is its last input message and its counts are exact. */
async function caughtUp(clients: Client[], input: Input): Promise<boolean> {
  for (const id of tasks) {
    const o = await owner(clients, id);
    if (!o || !o.tv.checkpoint || Number(o.tv.checkpoint.readBigUInt64BE()) !== input.last(id)) return false;
    const want = input.counts(id);
    const got = await o.c.getMany(id, [...want.keys()]);
    [...want.values()].forEach((n, i) => assert.equal(got[i]?.toString(), String(n), `task ${id} key ${[...want.keys()][i]}`));
  }
  return true;
}

test("the example counts exactly once across a scale-up, starts on prepared input, exits 0 on SIGTERM", { timeout: hangGuard }, async (t) => {
  const opts = { group, tasks: "t-0..3" };
  const agentA = await startAgent(t, { member: "a", ...opts });
  const nc = await Nats.connect(agentA.nats);
  t.after(() => nc.close());
  await ensureStream(nc, `INPUT_${group}`, [`input.${group}.>`]);
  const input = new Input(nc);
  const ca = new Client(agentA.url);
  t.after(() => ca.close());

  const wa = startWorker(t, agentA);
  await input.publish(20);
  await until("a counts its input", () => caughtUp([ca], input));

  const agentB = await startAgent(t, { member: "b", nats: agentA.nats, ...opts });
  const cb = new Client(agentB.url);
  t.after(() => cb.close());
  const wb = startWorker(t, agentB);
  // Two tasks move to b. Its worker prepares their input while b learns
  // them and starts on it: without the agent's hint of the learner's
  // checkpoint, the prepared input starts after the task's last input
  // message, which a's final checkpoint is (the input is idle), so it starts
  // at or before the task's start, not at the stream's end past it.
  const starts = await until("two tasks start on b", () => {
    const s = wb.log.filter((l) => / info task starts/.test(l));
    return s.length >= 2 && s;
  }).catch((err: Error) => assert.fail(`${err.message}; b's worker logged:\n${wb.log.join("\n")}`));
  assert.equal(starts.length, 2, starts.join("\n"));
  const field = (l: string, k: string) => l.match(new RegExp(` ${k}=(\\S+)`))?.[1];
  for (const l of starts) {
    assert.match(l, /task starts on its prepared input/, `b's worker logged:\n${wb.log.join("\n")}`);
    const task = field(l, "task")!;
    const prepared = wb.log.filter((p) => / info input prepared/.test(p) && field(p, "task") === task).at(-1);
    assert.ok(prepared, `b's worker logged no preparation of ${task}:\n${wb.log.join("\n")}`);
    assert.ok(Number(field(prepared, "from")) <= Number(field(l, "from")), `the prepared input of ${task} starts at or before the task:\n${prepared}\n${l}`);
  }
  await input.publish(20);
  await until("both count every message exactly once", () => caughtUp([ca, cb], input));
  for (const w of [wa, wb]) w.proc.kill("SIGTERM");
  assert.equal(await wa.exited, 0, `a's worker exits 0 on SIGTERM:\n${wa.log.join("\n")}`);
  assert.equal(await wb.exited, 0, `b's worker exits 0 on SIGTERM:\n${wb.log.join("\n")}`);
  assert.ok(await caughtUp([ca, cb], input), "the counts are still exact after the workers stopped");
});
