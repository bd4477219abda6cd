// Client calls one agent's worker API over HTTP: a TCP address or the
// agent's Unix socket, with its token, a timeout of its own on every call,
// and the binary form for the state routes.
import http from "node:http";
import { MediaBinary, MediaJSON, bytesOf, decodeScan, decodeValues, encodeCommit, encodeGet } from "./binary.js";
import { ApiError, Unreachable, apiError } from "./errors.js";
/**
 * How long a call may take (a long-poll: its wait plus this), in ms. A
 * paused agent accepts connections and never answers: without a bound of
 * its own a worker would hang with it (docs/api.md, Client-side timeouts).
 */
export const DefaultCallTimeout = 10_000;
/** The most keys an agent with its default limits takes in one batch get. */
export const MaxGetKeys = 10_000;
/** The agent's address when none is given and SIDECAR_URL is unset. */
export const DefaultURL = "http://127.0.0.1:7070";
/** The prefix of an address that names the agent's Unix socket. */
export const UnixPrefix = "unix:";
/**
 * Client calls one agent's API. It keeps connections alive and may be used
 * by many tasks at once; one Client per agent is enough. close() ends its
 * idle connections.
 */
export class Client {
    /** The address it calls: http://HOST:PORT, or unix:PATH. */
    url;
    token;
    callTimeout;
    json;
    target;
    agent;
    /**
     * A client of the agent at url: "http://127.0.0.1:7070", or
     * "unix:/run/handoff/api.sock" for an agent listening on a Unix socket
     * (its --listen unix:PATH), called as http://localhost.
     */
    constructor(url = DefaultURL, options = {}) {
        this.url = url.replace(/\/+$/, "");
        this.token = options.token ?? "";
        this.callTimeout = options.callTimeout ?? DefaultCallTimeout;
        this.json = options.json ?? false;
        if (this.url.startsWith(UnixPrefix)) {
            const socketPath = this.url.slice(UnixPrefix.length);
            if (!socketPath)
                throw new TypeError(`${url}: the socket path is empty: use unix:/path/to/api.sock`);
            this.target = { socketPath };
        }
        else {
            const u = new URL(this.url);
            if (u.protocol !== "http:")
                throw new TypeError(`${url}: the agent's address is http://HOST:PORT or unix:PATH`);
            if (u.pathname !== "/" && u.pathname !== "")
                throw new TypeError(`${url}: give the agent's address without a path`);
            this.target = { host: u.hostname.replace(/^\[(.*)\]$/, "$1"), port: Number(u.port || 80) };
        }
        this.agent = new http.Agent({ keepAlive: true, maxFreeSockets: 256 });
    }
    /**
     * A client of the agent named by the environment, as `handoff
     * conformance` and the Kubernetes example give it: SIDECAR_URL (default
     * http://127.0.0.1:7070) and SIDECAR_TOKEN.
     */
    static fromEnv(options = {}) {
        return new Client(process.env["SIDECAR_URL"] || DefaultURL, { token: process.env["SIDECAR_TOKEN"] ?? "", ...options });
    }
    /** close ends the client's idle connections; calls still open go on. */
    close() {
        this.agent.destroy();
    }
    /**
     * The member's view. With waitMs > 0 it long-polls: it answers as soon as
     * the view's version exceeds after, or with the current view once waitMs
     * (capped by the agent at 60 s) has passed. The call gives up waitMs plus
     * the call timeout after it began.
     */
    async assignment(after = 0, waitMs = 0, o = {}) {
        const query = waitMs > 0 ? { wait: `${Math.round(waitMs)}ms`, after: String(after) } : undefined;
        const a = await this.call({ method: "GET", path: "/assignment", query, timeout: waitMs + this.callTimeout, signal: o.signal });
        return parseView(this.decodeJSON(a, "GET /assignment"));
    }
    /**
     * Atomically applies puts, deletes and the new checkpoint to task's state.
     * Throws NotOwner when this member is not (or no longer) the task's active
     * owner or the epoch is stale, Resume when the agent holds a commit of the
     * task the worker was not told of.
     */
    async commit(task, req, o = {}) {
        let body;
        let media;
        if (this.json) {
            body = Buffer.from(JSON.stringify(commitJSON(req)));
            media = MediaJSON;
        }
        else {
            body = encodeCommit(req);
            media = MediaBinary;
        }
        const path = taskPath(task, "commit");
        const a = await this.call({ method: "POST", path, body, media, timeout: this.callTimeout, signal: o.signal });
        return this.decodeJSON(a, `POST ${path}`);
    }
    /**
     * Tells the agent the worker stopped revoked task and made its last
     * commit, so that the hand-off may proceed. epoch, when given (not 0), is
     * the ownership the worker stopped: the agent refuses (NotOwner) to
     * release the task at any other epoch.
     */
    async release(task, epoch = 0, o = {}) {
        const path = taskPath(task, "release");
        const query = epoch ? { epoch: String(epoch) } : undefined;
        const a = await this.call({ method: "POST", path, query, timeout: this.callTimeout, signal: o.signal });
        return this.decodeJSON(a, `POST ${path}`);
    }
    /** The value of key in task's state, or undefined when the key is absent. */
    async get(task, key, o = {}) {
        const path = `${taskPath(task, "state")}/${escapeKey(bytesOf(key))}`;
        try {
            const a = await this.call({ method: "GET", path, timeout: this.callTimeout, signal: o.signal });
            return a.body;
        }
        catch (err) {
            if (err instanceof ApiError && err.code === "not_found")
                return undefined;
            throw err;
        }
    }
    /**
     * The values of keys in task's state, in their order: undefined for an
     * absent key. The agent reads each request's keys at one point in time;
     * more than MaxGetKeys keys go in several requests, each read at its own.
     */
    async getMany(task, keys, o = {}) {
        const all = keys.map(bytesOf);
        const out = [];
        for (let i = 0; i < all.length; i += MaxGetKeys) {
            const chunk = all.slice(i, i + MaxGetKeys);
            const vals = await this.getChunk(task, chunk, o);
            if (vals.length !== chunk.length) {
                throw new Error(`get ${chunk.length} keys of task ${task}: the agent answered ${vals.length} values`);
            }
            out.push(...vals);
        }
        return out;
    }
    async getChunk(task, keys, o) {
        const path = taskPath(task, "get");
        if (this.json) {
            const body = Buffer.from(JSON.stringify({ keys: keys.map((k) => k.toString("base64")) }));
            const a = await this.call({ method: "POST", path, body, media: MediaJSON, timeout: this.callTimeout, signal: o.signal });
            const res = this.decodeJSON(a, `POST ${path}`);
            return res.values.map((v) => (v === null ? undefined : Buffer.from(v, "base64")));
        }
        const a = await this.call({
            method: "POST",
            path,
            body: encodeGet(keys),
            media: MediaBinary,
            accept: MediaBinary,
            timeout: this.callTimeout,
            signal: o.signal,
        });
        return decodeValues(this.binaryBody(a, `POST ${path}`));
    }
    /**
     * task's keys and values in key order, from o.start on, within o.prefix,
     * at most o.limit of them (all when absent). It reads as many pages as it
     * needs; scanPage reads one.
     */
    async scan(task, o = {}) {
        const out = [];
        let start = o.start;
        for (;;) {
            const limit = o.limit ? o.limit - out.length : undefined;
            const page = await this.scanPage(task, { prefix: o.prefix, start, limit, signal: o.signal });
            out.push(...page.items);
            if (!page.next || (o.limit && out.length >= o.limit))
                return out;
            start = page.next;
        }
    }
    /**
     * One page of a scan (GET /tasks/{id}/state): at most o.limit items (the
     * agent's default 1000 when absent, its maximum 10000); page.next, when
     * set, is the start of the next page.
     */
    async scanPage(task, o = {}) {
        const query = {};
        if (o.prefix !== undefined && bytesOf(o.prefix).length > 0)
            query["prefix_b64"] = bytesOf(o.prefix).toString("base64url");
        if (o.start !== undefined && bytesOf(o.start).length > 0)
            query["start_b64"] = bytesOf(o.start).toString("base64url");
        if (o.limit)
            query["limit"] = String(o.limit);
        const path = taskPath(task, "state");
        const req = { method: "GET", path, query, timeout: this.callTimeout, signal: o.signal };
        if (this.json) {
            const res = this.decodeJSON(await this.call(req), `GET ${path}`);
            const items = res.items.map((kv) => ({ key: Buffer.from(kv.key, "base64"), value: Buffer.from(kv.value, "base64") }));
            return res.next ? { items, next: Buffer.from(res.next, "base64") } : { items };
        }
        return decodeScan(this.binaryBody(await this.call({ ...req, accept: MediaBinary }), `GET ${path}`));
    }
    /**
     * Starts a graceful leave of the member (idempotent) and returns its
     * progress. Keep following the assignment: it says shutdown once the
     * member's tasks are handed over.
     */
    async leave(o = {}) {
        const a = await this.call({ method: "POST", path: "/leave", timeout: this.callTimeout, signal: o.signal });
        return this.decodeJSON(a, "POST /leave");
    }
    /** The progress of the member's leave. */
    async leaveStatus(o = {}) {
        const a = await this.call({ method: "GET", path: "/leave", timeout: this.callTimeout, signal: o.signal });
        return this.decodeJSON(a, "GET /leave");
    }
    /** The whole group's view, with learners' progress. */
    async group(o = {}) {
        const a = await this.call({ method: "GET", path: "/group", timeout: this.callTimeout, signal: o.signal });
        return this.decodeJSON(a, "GET /group");
    }
    /** Resolves once the agent has joined its group; throws Unavailable (saying why not) until then. */
    async ready(o = {}) {
        await this.call({ method: "GET", path: "/readyz", timeout: this.callTimeout, signal: o.signal });
    }
    decodeJSON(a, what) {
        try {
            return JSON.parse(a.body.toString("utf8"));
        }
        catch (err) {
            throw new Error(`${what}: decode answer: ${err.message}`);
        }
    }
    binaryBody(a, what) {
        if (a.type !== MediaBinary) {
            throw new Error(`${what}: the agent answered ${JSON.stringify(a.type)}, not the binary form ${MediaBinary} it was asked for (is it older than this client? use the json option)`);
        }
        return a.body;
    }
    /**
     * call sends one request and reads its whole answer, within r.timeout. A
     * 2xx answer resolves; an error answer rejects with its ApiError; no
     * answer (a connection error, the timeout) rejects with Unreachable, and
     * r.signal with its reason.
     */
    call(r) {
        const signal = r.signal;
        if (signal?.aborted)
            return Promise.reject(signal.reason);
        let path = r.path;
        if (r.query && Object.keys(r.query).length > 0)
            path += "?" + new URLSearchParams(r.query).toString();
        const what = `${r.method} ${r.path}`;
        const headers = {};
        if (r.body) {
            headers["Content-Type"] = r.media ?? MediaJSON;
            headers["Content-Length"] = r.body.length;
        }
        if (r.accept)
            headers["Accept"] = r.accept;
        if (this.token)
            headers["Authorization"] = `Bearer ${this.token}`;
        if ("socketPath" in this.target)
            headers["Host"] = "localhost";
        return new Promise((resolve, reject) => {
            let settled = false;
            let failure;
            const settle = (err, answer) => {
                if (settled)
                    return;
                settled = true;
                clearTimeout(timer);
                signal?.removeEventListener("abort", onAbort);
                if (answer)
                    resolve(answer);
                else
                    reject(err);
            };
            const req = http.request({ ...this.target, agent: this.agent, method: r.method, path, headers });
            // fail ends the call with err, whatever the socket says after it.
            const fail = (err) => {
                failure ??= err;
                req.destroy();
                settle(failure);
            };
            const timer = setTimeout(() => fail(new Unreachable(`${what}: no answer within ${r.timeout} ms (is the agent paused?)`, true)), r.timeout);
            const onAbort = () => fail(signal?.reason);
            signal?.addEventListener("abort", onAbort, { once: true });
            const lost = (err) => settle(failure ?? new Unreachable(`${what}: ${err ? err.message : "the connection closed during the answer"}`, false, { cause: err }));
            req.on("error", lost);
            req.on("response", (res) => {
                const chunks = [];
                res.on("data", (c) => chunks.push(c));
                res.on("error", lost);
                res.on("close", () => {
                    if (!res.complete)
                        lost();
                });
                res.on("end", () => {
                    const body = Buffer.concat(chunks);
                    const status = res.statusCode ?? 0;
                    if (status < 200 || status > 299)
                        settle(decodeError(status, body));
                    else
                        settle(undefined, { status, type: res.headers["content-type"] ?? "", body });
                });
            });
            req.end(r.body);
        });
    }
}
/** taskPath is /tasks/{task}/{what}. */
function taskPath(task, what) {
    return `/tasks/${encodeURIComponent(task)}/${what}`;
}
/**
 * escapeKey percent-encodes every byte of key but letters, digits, "-",
 * "_" and "~", so that any key, "/" and "." included, is one path segment
 * that no one resolves.
 */
