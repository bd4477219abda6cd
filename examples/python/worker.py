#!/usr/bin/env python3
"""A handoff worker in Python 3, standard library only.

It does the job of the Go counter (examples/counter): for every stateful
task active on its member, it counts how often each key (a message's body)
occurs in the task's input, and commits the counts to the sidecar with the
input position reached as the checkpoint, exactly once across hand-offs.
Copy it as the shape of a worker in any language; docs/api.md is the
contract it follows, and `handoff conformance -- python3 worker.py` checks it.

The parts, top to bottom:

  Sidecar     the agent's HTTP API (GET /assignment, commit, release, state)
  Nats        the few lines of the NATS protocol needed to read the input
  TaskRun     one task at one epoch: read input, commit, final commit, release
  Worker      follows /assignment: starts, stops and releases tasks

Configuration comes from the environment (what `handoff conformance` and the
Kubernetes example give a worker) or from flags:

  SIDECAR_URL    --sidecar   the agent's API, default http://127.0.0.1:7070;
                             unix:/path/to/api.sock for an agent on a Unix
                             socket (its --listen unix:PATH)
  SIDECAR_TOKEN  --token     the agent's API token, if it has one
  NATS_URL       --nats      the NATS server with the input stream
  HANDOFF_GROUP  --group     input is subject input.<group>.<task> of stream INPUT_<group>

The checkpoint is the input stream sequence of the last message counted,
8 bytes big-endian, as the Go counter writes it: either worker can take a
task over from the other.
"""

import argparse
import base64
import http.client
import json
import os
import random
import signal
import socket
import struct
import sys
import threading
import time
import urllib.parse

BATCH = 100  # most messages per commit
MAX_DELAY = 0.05  # longest time a read message waits for its commit, seconds
POLL_WAIT = 30  # long-poll wait, seconds
STOP_TIMEOUT = 10  # how long a stopping task may still commit and release, seconds

# For tests of `handoff conformance` only: make the worker break the
# contract in one way (see --break). A real worker has nothing like it.
BREAK = ""


