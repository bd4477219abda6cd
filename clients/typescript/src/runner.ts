// run follows the member's assignment, as the Go client's client.Run does:
// it runs a handler per active task from the task's checkpoint, stops it on
// a revoke and releases the task once the handler made its final commit,
// leaves a task alone after not_owner, restarts it after resume or a
// failure, exits on shutdown, and prepares a task's input while it is a
// learner or standby here.

import { Client } from "./client.js";
import { NotOwner, Resume, Unreachable, retryable } from "./errors.js";
import type { Bytes, CommitResult, KV, Put, ScanOptions, TaskView, View } from "./types.js";

/** Defaults of RunOptions, in ms. */
export const DefaultPollWait = 30_000;
export const DefaultRestartBackoff = 500;
export const DefaultMaxRestartBackoff = 30_000;
export const DefaultStopTimeout = 10_000;

/**
 * Stopped is the reason of a task's signal when the runner stops the task:
 * it was revoked, moved, or the runner is ending. The handler should stop
 * consuming, make its final commit (the task's methods still work) and
 * return.
 */
export class Stopped extends Error {
  override name = "Stopped";
  constructor(message = "task stopped by the runner") {
    super(message);
  }
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
  commit(c: { puts?: readonly Put[]; deletes?: readonly Bytes[]; checkpoint?: Bytes }): Promise<CommitResult>;
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

const levels: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };

/**
 * stderrLogger writes lines at level and above to stderr, each with a
 * millisecond timestamp: `2025-01-02T03:04:05.678Z info task started task=orders-7 epoch=3`.
 */
export function stderrLogger(level: LogLevel = "info"): Logger {
  return (l, message, fields) => {
    if (levels[l] < levels[level]) return;
    let line = `${new Date().toISOString()} ${l} ${message}`;
    for (const [k, v] of Object.entries(fields)) {
      const s = v instanceof Error ? v.message : v instanceof Uint8Array ? Buffer.from(v).toString("hex") : String(v);
      line += ` ${k}=${/\s/.test(s) ? JSON.stringify(s) : s}`;
    }
    process.stderr.write(line + "\n");
  };
}

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

type Settings<P> = Required<Omit<RunOptions<P>, "prepare" | "onEvent" | "signal" | "client">> &
  Pick<RunOptions<P>, "prepare" | "onEvent">;

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
export async function run<P = unknown>(handler: Handler<P>, options: RunOptions<P> = {}): Promise<void> {
  const client = options.client ?? Client.fromEnv();
  const r = new Runner<P>(client, handler, {
    log: options.log ?? (() => {}),
    handleSignals: options.handleSignals ?? true,
    pollWait: options.pollWait ?? DefaultPollWait,
    restartBackoff: options.restartBackoff ?? DefaultRestartBackoff,
    maxRestartBackoff: options.maxRestartBackoff ?? DefaultMaxRestartBackoff,
    stopTimeout: options.stopTimeout ?? DefaultStopTimeout,
    prepare: options.prepare,
    onEvent: options.onEvent,
  });
  try {
    await r.run(options.signal);
  } finally {
    if (!options.client) client.close();
  }
}

