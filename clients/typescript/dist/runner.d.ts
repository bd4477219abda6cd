import { Client } from "./client.js";
import type { Bytes, CommitResult, KV, Put, ScanOptions } from "./types.js";
/** Defaults of RunOptions, in ms. */
export declare const DefaultPollWait = 30000;
export declare const DefaultRestartBackoff = 500;
export declare const DefaultMaxRestartBackoff = 30000;
export declare const DefaultStopTimeout = 10000;
/**
 * Stopped is the reason of a task's signal when the runner stops the task:
 * it was revoked, moved, or the runner is ending. The handler should stop
 * consuming, make its final commit (the task's methods still work) and
 * return.
 */
export declare class Stopped extends Error {
    name: string;
    constructor(message?: string);
}
/** A stateful task that is a learner or standby here, as prepare sees it. */
export interface TaskInfo {
    id: string;
    role: "learner" | "standby";
    epoch: number;
    /**
     * The checkpoint this member's copy has applied, when the agent gives
     * it: a hint of where the task's input will resume. The task's real start
     * is the checkpoint of its activation (Task.checkpoint); it is often
     * further on.
     */
    checkpoint?: Buffer;
    /** The changelog sequence this member's copy has applied, when the agent gives it. */
    seq?: number;
    /**
     * Aborted when the task leaves this member without becoming active here,
     * when the run ends, or when the task becomes active here before prepare
     * resolved: the handler then starts with whatever prepare resolves to, so
     * resolve promptly.
     */
    signal: AbortSignal;
}
/**
 * Prepare readies a task's input while the task is a learner or standby
 * here (an open connection, a consumer positioned at the hint), so that the
 * handler processes at once when the task becomes active. What it resolves
 * to is handed to the handler (Task.prepared), which owns it from then on.
 * If the task leaves without becoming active here, the runner aborts
 * info.signal and calls the value's close() (or Symbol.asyncDispose) if it
 * has one. It is called once per stay of the task here (learner to standby
 * is the same stay), never delays the poll loop, and a failure only means
 * the handler starts unprepared. A task that becomes active while its
 * prepare is still running aborts info.signal and waits for what prepare
 * then resolves to.
 */
export type Prepare<P> = (info: TaskInfo) => P | Promise<P>;
/** The task an active task's handler runs, at one epoch. */
export interface Task<P = unknown> {
    readonly id: string;
    /** The ownership this run belongs to; commits and the release send it. */
    readonly epoch: number;
    /** The input position to resume from (undefined: from the beginning). */
    readonly checkpoint: Buffer | undefined;
    readonly stateful: boolean;
    readonly client: Client;
    /** Aborted, with a Stopped reason, when the task must stop. */
    readonly signal: AbortSignal;
    /**
     * What prepare resolved to for this task, on the first run after the task
     * became active here; undefined otherwise (no prepare, it failed, or a
     * restart: the first run owned it). The handler owns it.
     */
    readonly prepared: P | undefined;
    /**
     * Commits puts, deletes and checkpoint (absent keeps the previous one) at
     * the task's epoch. It retries while the agent is unreachable or
     * unavailable (a retry of a commit that had landed is refused with Resume,
     * which the runner handles by restarting the task from the view's
     * checkpoint). After a stop it still works for StopTimeout, for the final
     * commit.
     */
    commit(c: {
        puts?: readonly Put[];
        deletes?: readonly Bytes[];
        checkpoint?: Bytes;
    }): Promise<CommitResult>;
    /** The value of key, or undefined; see Client.get. Works after a stop like commit. */
    get(key: Bytes): Promise<Buffer | undefined>;
    /** The values of keys, undefined for absent ones; see Client.getMany. */
    getMany(keys: readonly Bytes[]): Promise<(Buffer | undefined)[]>;
    /** The task's keys and values; see Client.scan. */
    scan(o?: ScanOptions): Promise<KV[]>;
}
/**
 * Handler processes one active task until task.signal aborts (reason
 * Stopped), then makes its final commit and returns. Throwing restarts the
 * task from its latest checkpoint after a backoff, except NotOwner (the
 * task is left alone until the agent's view changes) and Resume (it
 * restarts at once from the view's checkpoint). Returning before the stop
 * means the task has nothing more to do here; it is released when revoked.
 */
export type Handler<P> = (task: Task<P>) => Promise<void>;
/** What the runner did, in the order a task goes through it. */
export type EventType = "prepare" | "discard" | "start" | "restart" | "refused" | "stop" | "release" | "shutdown";
/** Event is something the runner did, for observability (RunOptions.onEvent). */
export interface Event {
    time: Date;
    type: EventType;
    task?: string;
    epoch?: number;
    /** start: where the task starts; stop: its last commit's; prepare: the hint. */
    checkpoint?: Buffer | undefined;
    /** stop: the last commit's sequence; release: the task's last commit's. */
    seq?: number;
    /** prepare: the task's role. */
    role?: string;
    /** refused: the API's code. */
    code?: string;
    /** restart: why. */
    error?: unknown;
    /** restart: the pause before it, ms. */
    backoff?: number;
}
export type LogLevel = "debug" | "info" | "warn" | "error";
/** Logger takes the runner's log lines; fields hold task, epoch, error, backoff. */
export type Logger = (level: LogLevel, message: string, fields: Record<string, unknown>) => void;
/**
 * stderrLogger writes lines at level and above to stderr, each with a
 * millisecond timestamp: `2025-01-02T03:04:05.678Z info task started task=orders-7 epoch=3`.
 */
export declare function stderrLogger(level?: LogLevel): Logger;
export interface RunOptions<P> {
    /** The agent's client; default Client.fromEnv() (SIDECAR_URL, SIDECAR_TOKEN), closed when run ends. */
    client?: Client;
    /** Readies a learner's or standby's input; see Prepare. */
    prepare?: Prepare<P>;
    /** Called for every Event, one at a time; it must return quickly. */
    onEvent?: (ev: Event) => void;
    /** Takes the runner's log lines; default none. */
    log?: Logger;
    /** Ends the run as SIGTERM does: every task stops (final commits), then run resolves. */
    signal?: AbortSignal;
    /**
     * Handle SIGTERM and SIGINT (default true): the first stops every task and
     * ends the run; a second one kills the process as if unhandled.
     */
    handleSignals?: boolean;
    /** The long-poll's wait (ms); the agent caps it at 60 s. */
    pollWait?: number;
    /** The pause before the first restart of a failed task (ms); it doubles up to maxRestartBackoff. */
    restartBackoff?: number;
    maxRestartBackoff?: number;
    /** How long a stopped task may still call the agent (its final commit), and retry its release (ms). */
    stopTimeout?: number;
}
/**
 * run follows the member's assignment and runs handler for each task that
 * is active here, from the task's checkpoint, until the agent says shutdown
 * (its view's shutdown, or state done) or the run is ended (SIGTERM, SIGINT,
 * options.signal). It long-polls /assignment and reacts to each change at
 * once:
 *
 * - a task that is revoked, or no longer active here, has its signal
 *   aborted; once its handler returns, a revoked task is released;
 * - a task revoked before it ever ran here is released at once;
 * - a task whose epoch changed is stopped and started again at the new one;
 * - a stateful task that appears here as a learner or standby is prepared
 *   (options.prepare), and its handler gets what prepare made.
 *
 * Errors talking to the agent are logged and retried; run does not reject
 * for them. It resolves once every handler it started has returned.
 */
export declare function run<P = unknown>(handler: Handler<P>, options?: RunOptions<P>): Promise<void>;