def log(*args):
    print(time.strftime("%H:%M:%S"), *args, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# The sidecar's API


class ApiError(Exception):
    """A non-2xx answer: status, the stable code to branch on, a message."""

    def __init__(self, status, code, message):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


class Unreachable(Exception):
    """No answer: the agent is down, restarting, or paused (a client-side
    timeout). The outcome of the call is unknown."""


class UnixConnection(http.client.HTTPConnection):
    """HTTP over the agent's Unix socket, as http://localhost."""

    def __init__(self, path):
        super().__init__("localhost")
        self.path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class Sidecar:
    """The agent's HTTP API. One connection per thread, kept alive. The URL
    is http://HOST:PORT, or unix:PATH for an agent on a Unix socket."""

    def __init__(self, url, token):
        self.socket = url[len("unix:"):] if url.startswith("unix:") else None
        if not self.socket:
            u = urllib.parse.urlsplit(url)
            self.host, self.port = u.hostname, u.port or 80
        self.headers = {"Authorization": "Bearer " + token} if token else {}
        self.local = threading.local()

    def connection(self):
        if self.socket:
            return UnixConnection(self.socket)
        return http.client.HTTPConnection(self.host, self.port)

    def call(self, method, path, query=None, body=None, timeout=10):
        """Sends one request; returns the decoded JSON (or raw bytes for a
        state read). Every call has a client-side timeout: a paused agent
        accepts connections and never answers."""
        if query:
            path += "?" + urllib.parse.urlencode(query)
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.connection()
            self.local.conn = conn
        try:
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            self.local.conn = None
            raise Unreachable(f"{method} {path}: {e}") from e
        if resp.status >= 300:
            try:
                err = json.loads(raw)
                raise ApiError(resp.status, err.get("code", ""), err.get("message", ""))
            except ValueError:
                raise ApiError(resp.status, "", raw[:200].decode(errors="replace"))
        if resp.getheader("Content-Type", "").startswith("application/json"):
            return json.loads(raw)
        return raw

    def assignment(self, after, wait):
        query = {"wait": f"{wait}s", "after": after} if wait else None
        return self.call("GET", "/assignment", query, timeout=wait + 10)

    def commit(self, task, puts, checkpoint, epoch):
        body = {
            "puts": [{"key": b64(k.encode()), "value": b64(v.encode())} for k, v in puts.items()],
            "checkpoint": b64(checkpoint),
            "epoch": epoch,
        }
        return self.call("POST", f"/tasks/{task}/commit", body=body, timeout=None if BREAK == "no-timeout" else 10)

    def release(self, task, epoch):
        return self.call("POST", f"/tasks/{task}/release", {"epoch": epoch})

    def counts(self, task, keys):
        """The committed counts of keys (0 for a key with none), read in one
        batch get (POST /tasks/{id}/get): the values come back in the order
        of the keys, null for an absent one. At most 10000 keys a call."""
        out = {}
        for i in range(0, len(keys), 10000):
            chunk = keys[i:i + 10000]
            res = self.call("POST", f"/tasks/{task}/get", body={"keys": [b64(k.encode()) for k in chunk]})
            for key, value in zip(chunk, res["values"]):
                out[key] = int(base64.b64decode(value)) if value is not None else 0
        return out


def b64(b):
    return base64.b64encode(b).decode()


# --------------------------------------------------------------------------
# The input: read a JetStream stream's messages by sequence, one request each


class Nats:
    """Just enough of the NATS protocol for request/reply: the worker reads
    its input with JetStream's "get the next message of a subject from a
    sequence on" request, so a task needs no consumer state at all."""

    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.sock = socket.create_connection((u.hostname, u.port or 4222), timeout=10)
        self.buf = b""
        self.inbox = "_INBOX.%016x" % random.getrandbits(64)
        self.n = 0
        self._line()  # INFO
        self._send(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n')
        self._send(f"SUB {self.inbox}.* 1\r\nPING\r\n".encode())
        while self._line() != b"PONG":
            pass

    def _send(self, b):
        self.sock.sendall(b)

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("NATS closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _payload(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("NATS closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def request(self, subject, payload):
        self.n += 1
        reply = f"{self.inbox}.{self.n}"
        self._send(f"PUB {subject} {reply} {len(payload)}\r\n".encode() + payload + b"\r\n")
        while True:
            parts = self._line().split(b" ")
            if parts[0] == b"PING":
                self._send(b"PONG\r\n")
            elif parts[0] == b"MSG":  # MSG <subject> <sid> [reply] <bytes>
                data = self._payload(int(parts[-1]))
                if parts[1].decode() == reply:
                    return data
            elif parts[0] == b"HMSG":  # HMSG <subject> <sid> [reply] <hdr bytes> <total bytes>
                data = self._payload(int(parts[-1]))
                if parts[1].decode() == reply:
                    raise ConnectionError("no answer from JetStream: " + data.split(b"\r\n")[0].decode())
            elif parts[0] == b"-ERR":
                raise ConnectionError(b" ".join(parts).decode())

    def next_message(self, stream, subject, seq):
        """The first message of subject at or after seq, as (seq, data), or
        None when there is none yet."""
        req = json.dumps({"seq": seq, "next_by_subj": subject}).encode()
        resp = json.loads(self.request(f"$JS.API.STREAM.MSG.GET.{stream}", req))
        if "error" in resp:
            if resp["error"].get("code") == 404:
                return None
            raise ConnectionError(f"read {subject}: {resp['error']}")
        msg = resp["message"]
        return msg["seq"], base64.b64decode(msg.get("data", ""))

    def close(self):
        self.sock.close()


# --------------------------------------------------------------------------
# One task at one epoch


class NotOwner(Exception):
    """409 not_owner: another member owns the task now. Stop it, don't
    release it."""


class Resume(Exception):
    """409 resume: the agent holds a commit this run was not told of. Don't
    retry it; restart from the checkpoint in /assignment, which includes it."""


class TaskRun:
    """Processes one task at one epoch in a thread of its own, from the
    checkpoint the view gave, until it is stopped."""

    def __init__(self, worker, view_task):
        self.w = worker
        self.id = view_task["id"]
        self.epoch = view_task["epoch"]
        self.checkpoint = base64.b64decode(view_task.get("checkpoint") or "")
        self.stateful = view_task["stateful"]
        self.stopping = threading.Event()
        self.release_on_stop = False
        self.thread = threading.Thread(target=self.run, name=f"task-{self.id}", daemon=True)

    def start(self):
        self.thread.start()

    def stop(self, release):
        """Asks the task to stop: a final commit, then (if revoked) a release."""
        self.release_on_stop = self.release_on_stop or release
        self.stopping.set()

    def run(self):
        log(f"task {self.id} epoch {self.epoch}: start")
        released = False
        while True:
            try:
                if self.stateful:
                    self.count()
                else:
                    self.stopping.wait()  # this job has no stateless work
                break
            except NotOwner:
                log(f"task {self.id} epoch {self.epoch}: not the owner any more; leaving it alone")
                if BREAK != "ignore-not-owner":
                    self.w.refused(self)
                    return
            except Resume:
                log(f"task {self.id} epoch {self.epoch}: resume; restarting from the view's checkpoint")
                cp = self.w.checkpoint_of(self.id, self.epoch)
                if cp is None:
                    return  # the task left this member; the worker stops this run
                self.checkpoint = cp
            except Exception as e:  # a bug or an unreachable NATS: restart from the checkpoint
                log(f"task {self.id} epoch {self.epoch}: {e!r}; restarting from the checkpoint in 1 s")
                if self.stopping.wait(1):
                    break
                cp = self.w.checkpoint_of(self.id, self.epoch)
                if cp is None:
                    return
                self.checkpoint = cp
        if self.release_on_stop and BREAK != "never-release":
            released = self.release()
        if released and BREAK == "commit-after-release":
            try:
                self.w.api.commit(self.id, {}, self.checkpoint, self.epoch)
            except (ApiError, Unreachable):
                pass
        log(f"task {self.id} epoch {self.epoch}: stopped")

    def count(self):
        subject = f"input.{self.w.group}.{self.id}"
        pos = struct.unpack(">Q", self.checkpoint)[0] if self.checkpoint else 0
        if BREAK == "ignore-checkpoint":
            pos = 0
        # committed caches the counts this run committed; it starts empty,
        # because after a hand-off the counts are in the sidecar.
        committed, pending, pending_n, first = {}, {}, 0, 0.0
        nats = Nats(self.w.nats_url)
        try:
            while not self.stopping.is_set():
                msg = nats.next_message(self.w.stream, subject, pos + 1)
                if msg is None:
                    if pending_n and time.monotonic() - first >= MAX_DELAY:
                        self.commit(committed, pending, pos)
                        pending, pending_n = {}, 0
                    self.stopping.wait(0.01)  # no input yet
                    continue
                pos, key = msg[0], msg[1].decode(errors="replace")
                if pending_n == 0:
                    first = time.monotonic()
                pending[key] = pending.get(key, 0) + 1
                pending_n += 1
                if pending_n >= BATCH or time.monotonic() - first >= MAX_DELAY:
                    self.commit(committed, pending, pos)
                    pending, pending_n = {}, 0
            # Stopped (revoked, moved or shutting down): the final commit.
            if pending_n:
                self.commit(committed, pending, pos)
        finally:
            nats.close()

    def commit(self, committed, pending, pos):
        """Commits the new counts of the pending keys with checkpoint pos.
        Retries while the agent is unreachable or answers 503: if a retried
        commit had landed, the agent answers 409 resume."""
        missing = [key for key in pending if key not in committed]
        if missing:
            committed.update(self.w.api.counts(self.id, missing))
        puts = {key: str(committed[key] + n) for key, n in pending.items()}
        checkpoint = struct.pack(">Q", pos)
        deadline = time.monotonic() + STOP_TIMEOUT
        backoff, retried = 0.05, False
        while True:
            try:
                self.w.api.commit(self.id, puts, checkpoint, self.epoch)
                break
            except ApiError as e:
                if e.code == "not_owner":
                    raise NotOwner() from e
                if e.code == "resume":
                    if BREAK == "retry-resume" and not retried:
                        retried = True
                        continue
                    raise Resume() from e
                if e.code != "unavailable" and e.status < 500:
                    raise
            except Unreachable:
                pass
            if self.stopping.is_set() and time.monotonic() > deadline:
                raise TimeoutError("final commit: the agent did not answer")
            time.sleep(backoff)
            backoff = min(backoff * 2, 1)
        committed.update({k: int(v) for k, v in puts.items()})
        self.checkpoint = checkpoint

    def release(self):
        """Releases the stopped task: the next owner waits for this."""
        return self.w.release(self.id, self.epoch)


# --------------------------------------------------------------------------
# Following the assignment


class Worker:
    def __init__(self, api, nats_url, group):
        self.api, self.nats_url, self.group = api, nats_url, group
        self.stream = f"INPUT_{group}"
        self.runs = {}  # task → TaskRun of the latest epoch started here
        self.done = set()  # (task, epoch) stopped after not_owner, or released
        self.lock = threading.Lock()

    def refused(self, run):
        with self.lock:
            self.done.add((run.id, run.epoch))

    def release(self, task, epoch):
        """POST release?epoch=, retried while the agent is unreachable."""
        deadline = time.monotonic() + STOP_TIMEOUT
        while True:
            try:
                self.api.release(task, epoch)
                log(f"task {task} epoch {epoch}: released")
                return True
            except ApiError as e:
                if e.code in ("not_owner", "not_revoked", "unknown_task"):
                    return False  # nothing to hand over from here
                if e.code != "unavailable" and e.status < 500:
                    log(f"task {task}: release refused: {e}")
                    return False
            except Unreachable:
                pass
            if time.monotonic() > deadline:
                log(f"task {task}: gave up releasing; the agent moves it after its release timeout")
                return False
            time.sleep(0.1)

    def checkpoint_of(self, task, epoch):
        """The checkpoint the agent holds for task at epoch, once it shows the
        task active again (while it replays a commit, it shows a learner).
        None if the task left this member."""
        after = 0
        while True:
            try:
                view = self.api.assignment(after, POLL_WAIT if after else 0)
            except (ApiError, Unreachable):
                time.sleep(0.2)
                continue
            t = next((t for t in view["tasks"] if t["id"] == task and t["epoch"] == epoch), None)
            if t is None or task in view["revoke"]:
                return None
            if t["role"] == "active":
                return base64.b64decode(t.get("checkpoint") or "")
            after = view["version"]

    def apply(self, view):
        """Starts and stops tasks to match the view."""
        revoked = set(view["revoke"])
        active = {t["id"]: t for t in view["tasks"] if t["role"] == "active" and t["id"] not in revoked}
        for task, run in list(self.runs.items()):
            if run.stopping.is_set():
                continue
            if task in revoked:
                log(f"task {task}: revoked")
                run.stop(release=True)
            elif task not in active:
                run.stop(release=False)  # moved without a revoke: nothing to release
            elif active[task]["epoch"] != run.epoch:
                run.stop(release=False)  # a new ownership: start again below
        for task, t in active.items():
            run = self.runs.get(task)
            if run and run.epoch == t["epoch"]:
                continue  # running at this epoch already
            if (task, t["epoch"]) in self.done:
                continue  # refused with not_owner at this epoch: leave it alone
            self.runs[task] = TaskRun(self, t)
            self.runs[task].start()
        # A task revoked before this worker ever started it must be released
        # too: its next owner is waiting.
        for t in view["tasks"]:
            run = self.runs.get(t["id"])
            if t["id"] in revoked and t["role"] == "active" and (run is None or run.epoch != t["epoch"]) and (t["id"], t["epoch"]) not in self.done:
                with self.lock:
                    self.done.add((t["id"], t["epoch"]))
                if BREAK != "never-release":
                    threading.Thread(target=self.release, args=(t["id"], t["epoch"]), daemon=True).start()

    def stop_all(self):
        for run in self.runs.values():
            run.stop(release=False)
        for run in self.runs.values():
            run.thread.join(STOP_TIMEOUT)

    def run(self):
        try:
            self.follow()
        except Stopped:
            log("signalled: stopping every task")
        self.stop_all()

    def follow(self):
        after, wait, backoff, polls = 0, 0, 0.1, 0
        while True:
            try:
                view = self.api.assignment(after, wait)
            except (ApiError, Unreachable) as e:
                # An error, not a change: retry shortly (503 has Retry-After: 1).
                log(f"poll: {e}; retrying in {backoff:.1f} s")
                time.sleep(backoff)
                backoff, wait = min(backoff * 2, 1), 0
                continue
            backoff, wait, after = 0.1, POLL_WAIT, view["version"]
            self.apply(view)
            if view["shutdown"] or view["state"] == "done":
                log("the agent says shutdown")
                return
            if BREAK == "sleep-poll" and polls < 5:
                polls += 1
                time.sleep(3)
            # Poll again at once: the sooner a change is seen, the shorter a hand-off.


class Stopped(Exception):
    """SIGTERM or SIGINT."""


def on_signal(*_):
    raise Stopped()


def main():
    global BREAK
    p = argparse.ArgumentParser(description="The counter job as a handoff worker in Python.")
    p.add_argument("--sidecar", default=os.environ.get("SIDECAR_URL", "http://127.0.0.1:7070"))
    p.add_argument("--token", default=os.environ.get("SIDECAR_TOKEN", ""))
    p.add_argument("--nats", default=os.environ.get("NATS_URL", "nats://127.0.0.1:4222"))
    p.add_argument("--group", default=os.environ.get("HANDOFF_GROUP", "demo"))
    p.add_argument("--break", dest="brk", default="",
                   choices=["", "ignore-checkpoint", "no-timeout", "never-release", "commit-after-release", "retry-resume", "ignore-not-owner", "sleep-poll"],
                   help="for tests of handoff conformance only: break the contract this way")
    args = p.parse_args()
    BREAK = args.brk
    w = Worker(Sidecar(args.sidecar, args.token), args.nats, args.group)
    # SIGTERM or Ctrl-C: stop every task (final commits), then exit 0. The
    # handler raises, so that a long-poll in progress does not delay it.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log(f"worker started: sidecar {args.sidecar}, input {args.nats} group {args.group}")
    w.run()
    log("worker stopped")


if __name__ == "__main__":
    main()
