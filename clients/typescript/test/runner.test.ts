// run against real agents: the lifecycle of the Go client's client.Run and
// the prepare hook.

import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";

import { Client, NotOwner, Resume, Stopped, run, type Event, type Task, type TaskInfo } from "@handoffhq/client";

import { hangGuard, startAgent, until } from "./agent.js";

/** pace waits ms or until signal aborts: the simulated job's pace between two commits. */
const pace = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });

/** Prepared is what the tests' prepare makes: it records whether it was closed. */
class Prepared {
  closed = 0;
  constructor(
    readonly member: string,
    readonly info: TaskInfo,
  ) {}
  close(): void {
    this.closed++;
  }
}

/** A start of a handler, as the test saw it. */
interface Start {
  member: string;
  task: string;
  epoch: number;
  checkpoint: string | undefined;
  prepared: Prepared | undefined;
}

/** A member: an agent and a runner with a job that counts its commits in key n, checkpoint = n. */
class Member {
  readonly events: Event[] = [];
  readonly starts: Start[] = [];
  readonly prepared: Prepared[] = [];
  /** Per task, the checkpoint of the last commit acknowledged here. */
  readonly last = new Map<string, string>();
  readonly finals = new Map<string, string>();
  readonly stop = new AbortController();
  done!: Promise<void>;
  client!: Client;

  constructor(
    readonly id: string,
    /**
     * prepare resolves only once its signal aborts: when the task became
     * active here (its value is handed over then) or left (it is closed).
     */
    readonly late = false,
  ) {}

  start(url: string): void {
    this.client = new Client(url);
    this.done = run<Prepared>((t) => this.job(t), {
      client: this.client,
      handleSignals: false,
      signal: this.stop.signal,
      restartBackoff: 1,
      onEvent: (ev) => this.events.push(ev),
      prepare: (info) => this.prepare(info),
    }).finally(() => this.client.close());
  }

  async prepare(info: TaskInfo): Promise<Prepared> {
    const p = new Prepared(this.id, info);
    this.prepared.push(p);
    if (this.late) {
      await new Promise((resolve) => info.signal.addEventListener("abort", resolve, { once: true }));
    }
    return p;
  }

  async job(task: Task<Prepared>): Promise<void> {
    const checkpoint = task.checkpoint?.toString();
    this.starts.push({ member: this.id, task: task.id, epoch: task.epoch, checkpoint, prepared: task.prepared });
    let n = Number(checkpoint ?? "0");
    const commit = async () => {
      n++;
      await task.commit({ puts: [{ key: "n", value: String(n) }], checkpoint: String(n) });
      this.last.set(task.id, String(n));
    };
    while (!task.signal.aborted) {
      await commit();
      await pace(20, task.signal);
    }
    assert.ok(task.signal.reason instanceof Stopped);
    await commit(); // the final commit, after the stop
    this.finals.set(task.id, String(n));
  }

  of(type: Event["type"], task?: string): Event[] {
    return this.events.filter((e) => e.type === type && (task === undefined || e.task === task));
  }
}

