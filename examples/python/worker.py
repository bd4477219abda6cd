#!/usr/bin/env python3
"""A handoff worker in Python 3 on the handoff_client package (clients/python).

It does the job of the Go counter (examples/counter): for every stateful
task active on its member, it counts how often each key (a message's body)
occurs in the task's input, and commits the counts to the sidecar with the
input position reached as the checkpoint, exactly once across hand-offs.
docs/api.md is the contract; the package's runner follows it, and
`handoff conformance -- python3 worker.py` checks it.

The parts, top to bottom:

  Nats        the few lines of the NATS protocol needed to read the input
  Input       a task's input: a connection and a reader from a position on
  prepare     while a task is a learner or standby here: its input, ready
  count       the handler of an active task: read input, commit, final commit
  Counting    one run of a task's counting: its batches and their commits

The package's runner (handoff_client.run) does the rest: it follows
/assignment, starts and stops tasks, makes the release after a revoke,
leaves a task alone after not_owner, restarts it after resume, and exits on
shutdown. While a task is a learner or standby here, it calls prepare: the
worker connects to NATS and positions the task's reader (at the checkpoint
the agent's copy has applied, when the agent gives it, else after the
task's last input message), so that when the task becomes active it reads from its
checkpoint at once, with nothing to set up.

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

Run from a checkout, it uses the package beside it (clients/python/src) when
handoff_client is not installed (`pip install ./clients/python`).
"""

from __future__ import annotations

import argparse
import base64
import collections
import json
import logging
import os
import random
import socket
import struct
import sys
import threading
import time
import urllib.parse
from typing import Any, Deque, Dict, List, Optional, Tuple

try:
    import handoff_client  # noqa: F401
except ImportError:  # a checkout: the package's sources beside this example
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python", "src"))

from handoff_client import ApiError, Client, NotOwner, ReleaseResult, Resume, Task, TaskInfo, Unreachable, run

BATCH = 100  # most messages per commit
MAX_DELAY = 0.05  # longest time a read message waits for its commit, seconds
MAX_KEY_BYTES = 4096  # the agent's key limit: longer keys are skipped
READ_AHEAD = 1000  # most messages a prepared input reads ahead

# For tests of `handoff conformance` only: make the worker break the
# contract in one way (see --break). A real worker has nothing like it.
BREAK = ""

log = logging.getLogger("worker")

Msg = Tuple[int, bytes]  # an input message: its stream sequence and its body


# --------------------------------------------------------------------------
# The input: read a JetStream stream's messages by sequence, one request each


