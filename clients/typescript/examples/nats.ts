// Just enough of the NATS protocol, on node:net, to read a task's input from
// a JetStream stream: request/reply for the JetStream API, and a pull
// consumer that delivers one subject's messages from a sequence on. An
// example's reader, not a NATS client: no reconnects (an error ends the
// task's run, and the runner restarts it from its checkpoint), no TLS.

import net from "node:net";
import { randomBytes } from "node:crypto";

/** A message of the input: its stream sequence and its body. */
export interface Msg {
  seq: number;
  data: Buffer;
}

type Delivery = { subject: string; reply: string; status?: string; data: Buffer };
type Handler = (d: Delivery | Error) => void;

/** Nats is one connection to a NATS server. */
export class Nats {
  private buf: Buffer = Buffer.alloc(0);
  private readonly subs = new Map<number, Handler>();
  private nextSid = 1;
  private readonly inbox = `_INBOX.${randomBytes(8).toString("hex")}`;
  private readonly replies = new Map<string, Handler>();
  private nextReply = 1;
  private closed: Error | undefined;
  private pongs: (() => void)[] = [];

  private constructor(private readonly sock: net.Socket) {}

  /** connect opens a connection to url (nats://[user:pass@|token@]host:port) and waits for the server's PONG. */
  static async connect(url: string, timeoutMs = 5000): Promise<Nats> {
    const u = new URL(url);
    const sock = net.connect({ host: u.hostname.replace(/^\[(.*)\]$/, "$1"), port: Number(u.port || 4222) });
    sock.setNoDelay(true);
    const nc = new Nats(sock);
    const info = nc.firstLine(timeoutMs);
    sock.on("data", (chunk: Buffer) => nc.read(chunk));
    sock.on("error", (err) => nc.fail(err));
    sock.on("close", () => nc.fail(new Error("NATS closed the connection")));
    const line = await info;
    if (!line.startsWith("INFO ")) throw new Error(`NATS at ${u.host} did not greet with INFO: ${line.slice(0, 80)}`);
    const opts: Record<string, unknown> = {
      verbose: false,
      pedantic: false,
      headers: true,
      no_responders: true,
      lang: "typescript-example",
      version: "0",
    };
    if (u.username && u.password) {
      opts["user"] = decodeURIComponent(u.username);
      opts["pass"] = decodeURIComponent(u.password);
    } else if (u.username) {
      opts["auth_token"] = decodeURIComponent(u.username);
    }
    nc.send(`CONNECT ${JSON.stringify(opts)}\r\n`);
    nc.subscribe(`${nc.inbox}.*`, (d) => {
      if (d instanceof Error) {
        for (const h of nc.replies.values()) h(d);
        nc.replies.clear();
        return;
      }
      const h = nc.replies.get(d.subject);
      nc.replies.delete(d.subject);
      h?.(d);
    });
    await nc.flush(timeoutMs);
    return nc;
  }