/** sleep waits ms, or less if signal aborts; it reports whether it slept the whole time. */
function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(false);
    const onAbort = () => {
      clearTimeout(t);
      resolve(false);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** aborted resolves once signal aborts. */
function aborted(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
}

/** A prepare in flight or done, for a task not yet active here. */
interface Preparation<P> {
  controller: AbortController;
  result: Promise<{ value: P } | { error: unknown }>;
  /** prepare has resolved or thrown. */
  settled: boolean;
}

/** Where a run's last acknowledged commit left a task. */
interface CommitPoint {
  epoch: number;
  seq: number;
  checkpoint: Buffer | undefined;
}

class Runner<P> {
  private readonly tasks = new Map<string, Supervisor<P>>();
  private readonly preparations = new Map<string, Preparation<P>>();
  /** Per task, the epoch at which a task revoked before it ever ran here was released. */
  private readonly releasedIdle = new Map<string, number>();
  /** Per task, the last acknowledged commit of the runs that ended. */
  private readonly lastCommit = new Map<string, CommitPoint>();
  /** Work the run waits for before it resolves: releases and disposals. */
  private readonly pending = new Set<Promise<void>>();
  private readonly exited = new Set<() => void>();
  closing = false;

  constructor(
    readonly client: Client,
    readonly handler: Handler<P>,
    readonly s: Settings<P>,
  ) {}

  log(level: LogLevel, message: string, fields: Record<string, unknown> = {}): void {
    try {
      this.s.log(level, message, fields);
    } catch {
      // a logger's failure is not the run's
    }
  }

  emit(ev: Omit<Event, "time">): void {
    if (!this.s.onEvent) return;
    try {
      this.s.onEvent({ time: new Date(), ...ev });
    } catch (err) {
      this.log("warn", "onEvent threw", { error: err });
    }
  }

  /** track keeps p until it settles, so that the run waits for it. */
  track(p: Promise<void>): void {
    const q = p.catch((err) => this.log("error", "background work failed", { error: err })).finally(() => this.pending.delete(q));
    this.pending.add(q);
  }

  async run(external?: AbortSignal): Promise<void> {
    const stop = new AbortController();
    const onExternal = () => stop.abort();
    external?.addEventListener("abort", onExternal, { once: true });
    if (external?.aborted) stop.abort();
    const removeSignals = this.s.handleSignals ? this.handleSignals(stop) : () => {};
    let shutdown = false;
    try {
      shutdown = await this.poll(stop.signal);
    } finally {
      external?.removeEventListener("abort", onExternal);
      this.stopAll(false);
      await this.waitAll();
      for (const id of [...this.preparations.keys()]) this.discard(id);
      while (this.pending.size > 0) await Promise.all([...this.pending]);
      removeSignals();
    }
    if (shutdown) {
      this.emit({ type: "shutdown" });
      this.log("info", "the agent says shutdown: every task is stopped");
    }
  }

  /** handleSignals makes SIGTERM and SIGINT end the run; a second one kills the process. */
  private handleSignals(stop: AbortController): () => void {
    const onSignal = (sig: NodeJS.Signals) => {
      if (stop.signal.aborted) {
        remove();
        process.kill(process.pid, sig);
        return;
      }
      this.log("info", `${sig}: stopping every task (send it again to exit at once)`);
      stop.abort();
    };
    const remove = () => {
      process.off("SIGTERM", onSignal);
      process.off("SIGINT", onSignal);
    };
    process.on("SIGTERM", onSignal);
    process.on("SIGINT", onSignal);
    return remove;
  }

  /**
   * poll long-polls the assignment and applies each view, until signal
   * aborts (false) or a view says shutdown (true). The first request, and
   * the first after an error, does not wait, so that the runner sees the
   * current view at once.
   */
  private async poll(signal: AbortSignal): Promise<boolean> {
    let after = 0;
    let current = false;
    let failures = 0;
    while (!signal.aborted) {
      let v: View;
      try {
        v = await this.client.assignment(after, current ? this.s.pollWait : 0, { signal });
      } catch (err) {
        if (signal.aborted) break;
        current = false;
        failures++;
        // At most 1 s: once the agent answers again, the worker is
        // attached again within a second (docs/api.md).
        const backoff = Math.min(50 * 2 ** Math.min(failures, 10), 1000);
        this.log("warn", "read the assignment; retrying", { error: err, backoff });
        await sleep(backoff, signal);
        continue;
      }
      failures = 0;
      current = true;
      after = v.version;
      if (this.apply(v)) return true;
    }
    return false;
  }

  /** apply starts and stops tasks to match v and reports whether v says shutdown. */
  apply(v: View): boolean {
    const revoked = new Set(v.revoke);
    const want = new Map<string, TaskView>();
    for (const tv of v.tasks) {
      if (tv.role === "active" && !revoked.has(tv.id)) want.set(tv.id, tv);
    }
    for (const [id, s] of this.tasks) {
      const tv = want.get(id);
      if (s.stopping) {
        // Start it again once it has stopped, if it is still ours then.
        s.next = tv;
        if (revoked.has(id)) s.release = true;
        continue;
      }
      if (revoked.has(id)) {
        this.log("info", "task revoked: stopping it", { task: id, epoch: s.tv.epoch });
        s.stop(true);
      } else if (!tv) {
        // Moved away without a revoke (failover, or the group's last member
        // leaving): there is nothing to release.
        this.log("info", "task no longer active here: stopping it", { task: id, epoch: s.tv.epoch });
        s.stop(false);
      } else if (tv.epoch !== s.tv.epoch) {
        this.log("info", "task epoch changed: restarting it", { task: id, epoch: tv.epoch });
        s.stop(false);
        s.next = tv;
      }
    }
    for (const tv of want.values()) {
      if (!this.tasks.has(tv.id)) this.start(tv);
    }
    this.releaseIdle(v, revoked);
    this.prepareAll(v, revoked);
    return v.shutdown || v.state === "done";
  }

  /**
   * releaseIdle releases the revoked tasks this worker never ran (revoked
   * before it started them): there is nothing to stop, and the move should
   * not wait for the agent's release timeout.
   */
  private releaseIdle(v: View, revoked: Set<string>): void {
    for (const tv of v.tasks) {
      if (!revoked.has(tv.id) || tv.role !== "active") continue;
      if (this.tasks.has(tv.id) || this.releasedIdle.get(tv.id) === tv.epoch) continue;
      this.releasedIdle.set(tv.id, tv.epoch);
      this.track(this.release(tv.id, tv.epoch, "a revoked task that never ran here"));
    }
  }

  /**
   * release releases task at epoch, retrying while the agent is unreachable
   * or unavailable, for up to StopTimeout.
   */
  async release(task: string, epoch: number, what = "task"): Promise<void> {
    const deadline = Date.now() + this.s.stopTimeout;
    for (let attempt = 0; ; attempt++) {
      try {
        const res = await this.client.release(task, epoch, { signal: AbortSignal.timeout(Math.max(1, deadline - Date.now())) });
        this.emit({ type: "release", task, epoch: res.epoch, seq: res.seq });
        this.log("info", `released ${what}`, { task, epoch: res.epoch, seq: res.seq });
        return;
      } catch (err) {
        if (!retryable(err) && !isTimeout(err)) {
          // not_revoked, unknown_task, not_owner: the task left without a
          // revoke, or moved on; there is nothing to hand over from here.
          this.log("info", "release not needed", { task, epoch, error: err });
          return;
        }
        const backoff = Math.min(25 * 2 ** Math.min(attempt, 6), 1000);
        if (Date.now() + backoff >= deadline) {
          this.log("error", "gave up releasing the task; the agent hands it over after its release timeout", { task, epoch, error: err });
          return;
        }
        this.log("warn", "release the task; retrying", { task, epoch, error: err, backoff });
        await sleep(backoff);
      }
    }
  }

  /**
   * prepareAll calls prepare for each stateful task that is a learner or
   * standby here and has none yet, and discards the preparations of tasks
   * that left without becoming active here (a task started here has taken
   * its preparation already).
   */
  private prepareAll(v: View, revoked: Set<string>): void {
    const here = new Map(v.tasks.map((tv) => [tv.id, tv]));
    for (const id of [...this.preparations.keys()]) {
      const tv = here.get(id);
      if (!tv || revoked.has(id)) this.discard(id);
    }
    const prepare = this.s.prepare;
    if (!prepare || this.closing) return;
    for (const tv of v.tasks) {
      if (!tv.stateful || (tv.role !== "learner" && tv.role !== "standby") || this.preparations.has(tv.id)) continue;
      const controller = new AbortController();
      const info: TaskInfo = { id: tv.id, role: tv.role, epoch: tv.epoch, signal: controller.signal };
      if (tv.checkpoint) info.checkpoint = tv.checkpoint;
      if (tv.seq !== undefined) info.seq = tv.seq;
      this.emit({ type: "prepare", task: tv.id, epoch: tv.epoch, role: tv.role, checkpoint: tv.checkpoint, seq: tv.seq });
      this.log("debug", "preparing the task's input", { task: tv.id, role: tv.role });
      // After the poll loop has sent its next request: prepare never
      // delays it, even if it does work before its first await.
      const p: Preparation<P> = { controller, settled: false, result: Promise.resolve({ error: undefined }) };
      p.result = new Promise<{ value: P } | { error: unknown }>((resolve) =>
        setImmediate(() => {
          Promise.resolve()
            .then(() => prepare(info))
            .then(
              (value) => resolve({ value }),
              (error: unknown) => resolve({ error }),
            )
            .finally(() => (p.settled = true));
        }),
      );
      this.preparations.set(tv.id, p);
    }
  }

  /** discard aborts the preparation of task and disposes of what it made. */
  private discard(id: string): void {
    const p = this.preparations.get(id);
    if (!p) return;
    this.preparations.delete(id);
    p.controller.abort(new Stopped(`task ${id} left this member without becoming active here`));
    this.track(
      p.result.then(async (res) => {
        if ("value" in res) await dispose(res.value);
        this.emit({ type: "discard", task: id });
        this.log("debug", "discarded the task's preparation: it left without becoming active here", { task: id });
      }),
    );
  }

  /** takePreparation hands task's preparation to its supervisor. */
  takePreparation(id: string): Preparation<P> | undefined {
    const p = this.preparations.get(id);
    this.preparations.delete(id);
    return p;
  }

  start(tv: TaskView): void {
    // A view that starts a task again at the epoch of an earlier run here
    // may have been built while that run was still committing: its last
    // commit is then the newer checkpoint (only this worker commits at
    // this epoch), and resuming from the view's would process input twice.
    // The view's seq tells: a copy that has applied past that commit holds
    // the newer checkpoint itself.
    const lc = this.lastCommit.get(tv.id);
    if (lc && lc.epoch === tv.epoch && lc.seq > (tv.seq ?? 0)) tv = { ...tv, checkpoint: lc.checkpoint };
    const s = new Supervisor<P>(this, tv, this.takePreparation(tv.id));
    this.tasks.set(tv.id, s);
    void s.supervise().then(() => this.exit(s));
  }

  /** exit forgets a supervisor that ended and starts the task again if the view asked for it meanwhile. */
  private exit(s: Supervisor<P>): void {
    this.tasks.delete(s.tv.id);
    if (s.release) this.releasedIdle.set(s.tv.id, s.tv.epoch);
    if (s.seq > 0) this.lastCommit.set(s.tv.id, { epoch: s.tv.epoch, seq: s.seq, checkpoint: s.checkpoint });
    for (const f of this.exited) f();
    if (!s.next || this.closing) return;
    this.start(s.next);
  }

  private stopAll(release: boolean): void {
    this.closing = true;
    for (const s of this.tasks.values()) {
      if (!s.stopping) s.stop(release);
    }
  }

  private async waitAll(): Promise<void> {
    while (this.tasks.size > 0) {
      await new Promise<void>((resolve) => {
        const f = () => {
          this.exited.delete(f);
          resolve();
        };
        this.exited.add(f);
      });
    }
  }
}

/** dispose closes what a prepare made: close(), else Symbol.asyncDispose or Symbol.dispose. */
async function dispose(value: unknown): Promise<void> {
  if (value === null || (typeof value !== "object" && typeof value !== "function")) return;
  const v = value as Record<PropertyKey, unknown>;
  const asyncDispose = (Symbol as { asyncDispose?: symbol }).asyncDispose;
  const syncDispose = (Symbol as { dispose?: symbol }).dispose;
  if (typeof v["close"] === "function") await (v["close"] as () => unknown).call(value);
  else if (asyncDispose && typeof v[asyncDispose] === "function") await (v[asyncDispose] as () => unknown).call(value);
  else if (syncDispose && typeof v[syncDispose] === "function") (v[syncDispose] as () => unknown).call(value);
}

function isTimeout(err: unknown): boolean {
  return err instanceof Error && (err.name === "TimeoutError" || (err instanceof Unreachable && err.timedOut));
}

/** Supervisor runs one task at one epoch: its handler, its restarts, and the release after it stopped. */
class Supervisor<P> {
  /** Aborted (reason Stopped) when the task must stop. */
  private readonly stopper = new AbortController();
  /** Aborted StopTimeout after the stop: the task's calls end then. */
  private readonly calls = new AbortController();
  private callTimer: NodeJS.Timeout | undefined;

  // Owned by the runner.
  stopping = false;
  next: TaskView | undefined;
  /** Release the task once stopped. */
  release = false;

  /** The last acknowledged commit's sequence and checkpoint (or the start's checkpoint). */
  seq = 0;
  checkpoint: Buffer | undefined;

  constructor(
    private readonly r: Runner<P>,
    readonly tv: TaskView,
    private preparation: Preparation<P> | undefined,
  ) {
    this.checkpoint = tv.checkpoint;
  }

  stop(release: boolean): void {
    this.stopping = true;
    if (release) this.release = true;
    if (this.stopper.signal.aborted) return;
    this.stopper.abort(new Stopped());
    this.callTimer = setTimeout(
      () => this.calls.abort(new Error(`final call of task ${this.tv.id} still running ${this.r.s.stopTimeout} ms after the stop`)),
      this.r.s.stopTimeout,
    );
  }

  private get stopped(): boolean {
    return this.stopper.signal.aborted;
  }

  async supervise(): Promise<void> {
    const tv = { ...this.tv };
    const fields = { task: tv.id, epoch: tv.epoch };
    let prepared = await this.takePrepared();
    let failures = 0;
    try {
      while (!this.stopped) {
        this.r.emit({ type: "start", task: tv.id, epoch: tv.epoch, checkpoint: tv.checkpoint });
        this.r.log("debug", "task starting", fields);
        const started = Date.now();
        let error: unknown;
        let failed = false;
        try {
          await this.r.handler(this.task(tv, prepared));
        } catch (err) {
          error = err;
          failed = true;
        }
        prepared = undefined; // the first run owns it
        if (this.stopped) {
          if (failed && !(error instanceof Stopped) && !isAbort(error)) {
            this.r.log("warn", "task handler failed while stopping", { ...fields, error });
          }
          break;
        }
        if (error instanceof NotOwner) {
          this.r.emit({ type: "refused", task: tv.id, epoch: tv.epoch, code: error.code });
          this.r.log("info", "the agent says this member is not the task's owner: leaving the task alone", { ...fields, error });
          await aborted(this.stopper.signal);
          return;
        }
        if (!failed) {
          this.r.log("info", "task handler returned: the task stays idle until it is revoked", fields);
          await aborted(this.stopper.signal);
          break;
        }
        let backoff = 0;
        if (error instanceof Resume) {
          // Not a failure: the agent holds a commit the handler was not
          // told of. Restart at once from the checkpoint that includes it.
          this.r.log("info", "the agent holds a newer checkpoint: restarting the task from it", { ...fields, error });
        } else {
          if (Date.now() - started > this.r.s.maxRestartBackoff) failures = 0; // it ran well for a while
          failures++;
          backoff = Math.min(this.r.s.restartBackoff * 2 ** Math.min(failures - 1, 20), this.r.s.maxRestartBackoff);
          this.r.log("warn", "task handler failed: restarting it from its latest checkpoint", { ...fields, error, backoff });
        }
        this.r.emit({ type: "restart", task: tv.id, epoch: tv.epoch, error, backoff });
        if (await sleep(backoff, this.stopper.signal)) tv.checkpoint = await this.latestCheckpoint(tv);
      }
      this.r.emit({ type: "stop", task: tv.id, epoch: tv.epoch, seq: this.seq, checkpoint: this.checkpoint });
      this.r.log("debug", "task stopped", fields);
      if (this.release) await this.r.release(tv.id, tv.epoch);
    } finally {
      clearTimeout(this.callTimer);
      this.calls.abort(new Stopped());
    }
  }

  /**
   * takePrepared takes the task's preparation, if it has one. A prepare
   * still running has its signal aborted (the task is active now: it should
   * resolve at once) and is waited for, unless the task is stopped first:
   * then what it made is disposed of.
   */
  private async takePrepared(): Promise<P | undefined> {
    const p = this.preparation;
    this.preparation = undefined;
    if (!p) return undefined;
    if (!p.settled) p.controller.abort(new Stopped(`task ${this.tv.id} became active here before its prepare resolved`));
    const res = await Promise.race([p.result, aborted(this.stopper.signal).then(() => undefined)]);
    if (res === undefined) {
      p.controller.abort(new Stopped(`task ${this.tv.id} stopped before it started`));
      this.r.track(p.result.then((late) => ("value" in late ? dispose(late.value) : undefined)));
      return undefined;
    }
    if ("error" in res) {
      this.r.log("warn", "the task's prepare failed: its handler starts without it", { task: this.tv.id, error: res.error });
      return undefined;
    }
    return res.value;
  }

  private task(tv: TaskView, prepared: P | undefined): Task<P> {
    const c = this.r.client;
    const calls = this.calls.signal;
    return {
      id: tv.id,
      epoch: tv.epoch,
      checkpoint: tv.checkpoint,
      stateful: tv.stateful,
      client: c,
      signal: this.stopper.signal,
      prepared,
      commit: (req) => this.commit(tv, req),
      get: (key) => c.get(tv.id, key, { signal: calls }),
      getMany: (keys) => c.getMany(tv.id, keys, { signal: calls }),
      scan: (o = {}) => c.scan(tv.id, { ...o, signal: calls }),
    };
  }

  /** commit commits at the task's epoch, retrying what may be retried. */
  private async commit(tv: TaskView, req: { puts?: readonly Put[]; deletes?: readonly Bytes[]; checkpoint?: Bytes }): Promise<CommitResult> {
    const body = { ...req, epoch: tv.epoch };
    for (let attempt = 0; ; attempt++) {
      try {
        const res = await this.r.client.commit(tv.id, body, { signal: this.calls.signal });
        this.seq = res.seq;
        if (req.checkpoint !== undefined && req.checkpoint.length > 0) this.checkpoint = Buffer.from(req.checkpoint);
        return res;
      } catch (err) {
        if (!retryable(err) || this.calls.signal.aborted) throw err;
        const backoff = Math.min(50 * 2 ** Math.min(attempt, 5), 1000);
        this.r.log("warn", "commit: retrying", { task: tv.id, epoch: tv.epoch, error: err, backoff });
        if (!(await sleep(backoff, this.calls.signal))) throw err;
      }
    }
  }

  /**
   * latestCheckpoint asks the agent for the task's checkpoint. While the
   * agent shows the task as a learner at this epoch, it is being activated
   * again (its copy missed a commit and is catching up), and the checkpoint
   * it will show once active may be newer than any acknowledged here: wait
   * for it. The agent's checkpoint is the only one to trust: the run that
   * failed may have made a commit it was not told of (Resume), which the
   * last checkpoint acknowledged here does not include, so a read that fails
   * is retried, with a backoff of at most a second, until the agent answers
   * or the task is stopped (then the last checkpoint committed here is
   * returned, for the stop event alone).
   */
  private async latestCheckpoint(tv: TaskView): Promise<Buffer | undefined> {
    let after = 0;
    let failures = 0;
    for (;;) {
      let v: View;
      try {
        v = await this.r.client.assignment(after, this.r.s.pollWait, { signal: this.stopper.signal });
      } catch (err) {
        if (this.stopped) return this.checkpoint;
        failures++;
        const backoff = Math.min(50 * 2 ** Math.min(failures, 10), 1000);
        this.r.log("warn", "read the task's checkpoint; retrying", { task: tv.id, epoch: tv.epoch, error: err, backoff });
        after = 0;
        if (!(await sleep(backoff, this.stopper.signal))) return this.checkpoint;
        continue;
      }
      failures = 0;
      const t = v.tasks.find((t) => t.id === tv.id && t.epoch === tv.epoch);
      if (!t) return this.checkpoint; // the task left: the runner stops this supervisor
      if (t.role === "active") return t.checkpoint;
      if (t.role !== "learner") return this.checkpoint;
      after = v.version;
    }
  }
}

function isAbort(err: unknown): boolean {
  return err instanceof Error && err.name === "AbortError";
}
