// Client against a real agent: every worker route, JSON and the binary form,
// TCP and a Unix socket, the token, the error classes and the timeouts.

import assert from "node:assert/strict";
import net from "node:net";
import { test } from "node:test";

import {
  ApiError,
  Client,
  Invalid,
  NotOwner,
  NotRevoked,
  TooLarge,
  Unauthorized,
  UnknownTask,
  Unreachable,
  type View,
} from "@handoffhq/client";

import { hangGuard, startAgent, until } from "./agent.js";

const token = "s3cret";

/** activeView waits until the agent shows every one of n tasks active. */
async function activeView(c: Client, n: number): Promise<View> {
  return until(`${n} active tasks`, async () => {
    const v = await c.assignment();
    return v.tasks.filter((t) => t.role === "active").length === n && v;
  });
}

for (const json of [false, true]) {
  test(`state routes, ${json ? "JSON" : "binary form"}`, { timeout: hangGuard }, async (t) => {
    const agent = await startAgent(t, { member: "m1", tasks: "s-0..1", statelessTasks: "l-0", token, extra: ["--require-worker=false"] });
    const c = new Client(agent.url, { token, json });
    t.after(() => c.close());
    const v = await activeView(c, 3);
    const s0 = v.tasks.find((t) => t.id === "s-0")!;
    assert.equal(s0.stateful, true);
    assert.equal(s0.checkpoint, undefined, "a task that never committed has no checkpoint");

    // Keys of any bytes: a slash, dots, a space, a percent sign, 0x00 and 0xff.
    const odd = Buffer.from([0x2e, 0x2e, 0x2f, 0x00, 0xff, 0x20, 0x25]);
    const res = await c.commit("s-0", {
      epoch: s0.epoch,
      checkpoint: Buffer.from([0, 0, 0, 0, 0, 0, 0, 7]),
      puts: [
        { key: "a", value: "1" },
        { key: "b", value: "" },
        { key: "c", value: Buffer.from([0, 255]) },
        { key: "p/1", value: "x" },
        { key: "p/2", value: "y" },
        { key: "p/3", value: "z" },
        { key: odd, value: "odd" },
      ],
    });
    assert.equal(res.task, "s-0");
    assert.equal(res.epoch, s0.epoch);
    assert.ok(res.seq > 0);

    assert.deepEqual(await c.get("s-0", "a"), Buffer.from("1"));
    assert.deepEqual(await c.get("s-0", "b"), Buffer.alloc(0), "an empty value is present");
    assert.equal(await c.get("s-0", "nope"), undefined, "an absent key is undefined");
    assert.deepEqual(await c.get("s-0", odd), Buffer.from("odd"));

    const vals = await c.getMany("s-0", ["c", "nope", "b", "a", odd, "a"]);
    assert.deepEqual(vals, [Buffer.from([0, 255]), undefined, Buffer.alloc(0), Buffer.from("1"), Buffer.from("odd"), Buffer.from("1")]);

    const all = await c.scan("s-0", { prefix: "p/" });
    assert.deepEqual(
      all.map((kv) => [kv.key.toString(), kv.value.toString()]),
      [
        ["p/1", "x"],
        ["p/2", "y"],
        ["p/3", "z"],
      ],
    );
    const page = await c.scanPage("s-0", { prefix: "p/", limit: 2 });
    assert.deepEqual(
      page.items.map((kv) => kv.key.toString()),
      ["p/1", "p/2"],
    );
    assert.ok(page.next, "a page with more after it has next");
    const rest = await c.scanPage("s-0", { prefix: "p/", start: page.next });
    assert.deepEqual(
      rest.items.map((kv) => kv.key.toString()),
      ["p/3"],
    );
    assert.equal(rest.next, undefined);
    assert.deepEqual(
      (await c.scan("s-0", { start: "b", limit: 2 })).map((kv) => kv.key.toString()),
      ["b", "c"],
    );

    // A delete, and an absent checkpoint keeps the previous one.
    await c.commit("s-0", { epoch: s0.epoch, deletes: ["a", odd] });
    assert.deepEqual(await c.getMany("s-0", ["a", odd]), [undefined, undefined]);
    const after = (await c.assignment()).tasks.find((t) => t.id === "s-0")!;
    assert.deepEqual(after.checkpoint, Buffer.from([0, 0, 0, 0, 0, 0, 0, 7]));
    assert.ok(after.seq! > res.seq);

    // The error codes as classes.
    await assert.rejects(c.commit("s-0", { epoch: s0.epoch + 1, puts: [{ key: "a", value: "2" }] }), NotOwner);
    await assert.rejects(c.commit("nope-1", { epoch: 1, puts: [{ key: "a", value: "2" }] }), UnknownTask);
    await assert.rejects(c.commit("l-0", { puts: [{ key: "a", value: "2" }] }), Invalid, "a stateless task has no state");
    await assert.rejects(c.commit("s-0", { epoch: s0.epoch, puts: [{ key: "", value: "2" }] }), Invalid);
    await assert.rejects(c.commit("s-0", { epoch: s0.epoch, puts: [{ key: "k".repeat(4097), value: "2" }] }), TooLarge);
    await assert.rejects(c.release("s-0", s0.epoch), NotRevoked);
    await assert.rejects(new Client(agent.url, { token: "wrong", json }).assignment(), Unauthorized);
    const e = await c.get("bad id!", "a").catch((err: unknown) => err);
    assert.ok(e instanceof ApiError && e.status === 400 && e.code === "invalid", `get of a bad task ID: ${String(e)}`);
  });
}