  /** firstLine resolves to the server's first line (its INFO). */
  private firstLine(timeoutMs: number): Promise<string> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.sock.destroy();
        reject(new Error(`NATS did not answer within ${timeoutMs} ms`));
      }, timeoutMs);
      const onData = (chunk: Buffer) => {
        this.buf = Buffer.concat([this.buf, chunk]);
        const i = this.buf.indexOf("\r\n");
        if (i < 0) return;
        clearTimeout(timer);
        this.sock.off("data", onData);
        this.sock.off("error", onError);
        const line = this.buf.subarray(0, i).toString();
        this.buf = this.buf.subarray(i + 2);
        resolve(line);
      };
      const onError = (err: Error) => {
        clearTimeout(timer);
        reject(err);
      };
      this.sock.on("data", onData);
      this.sock.once("error", onError);
    });
  }

  private send(s: string | Buffer): void {
    if (this.closed) throw this.closed;
    this.sock.write(s);
  }

  /** flush resolves once the server has processed everything sent before it. */
  flush(timeoutMs = 5000): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`NATS did not answer PING within ${timeoutMs} ms`)), timeoutMs);
      this.pongs.push(() => {
        clearTimeout(timer);
        if (this.closed) reject(this.closed);
        else resolve();
      });
      this.send("PING\r\n");
    });
  }

  subscribe(subject: string, h: Handler): number {
    const sid = this.nextSid++;
    this.subs.set(sid, h);
    this.send(`SUB ${subject} ${sid}\r\n`);
    return sid;
  }

  unsubscribe(sid: number): void {
    if (this.subs.delete(sid) && !this.closed) this.send(`UNSUB ${sid}\r\n`);
  }

  publish(subject: string, payload: Buffer | string, reply = ""): void {
    const data = typeof payload === "string" ? Buffer.from(payload) : payload;
    this.send(Buffer.concat([Buffer.from(`PUB ${subject} ${reply ? reply + " " : ""}${data.length}\r\n`), data, Buffer.from("\r\n")]));
  }

  /** newInbox is a subject only this connection receives on. */
  newInbox(): string {
    return `${this.inbox}.${this.nextReply++}`;
  }

  /** ownInbox is a subject only this connection receives on, outside request's inboxes: for a subscription of its own. */
  ownInbox(): string {
    return `${this.inbox}x${this.nextReply++}`;
  }

  /** request publishes payload and resolves to the first answer. */
  request(subject: string, payload: Buffer | string, timeoutMs = 5000): Promise<Delivery> {
    return new Promise((resolve, reject) => {
      const reply = this.newInbox();
      const timer = setTimeout(() => {
        this.replies.delete(reply);
        reject(new Error(`${subject}: no answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.replies.set(reply, (d) => {
        clearTimeout(timer);
        if (d instanceof Error) reject(d);
        else if (d.status?.startsWith("503")) reject(new Error(`${subject}: no responders (is JetStream enabled?)`));
        else resolve(d);
      });
      try {
        this.publish(subject, payload, reply);
      } catch (err) {
        clearTimeout(timer);
        this.replies.delete(reply);
        reject(err);
      }
    });
  }

  /** jsapi calls the JetStream API and returns its JSON answer; an error answer throws JSApiError. */
  async jsapi(subject: string, req: unknown): Promise<Record<string, unknown>> {
    const d = await this.request(`$JS.API.${subject}`, JSON.stringify(req ?? {}));
    const res = JSON.parse(d.data.toString()) as { error?: { code: number; err_code: number; description: string } };
    if (res.error) throw new JSApiError(subject, res.error.code, res.error.err_code, res.error.description);
    return res as Record<string, unknown>;
  }

  close(): void {
    this.fail(new Error("connection closed"));
  }

  private fail(err: Error): void {
    if (this.closed) return;
    this.closed = err;
    this.sock.destroy();
    for (const h of this.subs.values()) h(err);
    this.subs.clear();
    for (const p of this.pongs) p();
    this.pongs = [];
  }

  /** read parses what the server sent: MSG, HMSG, PING, PONG, +OK, -ERR. */
  private read(chunk: Buffer): void {
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    for (;;) {
      const eol = this.buf.indexOf("\r\n");
      if (eol < 0) return;
      const line = this.buf.subarray(0, eol).toString();
      const parts = line.split(" ");
      const op = parts[0]!.toUpperCase();
      if (op === "MSG" || op === "HMSG") {
        // MSG <subject> <sid> [reply] <bytes>; HMSG <subject> <sid> [reply] <header bytes> <total bytes>
        const total = Number(parts[parts.length - 1]);
        if (this.buf.length < eol + 2 + total + 2) return; // wait for the payload
        const body = this.buf.subarray(eol + 2, eol + 2 + total);
        this.buf = this.buf.subarray(eol + 2 + total + 2);
        const n = op === "HMSG" ? 1 : 0;
        const reply = parts.length === 5 + n ? parts[3]! : "";
        let data = body;
        let status: string | undefined;
        if (op === "HMSG") {
          const hlen = Number(parts[parts.length - 2]);
          const head = body.subarray(0, hlen).toString();
          data = body.subarray(hlen);
          const first = head.split("\r\n")[0]!; // NATS/1.0 [status [description]]
          status = first.slice("NATS/1.0".length).trim() || undefined;
        }
        const d: Delivery = { subject: parts[1]!, reply, data };
        if (status) d.status = status;
        this.subs.get(Number(parts[2]))?.(d);
        continue;
      }
      this.buf = this.buf.subarray(eol + 2);
      if (op === "PING") this.send("PONG\r\n");
      else if (op === "PONG") this.pongs.shift()?.();
      else if (op === "-ERR") this.fail(new Error(`NATS: ${line}`));
    }
  }
}

/** JSApiError is an error answer of the JetStream API. */
export class JSApiError extends Error {
  override name = "JSApiError";
  constructor(
    subject: string,
    readonly code: number,
    readonly errCode: number,
    description: string,
  ) {
    super(`$JS.API.${subject}: ${description} (${code}, ${errCode})`);
  }
}

/** JetStream's error code of a stream that does not exist. */
const errStreamNotFound = 10059;

/** ensureStream creates stream for subjects unless it exists, so that the worker and the producer may start in any order. */
export async function ensureStream(nc: Nats, stream: string, subjects: string[]): Promise<void> {
  try {
    await nc.jsapi(`STREAM.INFO.${stream}`, {});
  } catch (err) {
    if (!(err instanceof JSApiError) || err.errCode !== errStreamNotFound) throw err;
    await nc.jsapi(`STREAM.CREATE.${stream}`, { name: stream, subjects, storage: "file", retention: "limits" });
  }
}

/** JetStream's error code of a direct get that found no message. */
const errNoMessage = 10037;

/** nextMessage is the first message of subject at or after seq in stream, or undefined when there is none. */
export async function nextMessage(nc: Nats, stream: string, subject: string, seq: number): Promise<Msg | undefined> {
  try {
    const res = await nc.jsapi(`STREAM.MSG.GET.${stream}`, { seq, next_by_subj: subject });
    const m = res["message"] as { seq: number; data?: string };
    return { seq: m.seq, data: Buffer.from(m.data ?? "", "base64") };
  } catch (err) {
    if (err instanceof JSApiError && err.errCode === errNoMessage) return undefined;
    throw err;
  }
}

/** lastSeq is the sequence of subject's last message in stream now (0 while it has none): a later message of it has a higher one. */
export async function lastSeq(nc: Nats, stream: string, subject: string): Promise<number> {
  try {
    const res = await nc.jsapi(`STREAM.MSG.GET.${stream}`, { last_by_subj: subject });
    return (res["message"] as { seq: number }).seq;
  } catch (err) {
    if (err instanceof JSApiError && err.errCode === errNoMessage) return 0;
    throw err;
  }
}

// Pulls: how many messages one pull asks for, how long it waits, and how
// often the server says it is still there while it waits.
const pullBatch = 256;
const pullExpires = 5_000;
const pullHeartbeat = 1_000;
/** A consumer that is silent this long (no message, no heartbeat) is gone. */
const silentLimit = 3 * pullHeartbeat + 500;
/** The server removes a consumer this long without a pull (a worker that died). */
const inactiveThreshold = 10_000;

/**
 * Reader delivers one subject's messages in order, from a stream sequence
 * on, through a pull consumer without acknowledgements (the checkpoint is
 * the worker's, committed with its state). It keeps one pull outstanding
 * while it buffers fewer than max messages. A read-ahead reader (a task's
 * prepared input) keeps pulling and drops the oldest past max instead,
 * until keepAll makes it the task's input.
 */
export class Reader {
  private readonly queue: Msg[] = [];
  private head = 0;
  private waiter: (() => void) | undefined;
  private failed: Error | undefined;
  private sid = 0;
  private deliveries = 0; // of the current pull
  private lastHeard = Date.now();
  /** No pull is outstanding: the buffer is full. */
  private paused = false;
  private consumerSeq = 0;
  private watchdog: NodeJS.Timeout | undefined;
  /** The highest sequence dropped from a full buffer (0: none). */
  dropped = 0;

  private constructor(
    private readonly nc: Nats,
    private readonly stream: string,
    private readonly subject: string,
    private readonly name: string,
    /** The sequence the consumer started at. */
    readonly start: number,
    private readonly max: number,
    private readAhead: boolean,
    /** The subject the consumer's messages come to. */
    private readonly inboxSubject: string,
  ) {}

  /** open creates a consumer of subject in stream from sequence start on, and starts pulling. */
  static async open(nc: Nats, stream: string, subject: string, start: number, max: number, readAhead = false): Promise<Reader> {
    const name = `input_${randomBytes(6).toString("hex")}`;
    await nc.jsapi(`CONSUMER.CREATE.${stream}.${name}`, {
      stream_name: stream,
      config: {
        name,
        filter_subject: subject,
        deliver_policy: "by_start_sequence",
        opt_start_seq: Math.max(1, start),
        ack_policy: "none",
        replay_policy: "instant",
        inactive_threshold: inactiveThreshold * 1e6,
        mem_storage: true,
        num_replicas: 1,
      },
    });
    const r = new Reader(nc, stream, subject, name, start, max, readAhead, nc.ownInbox());
    r.sid = nc.subscribe(r.inboxSubject, (d) => r.deliver(d));
    r.pull();
    r.watchdog = setInterval(() => {
      if (!r.paused && Date.now() - r.lastHeard > silentLimit) r.fail(new Error(`consumer ${name}: silent for ${silentLimit} ms (is NATS or the consumer gone?)`));
    }, pullHeartbeat);
    return r;
  }

  private pull(): void {
    if (this.failed) return;
    if (!this.readAhead && this.buffered >= this.max) {
      this.paused = true; // next pulls again once the handler has caught up
      return;
    }
    this.paused = false;
    this.lastHeard = Date.now();
    this.deliveries = 0;
    try {
      this.nc.publish(
        `$JS.API.CONSUMER.MSG.NEXT.${this.stream}.${this.name}`,
        JSON.stringify({ batch: pullBatch, expires: pullExpires * 1e6, idle_heartbeat: pullHeartbeat * 1e6 }),
        this.inboxSubject,
      );
    } catch (err) {
      this.fail(err as Error);
    }
  }

  private deliver(d: Delivery | Error): void {
    if (d instanceof Error) return this.fail(d);
    this.lastHeard = Date.now();
    if (d.status) {
      const code = d.status.slice(0, 3);
      if (code === "100") return; // idle heartbeat
      if (code === "404" || code === "408") return this.pull(); // nothing (more) in this pull
      if (code === "409" && !/deleted/i.test(d.status)) return this.pull(); // e.g. exceeded max waiting, leadership change
      return this.fail(new Error(`consumer ${this.name}: ${d.status}`));
    }
    // $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>, with
    // <domain>.<account hash> before <stream> (and a token after) in the newer form.
    const t = d.reply.split(".");
    const at = t.length >= 11 ? 4 : 2;
    const seq = Number(t[at + 3]);
    const cseq = Number(t[at + 4]);
    if (!Number.isSafeInteger(seq) || cseq !== this.consumerSeq + 1) {
      return this.fail(new Error(`consumer ${this.name}: delivery ${cseq} after ${this.consumerSeq} (reply ${d.reply}): a gap`));
    }
    this.consumerSeq = cseq;
    this.queue.push({ seq, data: d.data });
    if (this.readAhead && this.buffered > this.max) this.dropped = this.queue[this.head++]!.seq;
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue.splice(0, this.head);
      this.head = 0;
    }
    this.wake();
    if (++this.deliveries >= pullBatch) this.pull();
  }

  private fail(err: Error): void {
    if (this.failed) return;
    this.failed = err;
    clearInterval(this.watchdog);
    this.wake();
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }

  /** buffered is how many messages next can return without waiting. */
  get buffered(): number {
    return this.queue.length - this.head;
  }

  /** skipThrough drops the buffered messages up to sequence seq. */
  skipThrough(seq: number): void {
    while (this.head < this.queue.length && this.queue[this.head]!.seq <= seq) this.head++;
  }

  /**
   * covers reports whether every message after seq is still to come from
   * this reader: it dropped none of them, and it started at or before seq+1
   * or the subject has no message between seq+1 and its start (one direct
   * get asks the stream).
   */
  async covers(seq: number): Promise<boolean> {
    if (this.failed || this.dropped > seq) return false;
    if (this.start <= seq + 1) return true;
    const m = await nextMessage(this.nc, this.stream, this.subject, seq + 1);
    return m === undefined || m.seq >= this.start;
  }

  /** next returns the next message, waiting at most timeoutMs (undefined then), or less if signal aborts. */
  async next(timeoutMs: number, signal?: AbortSignal): Promise<Msg | undefined> {
    if (this.head === this.queue.length && !this.failed && timeoutMs > 0 && !signal?.aborted) {
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          signal?.removeEventListener("abort", done);
          this.waiter = undefined;
          resolve();
        };
        const timer = setTimeout(done, timeoutMs);
        signal?.addEventListener("abort", done, { once: true });
        this.waiter = done;
      });
    }
    if (this.head < this.queue.length) {
      const m = this.queue[this.head++];
      if (this.paused && this.buffered < this.max / 2) this.pull();
      return m;
    }
    if (this.failed) throw this.failed;
    return undefined;
  }

  /** keepAll makes a read-ahead reader a task's input: it drops nothing from now on. */
  keepAll(): void {
    this.readAhead = false;
  }

  /** close stops pulling and deletes the consumer (best effort: the server drops it anyway once idle). */
  async close(): Promise<void> {
    this.fail(new Error("reader closed"));
    this.nc.unsubscribe(this.sid);
    try {
      await this.nc.jsapi(`CONSUMER.DELETE.${this.stream}.${this.name}`, {});
    } catch {
      // the connection is gone, or the consumer already
    }
  }
}
