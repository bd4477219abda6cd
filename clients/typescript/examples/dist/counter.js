// A handoff worker in TypeScript on @handoffhq/client: the job of the Go
// counter (examples/counter) and of examples/python. For every stateful task
// active on its member, it counts how often each key (a message's body)
// occurs in the task's input and commits the counts with the input position
// reached as the checkpoint, exactly once across hand-offs.
//
// Input: task T's messages are subject input.<group>.T of JetStream stream
// INPUT_<group>. The checkpoint is the input stream sequence of the last
// message counted, 8 bytes big-endian, as the Go counter writes it: either
// worker can take a task over from the other.
//
// While a task is a learner or standby here it prepares its input: it
// connects to NATS and reads the task's newest input ahead into memory
// (from the checkpoint the agent says its copy has applied or, without one,
// from after the task's last input message), so that when
// the task becomes active it counts at once from its checkpoint, with no
// connection, consumer or first pull to wait for.
//
// Configuration, from the environment (what `handoff conformance` and the
// Kubernetes example give a worker):
//
//   SIDECAR_URL    the agent's API, default http://127.0.0.1:7070; unix:PATH for its Unix socket
//   SIDECAR_TOKEN  the agent's API token, if it has one
//   NATS_URL       the NATS server with the input stream, default nats://127.0.0.1:4222
//   HANDOFF_GROUP  the group, default demo
//
// Run it: node clients/typescript/examples/dist/counter.js
// Check it: handoff conformance -- node clients/typescript/examples/dist/counter.js
import { run, stderrLogger } from "@handoffhq/client";
import { Nats, Reader, ensureStream, lastSeq } from "./nats.js";
const batchMax = 100; // most messages per commit
const maxDelay = 50; // longest a read message waits for its commit, ms
const maxKeyBytes = 4096; // the agent's key limit: longer keys are skipped
const readAhead = 1000; // most messages an input buffers (a prepared one: the newest)
const natsURL = process.env["NATS_URL"] || "nats://127.0.0.1:4222";
const group = process.env["HANDOFF_GROUP"] || "demo";
const stream = `INPUT_${group}`;
const log = stderrLogger(process.env["LOG_LEVEL"] ?? "info");
const subjectOf = (task) => `input.${group}.${task}`;
/** Input is a task's input: a connection and a reader of the task's subject. */
class Input {
    nc;
    reader;
    constructor(nc, reader) {
        this.nc = nc;
        this.reader = reader;
    }
    async close() {
        await this.reader.close();
        this.nc.close();
    }
}
/** connect opens a connection to the input's server and makes sure the stream exists. */
async function connect() {
    const nc = await Nats.connect(natsURL);
    try {
        await ensureStream(nc, stream, [`input.${group}.>`]);
        return nc;
    }
    catch (err) {
        nc.close();
        throw err;
    }
}
/**
 * prepare readies a learner's or standby's input: it reads ahead from the
 * checkpoint its copy has applied (the agent's hint, at or before the one
 * the task will start from once active here) or, without one, from after
 * the task's last input message, keeping the newest messages. The owner's
 * checkpoint is its own task's last message counted, so once the owner has
 * counted what came before the preparation, the reader starts at or before
 * where the task starts here (the stream's end, past the other tasks' input,
 * would be after it). It takes a few round trips to NATS, so it does not
 * stop halfway when its signal aborts.
 */
async function prepare(info) {
    const nc = await connect();
    try {
        const from = info.checkpoint ? decodeCheckpoint(info.checkpoint) : await lastSeq(nc, stream, subjectOf(info.id));
        const reader = await Reader.open(nc, stream, subjectOf(info.id), from + 1, readAhead, true);
        log("info", "input prepared", { task: info.id, role: info.role, from: from + 1, hint: info.checkpoint ? "yes" : "no" });
        return new Input(nc, reader);
    }
    catch (err) {
        nc.close();
        throw err;
    }
}
/**
 * open returns a reader of task's input from the message after checkpoint
 * from: the prepared one when it holds everything after it, else a new one
 * (on the prepared connection, if any).
 */
