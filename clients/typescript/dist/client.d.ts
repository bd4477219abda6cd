import type { Bytes, CommitRequest, CommitResult, GroupView, KV, LeaveStatus, ReleaseResult, ScanOptions, ScanPage, View } from "./types.js";
/**
 * How long a call may take (a long-poll: its wait plus this), in ms. A
 * paused agent accepts connections and never answers: without a bound of
 * its own a worker would hang with it (docs/api.md, Client-side timeouts).
 */
export declare const DefaultCallTimeout = 10000;
/** The most keys an agent with its default limits takes in one batch get. */
export declare const MaxGetKeys = 10000;
/** The agent's address when none is given and SIDECAR_URL is unset. */
export declare const DefaultURL = "http://127.0.0.1:7070";
/** The prefix of an address that names the agent's Unix socket. */
export declare const UnixPrefix = "unix:";
export interface ClientOptions {
    /** The agent's --api-token: sent as "Authorization: Bearer <token>". */
    token?: string;
    /** Replaces DefaultCallTimeout (ms). */
    callTimeout?: number;
    /**
     * Send and receive JSON only, instead of the binary form for commits,
     * batch gets and scans: slower, but readable on the wire.
     */
    json?: boolean;
}
/** Options of one call. */
export interface CallOptions {
    /** Ends the call early: it rejects with the signal's reason. */
    signal?: AbortSignal;
}
/**
 * Client calls one agent's API. It keeps connections alive and may be used
 * by many tasks at once; one Client per agent is enough. close() ends its
 * idle connections.
 */
export declare class Client {
    /** The address it calls: http://HOST:PORT, or unix:PATH. */
    readonly url: string;
    readonly token: string;
    readonly callTimeout: number;
    readonly json: boolean;
    private readonly target;
    private readonly agent;
    /**
     * A client of the agent at url: "http://127.0.0.1:7070", or
     * "unix:/run/handoff/api.sock" for an agent listening on a Unix socket
     * (its --listen unix:PATH), called as http://localhost.
     */
    constructor(url?: string, options?: ClientOptions);
    /**
     * A client of the agent named by the environment, as `handoff
     * conformance` and the Kubernetes example give it: SIDECAR_URL (default
     * http://127.0.0.1:7070) and SIDECAR_TOKEN.
     */
    static fromEnv(options?: ClientOptions): Client;
    /** close ends the client's idle connections; calls still open go on. */
    close(): void;
    /**
     * The member's view. With waitMs > 0 it long-polls: it answers as soon as
     * the view's version exceeds after, or with the current view once waitMs
     * (capped by the agent at 60 s) has passed. The call gives up waitMs plus
     * the call timeout after it began.
     */
    assignment(after?: number, waitMs?: number, o?: CallOptions): Promise<View>;
    /**
     * Atomically applies puts, deletes and the new checkpoint to task's state.
     * Throws NotOwner when this member is not (or no longer) the task's active
     * owner or the epoch is stale, Resume when the agent holds a commit of the
     * task the worker was not told of.
     */
    commit(task: string, req: CommitRequest, o?: CallOptions): Promise<CommitResult>;
    /**
     * Tells the agent the worker stopped revoked task and made its last
     * commit, so that the hand-off may proceed. epoch, when given (not 0), is
     * the ownership the worker stopped: the agent refuses (NotOwner) to
     * release the task at any other epoch.
     */
    release(task: string, epoch?: number, o?: CallOptions): Promise<ReleaseResult>;
    /** The value of key in task's state, or undefined when the key is absent. */
    get(task: string, key: Bytes, o?: CallOptions): Promise<Buffer | undefined>;
    /**
     * The values of keys in task's state, in their order: undefined for an
     * absent key. The agent reads each request's keys at one point in time;
     * more than MaxGetKeys keys go in several requests, each read at its own.
     */
    getMany(task: string, keys: readonly Bytes[], o?: CallOptions): Promise<(Buffer | undefined)[]>;
    private getChunk;
    /**
     * task's keys and values in key order, from o.start on, within o.prefix,
     * at most o.limit of them (all when absent). It reads as many pages as it
     * needs; scanPage reads one.
     */
    scan(task: string, o?: ScanOptions & CallOptions): Promise<KV[]>;
    /**
     * One page of a scan (GET /tasks/{id}/state): at most o.limit items (the
     * agent's default 1000 when absent, its maximum 10000); page.next, when
     * set, is the start of the next page.
     */
    scanPage(task: string, o?: ScanOptions & CallOptions): Promise<ScanPage>;
    /**
     * Starts a graceful leave of the member (idempotent) and returns its
     * progress. Keep following the assignment: it says shutdown once the
     * member's tasks are handed over.
     */
    leave(o?: CallOptions): Promise<LeaveStatus>;
    /** The progress of the member's leave. */
    leaveStatus(o?: CallOptions): Promise<LeaveStatus>;
    /** The whole group's view, with learners' progress. */
    group(o?: CallOptions): Promise<GroupView>;
    /** Resolves once the agent has joined its group; throws Unavailable (saying why not) until then. */
    ready(o?: CallOptions): Promise<void>;
    private decodeJSON;
    private binaryBody;
    /**
     * call sends one request and reads its whole answer, within r.timeout. A
     * 2xx answer resolves; an error answer rejects with its ApiError; no
     * answer (a connection error, the timeout) rejects with Unreachable, and
     * r.signal with its reason.
     */
    private call;
}