class Nats:
    """Just enough of the NATS protocol for request/reply: the worker reads
    its input with JetStream's "get the next message of a subject from a
    sequence on" request, so a task needs no consumer state at all."""

    def __init__(self, url: str) -> None:
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

    def _send(self, b: bytes) -> None:
        self.sock.sendall(b)

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("NATS closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _payload(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("NATS closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def request(self, subject: str, payload: bytes) -> bytes:
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

    def jsapi(self, subject: str, req: Dict[str, Any]) -> Dict[str, Any]:
        """Calls the JetStream API; the answer, with "error" if it is one."""
        res: Dict[str, Any] = json.loads(self.request(f"$JS.API.{subject}", json.dumps(req).encode()))
        return res

    def next_message(self, stream: str, subject: str, seq: int) -> Optional[Msg]:
        """The first message of subject at or after seq, as (seq, data), or
        None when there is none yet."""
        resp = self.jsapi(f"STREAM.MSG.GET.{stream}", {"seq": seq, "next_by_subj": subject})
        if "error" in resp:
            if resp["error"].get("code") == 404:
                return None
            raise ConnectionError(f"read {subject}: {resp['error']}")
        msg = resp["message"]
        return msg["seq"], base64.b64decode(msg.get("data", ""))

    def last_seq(self, stream: str, subject: str) -> int:
        """The sequence of subject's last message in stream now (0 while it
        has none): a later message of it has a higher one."""
        resp = self.jsapi(f"STREAM.MSG.GET.{stream}", {"last_by_subj": subject})
        if "error" in resp:
            if resp["error"].get("code") == 404:
                return 0
            raise ConnectionError(f"read {subject}: {resp['error']}")
        return int(resp["message"]["seq"])

    def close(self) -> None:
        self.sock.close()


class Input:
    """A task's input: a NATS connection and a reader of the task's subject.
    It delivers every message of the subject after a position, in order;
    what it has read ahead (a prepared input) it keeps, as long as it covers
    where the task starts."""

    def __init__(self, nats_url: str, stream: str, subject: str) -> None:
        self.nats = Nats(nats_url)
        self.stream, self.subject = stream, subject
        self.start = 1  # the first sequence the reader looked at: it has every message of the subject from there on to pos
        self.pos = 0  # the sequence of the last message read (ahead or delivered)
        self.ahead: Deque[Msg] = collections.deque()

    def position(self, after: int) -> None:
        """Delivers the messages after sequence after, forgetting any read ahead."""
        self.start, self.pos = after + 1, after
        self.ahead.clear()

    def read_ahead(self, most: int) -> None:
        """Reads up to most messages ahead of delivery, as far as there are."""
        while len(self.ahead) < most:
            m = self.nats.next_message(self.stream, self.subject, self.pos + 1)
            if m is None:
                return
            self.ahead.append(m)
            self.pos = m[0]

    def seek(self, after: int) -> bool:
        """Delivers the messages after sequence after. It keeps what it read
        ahead when that covers them (the reader started at or before after + 1),
        and reports whether it did."""
        if self.start > after + 1:
            self.position(after)
            return False
        while self.ahead and self.ahead[0][0] <= after:
            self.ahead.popleft()
        self.pos = max(self.pos, after)
        return True

    def next(self) -> Optional[Msg]:
        """The next message, or None when there is none yet."""
        if self.ahead:
            return self.ahead.popleft()
        m = self.nats.next_message(self.stream, self.subject, self.pos + 1)
        if m is not None:
            self.pos = m[0]
        return m

    def close(self) -> None:
        self.nats.close()


# --------------------------------------------------------------------------
# The job


class Counter:
    def __init__(self, nats_url: str, group: str) -> None:
        self.nats_url, self.group = nats_url, group
        self.stream = f"INPUT_{group}"

    def open(self, task_id: str) -> Input:
        return Input(self.nats_url, self.stream, f"input.{self.group}.{task_id}")

    def prepare(self, info: TaskInfo) -> Input:
        """Readies the input of a task that is a learner or standby here: a
        connection, and a reader positioned at the checkpoint the agent says
        its copy has applied (at or before where the task will start once
        active here) or, without one, after the task's last input message,
        with what follows read ahead."""
        inp = self.open(info.id)
        try:
            hint = decode_checkpoint(info.checkpoint) if info.checkpoint else inp.nats.last_seq(self.stream, inp.subject)
            inp.position(hint)
            inp.read_ahead(READ_AHEAD)
        except BaseException:
            inp.close()
            raise
        log.info(f"task {info.id}: input prepared as {info.role}, from {hint + 1} ({len(inp.ahead)} read ahead)")
        return inp

    def count(self, task: Task[Input]) -> None:
        """The handler: counts a stateful task's input from its checkpoint
        until the task is stopped, then makes its final commit."""
        if not task.stateful:
            if task.prepared is not None:
                task.prepared.close()
            task.stopped.wait()  # this job has no stateless work
            return
        start = 0 if BREAK == "ignore-checkpoint" else decode_checkpoint(task.checkpoint)
        inp = task.prepared
        if inp is not None and inp.seek(start):
            log.info(f"task {task.id} epoch {task.epoch}: starts on its prepared input from {start + 1} ({len(inp.ahead)} read ahead)")
        else:
            if inp is None:
                inp = self.open(task.id)
            inp.position(start)
            log.info(f"task {task.id} epoch {task.epoch}: starts from {start + 1}" + (" (on the prepared connection)" if task.prepared else ""))
        try:
            while True:
                run = Counting(task, inp)
                try:
                    run.count(start)
                    return
                except NotOwner:
                    if BREAK != "ignore-not-owner":
                        raise
                    # Broken on purpose: go on from the last commit.
                    log.info(f"task {task.id} epoch {task.epoch}: not the owner any more; going on anyway")
                    start = run.last
                    inp.position(start)
        finally:
            inp.close()


class Counting:
    """One run of a task's counting, from a position on."""

    def __init__(self, task: Task[Input], inp: Input) -> None:
        self.task, self.inp = task, inp
        # committed caches the counts this run committed; it starts empty,
        # because after a hand-off the counts are in the sidecar.
        self.committed: Dict[bytes, int] = {}
        self.last = 0  # the input sequence of the last message committed

    def count(self, start: int) -> None:
        task = self.task
        pending: Dict[bytes, int] = {}
        pending_n, first_at, pos, first = 0, 0.0, start, True
        self.last = start
        while not task.stopped.is_set():
            msg = self.inp.next()
            if msg is None:
                # Caught up: the first commit after a start does not wait
                # for the batching delay.
                if pending_n and (first or time.monotonic() - first_at >= MAX_DELAY):
                    self.commit(pending, pos)
                    pending, pending_n, first = {}, 0, False
                task.stopped.wait(0.01)  # no input yet
                continue
            pos, key = msg
            if pending_n == 0:
                first_at = time.monotonic()
            pending_n += 1
            if 0 < len(key) <= MAX_KEY_BYTES:
                pending[key] = pending.get(key, 0) + 1
            else:
                log.warning(f"task {task.id}: skipping message {pos}: its key is empty or longer than {MAX_KEY_BYTES} bytes")
            if pending_n >= BATCH or time.monotonic() - first_at >= MAX_DELAY:
                self.commit(pending, pos)
                pending, pending_n, first = {}, 0, False
        # Stopped (revoked, moved or shutting down): the final commit.
        if pending_n:
            self.commit(pending, pos)

    def commit(self, pending: Dict[bytes, int], pos: int) -> None:
        """Commits the new counts of the pending keys with checkpoint pos,
        reading the counts it does not hold in one batch get first. The
        runner's commit retries while the agent is unreachable or answers
        503; a refusal (NotOwner, Resume) ends the run, and the runner
        takes it from there."""
        missing = [k for k in pending if k not in self.committed]
        if missing:
            for k, v in zip(missing, self.task.get_many(list(missing))):
                self.committed[k] = int(v) if v is not None else 0
        puts = {k: self.committed[k] + n for k, n in pending.items()}
        self.task.commit(puts=[(k, str(n)) for k, n in puts.items()], checkpoint=encode_checkpoint(pos))
        self.committed.update(puts)
        self.last = pos


def encode_checkpoint(seq: int) -> bytes:
    return struct.pack(">Q", seq)


def decode_checkpoint(cp: Optional[bytes]) -> int:
    if not cp:
        return 0
    if len(cp) != 8:
        raise ValueError(f"checkpoint is {len(cp)} bytes, want the 8-byte input sequence this worker writes")
    return int(struct.unpack(">Q", cp)[0])


# --------------------------------------------------------------------------
# Broken on purpose, for the tests of handoff conformance


class BrokenClient(Client):
    """The client with the contract broken one way (--break)."""

    def __init__(self, url: str, *, token: str, brk: str) -> None:
        super().__init__(url, token=token)
        self.brk = brk
        self.polls = 0
        self.committed: Dict[Tuple[str, int], bytes] = {}  # the last checkpoint committed, per task and epoch

    def assignment(self, after: int = 0, wait: float = 0, **kw: Any) -> Any:
        if self.brk == "sleep-poll" and threading.current_thread().name == "handoff-poll":
            self.polls += 1
            if 2 <= self.polls <= 6:
                time.sleep(3)  # 3 s without a poll open, after each of the first five views
        return super().assignment(after, wait, **kw)

    def commit(self, task: str, **kw: Any) -> Any:
        if self.brk == "no-timeout":
            kw["timeout"] = None
        try:
            res = super().commit(task, **kw)
        except Resume:
            if self.brk != "retry-resume":
                raise
            res = super().commit(task, **kw)  # the refused commit, sent again
        if kw.get("checkpoint"):
            self.committed[(task, kw["epoch"])] = kw["checkpoint"]
        return res

    def release(self, task: str, epoch: int = 0, **kw: Any) -> ReleaseResult:
        if self.brk == "never-release":
            return ReleaseResult(task, epoch, 0)
        res = super().release(task, epoch, **kw)
        cp = self.committed.get((task, epoch))
        if self.brk == "commit-after-release" and cp is not None:
            try:
                super().commit(task, epoch=epoch, checkpoint=cp)
            except (ApiError, Unreachable):
                pass
        return res


def main() -> None:
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
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    client = BrokenClient(args.sidecar, token=args.token, brk=BREAK) if BREAK else Client(args.sidecar, token=args.token)
    counter = Counter(args.nats, args.group)
    log.info(f"worker started: sidecar {args.sidecar}, input {args.nats} group {args.group}")
    # SIGTERM or Ctrl-C: every task stops (final commits), then run returns.
    run(counter.count, client=client, prepare=counter.prepare)
    log.info("worker stopped")


if __name__ == "__main__":
    main()