async function open(task, from) {
    const p = task.prepared;
    p?.reader.keepAll(); // from now on it drops nothing, as covers needs
    if (p && (await p.reader.covers(from).catch(() => false))) {
        p.reader.skipThrough(from);
        log("info", "task starts on its prepared input", { task: task.id, epoch: task.epoch, from: from + 1, buffered: p.reader.buffered });
        return p;
    }
    await p?.reader.close();
    const nc = p?.nc ?? (await connect());
    try {
        const reader = await Reader.open(nc, stream, subjectOf(task.id), from + 1, readAhead);
        log("info", "task starts", { task: task.id, epoch: task.epoch, from: from + 1, prepared: p ? "connection" : "none" });
        return new Input(nc, reader);
    }
    catch (err) {
        nc.close();
        throw err;
    }
}
/** count is the handler: it counts a stateful task's input until the task is stopped, then makes its final commit. */
async function count(task) {
    if (!task.stateful) {
        // This job has no stateless work.
        await task.prepared?.close();
        await new Promise((resolve) => task.signal.addEventListener("abort", resolve, { once: true }));
        return;
    }
    let from;
    try {
        from = decodeCheckpoint(task.checkpoint);
    }
    catch (err) {
        await task.prepared?.close();
        throw err;
    }
    const input = await open(task, from);
    try {
        const reader = input.reader;
        // committed caches the counts this run committed; it starts empty,
        // because after a hand-off the counts are in the agent's state.
        const committed = new Map();
        let batch = new Batch();
        let first = true; // the first commit after a start does not wait for maxDelay
        while (!task.signal.aborted) {
            const wait = batch.n === 0 ? 1000 : Math.max(0, batch.since + maxDelay - Date.now());
            const msg = await reader.next(wait, task.signal);
            if (msg)
                batch.add(msg);
            const due = batch.n >= batchMax || (batch.n > 0 && (Date.now() - batch.since >= maxDelay || (first && reader.buffered === 0)));
            if (due) {
                await commit(task, committed, batch);
                batch = new Batch();
                first = false;
            }
        }
        // Stopped (revoked, moved or shutting down): the final commit.
        await commit(task, committed, batch);
    }
    finally {
        await input.close();
    }
}
/** Batch is the input read and not yet committed. */
class Batch {
    adds = new Map(); // key (its bytes as latin1) → occurrences
    n = 0;
    last = 0; // the input sequence of the batch's last message
    since = 0; // when its first message was read
    add(m) {
        if (this.n === 0)
            this.since = Date.now();
        this.n++;
        this.last = m.seq;
        if (m.data.length === 0 || m.data.length > maxKeyBytes) {
            log("warn", "skipping a message whose key is empty or too long", { seq: m.seq, bytes: m.data.length });
            return;
        }
        const key = m.data.toString("latin1");
        this.adds.set(key, (this.adds.get(key) ?? 0) + 1);
    }
}
/**
 * commit writes the new counts of the batch's keys and the batch's last
 * sequence as the checkpoint, in one commit. The counts it does not hold are
 * read in one batch get first; the cache is updated once the commit is
 * acknowledged. Task.commit retries while the agent is unreachable; a
 * refusal (NotOwner, Resume) ends the run and the runner takes it from there.
 */
async function commit(task, committed, b) {
    if (b.n === 0)
        return;
    const missing = [...b.adds.keys()].filter((k) => !committed.has(k));
    if (missing.length > 0) {
        const values = await task.getMany(missing.map((k) => Buffer.from(k, "latin1")));
        missing.forEach((k, i) => committed.set(k, values[i] ? Number(values[i].toString()) : 0));
    }
    const next = new Map();
    for (const [k, n] of b.adds)
        next.set(k, committed.get(k) + n);
    const puts = [...next].map(([k, n]) => ({ key: Buffer.from(k, "latin1"), value: String(n) }));
    await task.commit({ puts, checkpoint: encodeCheckpoint(b.last) });
    for (const [k, n] of next)
        committed.set(k, n);
}
function encodeCheckpoint(seq) {
    const b = Buffer.alloc(8);
    b.writeBigUInt64BE(BigInt(seq));
    return b;
}
function decodeCheckpoint(cp) {
    if (!cp || cp.length === 0)
        return 0;
    if (cp.length !== 8)
        throw new Error(`checkpoint is ${cp.length} bytes, want the 8-byte input sequence this worker writes`);
    return Number(cp.readBigUInt64BE());
}
log("info", "worker started", { sidecar: process.env["SIDECAR_URL"] || "http://127.0.0.1:7070", nats: natsURL, group });
await run(count, { prepare, log });
log("info", "worker stopped", {});