test("a member that leaves hands its tasks over; prepared values go to the handler or are closed", { timeout: hangGuard }, async (t) => {
  const opts = { tasks: "s-0..3", extra: ["--standbys", "1"] };
  const agentA = await startAgent(t, { member: "a", ...opts });
  const a = new Member("a");
  a.start(agentA.url);
  t.after(() => a.stop.abort());
  await until("a runs every task", () => new Set(a.starts.map((s) => s.task)).size === 4);

  const agentB = await startAgent(t, { member: "b", nats: agentA.nats, ...opts });
  const b = new Member("b", true);
  b.start(agentB.url);
  t.after(() => b.stop.abort());
  // Two tasks move to b: a learner there first, then active; a keeps a
  // standby of them, and b one of a's.
  await until("two tasks active on b", () => new Set(b.starts.map((s) => s.task)).size === 2 && b.starts.length === 2);
  const moved = b.starts.map((s) => s.task).sort();
  const kept = ["s-0", "s-1", "s-2", "s-3"].filter((id) => !moved.includes(id));
  await until("a prepared standbys of b's tasks", () => moved.every((id) => a.prepared.some((p) => p.info.id === id && p.info.role === "standby")));
  await until("b prepared standbys of a's tasks", () => kept.every((id) => b.prepared.some((p) => p.info.id === id && p.info.role === "standby")));

  for (const s of b.starts) {
    // Each came from a: its checkpoint is a's final commit, and b's
    // learner was prepared and handed to the handler.
    assert.equal(s.checkpoint, a.finals.get(s.task), `b starts ${s.task} at a's final commit`);
    assert.ok(s.prepared, `b's handler of ${s.task} got its preparation`);
    assert.equal(s.prepared.info.id, s.task);
    assert.equal(s.prepared.info.role, "learner");
    assert.equal(s.prepared.member, "b");
    assert.ok(s.prepared.info.signal.aborted, "the activation aborted the prepare still running, and took what it resolved to");
  }
  for (const id of moved) {
    const rel = a.of("release", id);
    assert.equal(rel.length, 1, `a released ${id} once`);
    const stop = a.of("stop", id)[0]!;
    assert.equal(stop.checkpoint?.toString(), a.finals.get(id), "the stop event has the final commit's checkpoint");
  }

  await b.client.leave();
  await b.done; // the agent says shutdown once b's tasks are handed over
  assert.equal(b.of("shutdown").length, 1);
  for (const id of moved) {
    assert.equal(b.of("release", id).length, 1, `b released ${id}`);
    assert.ok(b.finals.has(id), `b made the final commit of ${id}`);
  }
  await until("a runs b's tasks again", () => moved.every((id) => a.starts.some((s) => s.task === id && s.checkpoint === b.finals.get(id))));
  for (const id of moved) {
    const s = a.starts.find((s) => s.task === id && s.checkpoint === b.finals.get(id))!;
    const p = a.prepared.find((p) => p.info.id === id && p.info.role === "standby");
    assert.ok(s.prepared && s.prepared === p, `a's handler of ${id} got a's standby preparation`);
    assert.equal(s.prepared.closed, 0, "a handed preparation is the handler's: the runner does not close it");
  }
  // b's standbys left b without becoming active there: each was aborted and
  // closed once, though prepare resolved only after the abort.
  const standbys = b.prepared.filter((p) => p.info.role === "standby");
  assert.ok(standbys.length >= 2);
  for (const p of standbys) {
    assert.ok(p.info.signal.aborted, `b's preparation of ${p.info.id} was aborted`);
    assert.equal(p.closed, 1, `b's preparation of ${p.info.id} was closed once`);
  }
  for (const p of b.prepared.filter((p) => p.info.role === "learner")) assert.equal(p.closed, 0);
  assert.equal(b.of("discard").length, standbys.length);

  // Every commit of every task is exact: the state's n is its checkpoint.
  a.stop.abort();
  await a.done;
  const c = new Client(agentA.url);
  t.after(() => c.close());
  const v = await c.assignment();
  for (const tv of v.tasks.filter((tv) => tv.role === "active")) {
    assert.equal((await c.get(tv.id, "n"))?.toString(), tv.checkpoint?.toString(), `task ${tv.id}: n is its checkpoint`);
  }
});

test("restart after a failure, stop on not_owner, final commits when the run ends", { timeout: hangGuard }, async (t) => {
  const agent = await startAgent(t, { member: "m", tasks: "s-0..2" });
  const events: Event[] = [];
  const starts: { task: string; checkpoint: string | undefined }[] = [];
  let s2commits = 0;
  const stop = new AbortController();
  const done = run(
    async (task) => {
      starts.push({ task: task.id, checkpoint: task.checkpoint?.toString() });
      if (task.id === "s-0" && !task.checkpoint) {
        await task.commit({ puts: [{ key: "k", value: "1" }], checkpoint: "first" });
        throw new Error("boom");
      }
      if (task.id === "s-1") {
        // A commit at another epoch: the agent refuses it with not_owner.
        await task.client.commit(task.id, { epoch: task.epoch + 1, puts: [{ key: "k", value: "1" }] });
      }
      while (!task.signal.aborted) {
        await task.commit({ puts: [{ key: "k", value: "2" }], checkpoint: "later" });
        if (task.id === "s-2") s2commits++;
        await pace(10, task.signal);
      }
      await task.commit({ puts: [{ key: "k", value: "3" }], checkpoint: "final" });
    },
    { client: new Client(agent.url), handleSignals: false, signal: stop.signal, restartBackoff: 1, onEvent: (ev) => events.push(ev) },
  );
  await until("s-0 runs again", () => starts.filter((s) => s.task === "s-0").length === 2);
  await until("s-1 is refused", () => events.some((e) => e.type === "refused" && e.task === "s-1"));
  // Time for a wrong restart of s-1 (its backoff is 1 ms) to show: s-2
  // commits 20 more times meanwhile.
  const mark = s2commits;
  await until("s-2 goes on", () => s2commits >= mark + 20);
  stop.abort();
  await done;

  const of = (type: Event["type"], task: string) => events.filter((e) => e.type === type && e.task === task);
  assert.equal(starts.filter((s) => s.task === "s-0")[1]!.checkpoint, "first", "s-0 restarts from its last commit");
  const restart = of("restart", "s-0");
  assert.equal(restart.length, 1);
  assert.equal((restart[0]!.error as Error).message, "boom");
  assert.equal(restart[0]!.backoff, 1);

  assert.equal(of("start", "s-1").length, 1, "s-1 is left alone after not_owner");
  assert.equal(of("restart", "s-1").length, 0);
  assert.equal(of("refused", "s-1")[0]!.code, "not_owner");
  assert.ok(events.every((e) => e.type !== "release"), "nothing was revoked: nothing is released");

  const c = new Client(agent.url);
  t.after(() => c.close());
  const v = await c.assignment();
  for (const id of ["s-0", "s-2"]) {
    const stopEv = of("stop", id);
    assert.equal(stopEv.length, 1);
    assert.equal(stopEv[0]!.checkpoint?.toString(), "final");
    const tv = v.tasks.find((tv) => tv.id === id)!;
    assert.equal(tv.checkpoint?.toString(), "final", `${id}'s final commit landed`);
    assert.equal(tv.seq, stopEv[0]!.seq);
  }
  assert.ok(new NotOwner(409, "not_owner", "") instanceof Error);
});