test("a long-poll answers when the view changes", { timeout: hangGuard }, async (t) => {
  const agent = await startAgent(t, { member: "m1", tasks: "s-0", extra: ["--require-worker=false"] });
  const c = new Client(agent.url);
  t.after(() => c.close());
  const v = await activeView(c, 1);
  const unchanged = await c.assignment(v.version, 200);
  assert.equal(unchanged.version, v.version, "with nothing new it answers the same view after the wait");
  const poll = c.assignment(v.version, 30_000);
  const leave = await c.leave();
  assert.ok(["leaving", "done"].includes(leave.state), `leave state ${leave.state}`);
  const changed = await poll;
  assert.ok(changed.version > v.version, `version ${changed.version} after ${v.version}`);
  assert.ok(["leaving", "done"].includes(changed.state));
  assert.ok(["leaving", "done"].includes((await c.leaveStatus()).state));
});

test("over a Unix socket", { timeout: hangGuard }, async (t) => {
  const agent = await startAgent(t, { member: "m1", tasks: "s-0", unix: true, token, extra: ["--require-worker=false"] });
  assert.ok(agent.url.startsWith("unix:"));
  const c = new Client(agent.url, { token });
  t.after(() => c.close());
  await c.ready();
  const v = await activeView(c, 1);
  const tv = v.tasks[0]!;
  await c.commit(tv.id, { epoch: tv.epoch, puts: [{ key: "k", value: "v" }], checkpoint: "cp" });
  assert.deepEqual(await c.get(tv.id, "k"), Buffer.from("v"));
  assert.deepEqual((await c.getMany(tv.id, ["k"]))[0], Buffer.from("v"));
  const g = await c.group();
  assert.equal(g.members[0]!.id, "m1");
  assert.deepEqual(g.tasks.map((t) => t.id), ["s-0"]);
});

test("a call to an agent that never answers gives up after its timeout", { timeout: hangGuard }, async (t) => {
  // A paused agent: the kernel accepts the connection, nothing answers.
  const held: net.Socket[] = [];
  const srv = net.createServer((s) => held.push(s));
  await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
  t.after(() => {
    for (const s of held) s.destroy();
    srv.close();
  });
  const port = (srv.address() as net.AddressInfo).port;
  const c = new Client(`http://127.0.0.1:${port}`, { callTimeout: 100 });
  t.after(() => c.close());
  for (const call of [() => c.commit("t-0", { epoch: 1 }), () => c.assignment(0, 100), () => c.get("t-0", "k")]) {
    const err = await call().catch((e: unknown) => e);
    assert.ok(err instanceof Unreachable && err.timedOut, `want a timed-out Unreachable, got ${String(err)}`);
  }
  // The caller's signal ends a call too, with its reason.
  const ac = new AbortController();
  const p = c.assignment(0, 30_000, { signal: ac.signal });
  const why = new Error("stopping");
  ac.abort(why);
  await assert.rejects(p, (err) => err === why);
});

test("a call to no agent fails as Unreachable at once", { timeout: hangGuard }, async () => {
  const srv = net.createServer();
  await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
  const port = (srv.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  const c = new Client(`http://127.0.0.1:${port}`);
  const err = await c.assignment().catch((e: unknown) => e);
  c.close();
  assert.ok(err instanceof Unreachable && !err.timedOut, `want a refused connection, got ${String(err)}`);
});

test("addresses the client refuses", () => {
  assert.throws(() => new Client("https://127.0.0.1:7070"), TypeError);
  assert.throws(() => new Client("http://127.0.0.1:7070/api"), TypeError);
  assert.throws(() => new Client("unix:"), TypeError);
});