function escapeKey(key) {
    let out = "";
    for (const b of key) {
        const c = String.fromCharCode(b);
        out += /[A-Za-z0-9_~-]/.test(c) ? c : "%" + b.toString(16).toUpperCase().padStart(2, "0");
    }
    return out;
}
/** commitJSON is the JSON body of a commit: bytes in base64, empty fields left out. */
function commitJSON(req) {
    const out = {};
    if (req.puts?.length)
        out["puts"] = req.puts.map((kv) => ({ key: b64(kv.key), value: b64(kv.value) }));
    if (req.deletes?.length)
        out["deletes"] = req.deletes.map(b64);
    if (req.checkpoint !== undefined && bytesOf(req.checkpoint).length > 0)
        out["checkpoint"] = b64(req.checkpoint);
    if (req.epoch)
        out["epoch"] = req.epoch;
    return out;
}
function b64(b) {
    return bytesOf(b).toString("base64");
}
/** parseView decodes the checkpoints of a view's JSON. */
function parseView(raw) {
    const v = raw;
    v.tasks = (v.tasks ?? []).map((t) => {
        const { checkpoint, ...rest } = t;
        return typeof checkpoint === "string" && checkpoint !== "" ? { ...rest, checkpoint: Buffer.from(checkpoint, "base64") } : rest;
    });
    v.revoke = v.revoke ?? [];
    return v;
}
/** decodeError makes the error of an answer that is not 2xx. */
function decodeError(status, body) {
    try {
        const e = JSON.parse(body.toString("utf8"));
        if (typeof e.code === "string" && e.code !== "")
            return apiError(status, e.code, String(e.message ?? ""));
    }
    catch {
        // not the agent's JSON: a proxy, another server on the port
    }
    let msg = body.toString("utf8").trim();
    if (msg.length > 200)
        msg = msg.slice(0, 200) + "...";
    return new ApiError(status, "", msg || (http.STATUS_CODES[status] ?? "error"));
}