test("after Resume, a read of the checkpoint that fails is retried: the restart holds the commit whose acknowledgement was lost", { timeout: hangGuard }, async (t) => {
  const agent = await startAgent(t, { member: "m", tasks: "r-0" });
  // A proxy before the agent that, when told, forwards a commit and answers
  // it with 409 resume (it landed, its acknowledgement is lost), then fails
  // the next read of the task's checkpoint (the one /assignment call with
  // after=0: the runner's own polls send no after, or the view's version).
  let loseAck = false;
  let failRead = false;
  let readsFailed = 0;
  const reply = (res: http.ServerResponse, status: number, code: string) => {
    res.writeHead(status, { "content-type": "application/json" });
    res.end(JSON.stringify({ code, message: "injected by the test's proxy" }));
  };
  const proxy = http.createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://proxy");
    if (failRead && url.pathname === "/assignment" && url.searchParams.get("after") === "0") {
      failRead = false;
      readsFailed++;
      reply(res, 503, "unavailable");
      return;
    }
    const lose = loseAck && req.method === "POST" && url.pathname.endsWith("/commit");
    if (lose) loseAck = false;
    const up = http.request(agent.url + (req.url ?? "/"), { method: req.method, headers: req.headers }, (ur) => {
      if (!lose) {
        res.writeHead(ur.statusCode ?? 502, ur.headers);
        ur.pipe(res);
        return;
      }
      ur.resume();
      ur.on("end", () => {
        assert.equal(ur.statusCode, 200, "the commit whose acknowledgement the proxy drops landed");
        failRead = true;
        reply(res, 409, "resume");
      });
    });
    up.on("error", (err) => res.destroy(err));
    req.pipe(up);
  });
  await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  t.after(() => {
    proxy.closeAllConnections();
    proxy.close();
  });

  const events: Event[] = [];
  const starts: (string | undefined)[] = [];
  const stop = new AbortController();
  const done = run(
    async (task) => {
      starts.push(task.checkpoint?.toString());
      if (starts.length === 1) {
        await task.commit({ puts: [{ key: "n", value: "1" }], checkpoint: "1" });
        loseAck = true;
        await task.commit({ puts: [{ key: "n", value: "2" }], checkpoint: "2" }); // throws Resume
      }
      await new Promise((resolve) => task.signal.addEventListener("abort", resolve, { once: true }));
    },
    { client: new Client(`http://127.0.0.1:${(proxy.address() as AddressInfo).port}`), handleSignals: false, signal: stop.signal, onEvent: (ev) => events.push(ev) },
  );
  await until("r-0 starts again", () => starts.length === 2);
  stop.abort();
  await done;

  const restarts = events.filter((e) => e.type === "restart");
  assert.equal(restarts.length, 1);
  assert.ok(restarts[0]!.error instanceof Resume, `the restart's error ${String(restarts[0]!.error)} is Resume`);
  assert.equal(readsFailed, 1, "the proxy failed the read of the checkpoint once");
  assert.deepEqual(starts, [undefined, "2"], "the restart starts from the agent's checkpoint, which holds the unacknowledged commit");
});
