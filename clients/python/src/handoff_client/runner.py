"""run follows the member's assignment, as the Go client's client.Run does:
it runs a handler per active task from the task's checkpoint, stops it on a
revoke and releases the task once the handler made its final commit, leaves
a task alone after not_owner, restarts it after resume or a failure, exits
on shutdown, and prepares a task's input while it is a learner or standby
here."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Generic, Iterable, List, Mapping, Optional, Set, Tuple, TypeVar

from .client import Cancel, Client, Puts
from .errors import Cancelled, NotOwner, Resume, retryable
from .types import KV, Bytes, CommitResult, TaskView, View, to_bytes

DEFAULT_POLL_WAIT = 30.0
"""The long-poll's wait, seconds."""
DEFAULT_RESTART_BACKOFF = 0.5
"""The pause before the first restart of a failed task, seconds; it doubles up to DEFAULT_MAX_RESTART_BACKOFF."""
DEFAULT_MAX_RESTART_BACKOFF = 30.0
DEFAULT_STOP_TIMEOUT = 10.0
"""How long a stopped task may still call the agent (its final commit), and its release be retried, seconds."""

P = TypeVar("P")

logger = logging.getLogger("handoff_client")
"""The runner's logger, unless run is given another."""


@dataclass(frozen=True)
class TaskInfo:
    """A stateful task that is a learner or standby here, as prepare sees it."""

    id: str
    role: str
    """learner or standby."""
    epoch: int
    cancelled: threading.Event
    """Set when the task leaves this member without becoming active here,
    when the run ends, or when the task becomes active here before prepare
    returned: the handler then starts with whatever prepare returns, so
    return promptly."""
    checkpoint: Optional[bytes] = None
    """The checkpoint this member's copy has applied, when the agent gives
    it: a hint of where the task's input will resume. The task's real start
    is the checkpoint of its activation (Task.checkpoint), at or after it."""
    seq: Optional[int] = None
    """The changelog sequence this member's copy has applied, when the agent gives it."""


@dataclass(frozen=True)
class Event:
    """Something the runner did, for observability (on_event)."""

    type: str
    """prepare, discard, start, restart, refused, stop, release or shutdown."""
    task: str = ""
    epoch: int = 0
    checkpoint: Optional[bytes] = None
    """start: where the task starts; stop: its last commit's; prepare: the hint."""
    seq: int = 0
    """stop: the last commit's sequence; release: the task's last commit's."""
    role: str = ""
    """prepare: the task's role."""
    code: str = ""
    """refused: the API's code."""
    error: Optional[BaseException] = None
    """restart: why."""
    backoff: float = 0.0
    """restart: the pause before it, seconds."""
    time: datetime = field(default_factory=lambda: datetime.now(timezone.utc))


class Task(Generic[P]):
    """The task an active task's handler runs, at one epoch.

    Its commit, get, get_many and scan still work for stop_timeout after the
    task was stopped, for the final commit; then they raise Cancelled."""

    def __init__(self, sup: "_Supervisor[P]", tv: TaskView, prepared: Optional[P]) -> None:
        self._sup = sup
        self.id: str = tv.id
        self.epoch: int = tv.epoch
        """The ownership this run belongs to; commits and the release send it."""
        self.checkpoint: Optional[bytes] = tv.checkpoint
        """The input position to resume from (None: from the beginning)."""
        self.stateful: bool = tv.stateful
        self.client: Client = sup.r.client
        self.stopped: threading.Event = sup.stopper
        """Set when the task must stop: stop consuming, make the final commit and return."""
        self.prepared: Optional[P] = prepared
        """What prepare returned for this task, on the first run after the task
        became active here; None otherwise (no prepare, it failed, or a
        restart: the first run owned it). The handler owns it."""

    def commit(self, *, puts: Optional[Puts] = None, deletes: Optional[Iterable[Bytes]] = None, checkpoint: Optional[Bytes] = None) -> CommitResult:
        """Commits puts, deletes and checkpoint (None keeps the previous one)
        at the task's epoch. It retries while the agent is unreachable or
        unavailable (a retry of a commit that had landed is refused with
        Resume, which the runner handles by restarting the task from the
        view's checkpoint)."""
        return self._sup.commit(self.epoch, puts, deletes, checkpoint)

    def get(self, key: Bytes) -> Optional[bytes]:
        """The value of key, or None; see Client.get."""
        return self.client.get(self.id, key, cancel=self._sup.calls)

    def get_many(self, keys: List[Bytes]) -> List[Optional[bytes]]:
        """The values of keys, None for absent ones; see Client.get_many."""
        return self.client.get_many(self.id, keys, cancel=self._sup.calls)

    def scan(self, *, prefix: Optional[Bytes] = None, start: Optional[Bytes] = None, limit: int = 0) -> List[KV]:
        """The task's keys and values; see Client.scan."""
        return self.client.scan(self.id, prefix=prefix, start=start, limit=limit, cancel=self._sup.calls)


Handler = Callable[[Task[P]], None]
"""Processes one active task until task.stopped is set, then makes its final
commit and returns. Raising restarts the task from its latest checkpoint
after a backoff, except NotOwner (the task is left alone until the agent's
view changes) and Resume (it restarts at once from the view's checkpoint).
Returning before the stop means the task has nothing more to do here; it is
released when revoked."""

Prepare = Callable[[TaskInfo], P]
"""Readies a task's input while the task is a learner or standby here (an
open connection, a reader positioned at the hint), so that the handler
processes at once when the task becomes active. It runs in a thread of its
own; what it returns is handed to the handler (Task.prepared), which owns it
from then on. If the task leaves without becoming active here, the runner
sets info.cancelled and calls the value's close(), if it has one."""


class _Preparation(Generic[P]):
    def __init__(self, info: TaskInfo) -> None:
        self.info = info
        self.settled = threading.Event()
        self.value: Optional[P] = None
        self.error: Optional[BaseException] = None


@dataclass
class _CommitPoint:
    epoch: int
    seq: int
    checkpoint: Optional[bytes]


def _prepare(p: _Preparation[P], prepare: Prepare[P]) -> None:
    """Runs prepare for p, in the thread of p."""
    try:
        p.value = prepare(p.info)
    except Exception as e:
        p.error = e
    finally:
        p.settled.set()


def _close(value: Any) -> None:
    close = getattr(value, "close", None)
    if callable(close):
        close()


class Runner(Generic[P]):
    """Follows the member's assignment and runs handler for each task that is
    active here; see run, whose arguments it takes. run() runs it in the
    calling thread until shutdown or stop(); stop() may be called from any
    thread."""

    def __init__(
        self,
        handler: Handler[P],
        *,
        client: Optional[Client] = None,
        prepare: Optional[Prepare[P]] = None,
        on_event: Optional[Callable[[Event], None]] = None,
        log: Optional[logging.Logger] = None,
        handle_signals: bool = True,
        poll_wait: float = DEFAULT_POLL_WAIT,
        restart_backoff: float = DEFAULT_RESTART_BACKOFF,
        max_restart_backoff: float = DEFAULT_MAX_RESTART_BACKOFF,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT,
    ) -> None:
        self.handler = handler
        self._own_client = client is None
        self.client = client if client is not None else Client.from_env()
        self.prepare = prepare
        self.on_event = on_event
        self.log = log or logger
        self.handle_signals = handle_signals
        self.poll_wait = poll_wait
        self.restart_backoff = restart_backoff
        self.max_restart_backoff = max_restart_backoff
        self.stop_timeout = stop_timeout

        self._stop = Cancel()
        self._mu = threading.RLock()
        self._exited = threading.Condition(self._mu)
        self._emit_mu = threading.Lock()
        self._tasks: Dict[str, _Supervisor[P]] = {}
        self._preparations: Dict[str, _Preparation[P]] = {}
        self._released_idle: Dict[str, int] = {}  # task → the epoch a never-run revoked task was released at
        self._last_commit: Dict[str, _CommitPoint] = {}  # task → where the runs that ended left it
        self._background: Set[threading.Thread] = set()
        self._closing = False

    def stop(self) -> None:
        """Ends the run as SIGTERM does: every task stops (final commits),
        then run returns."""
        self._stop.set()

    # -- logging and events

    def _logf(self, level: int, message: str, **fields: Any) -> None:
        if fields:
            message += " " + " ".join(f"{k}={_fmt(v)}" for k, v in fields.items())
        try:
            self.log.log(level, message)
        except Exception:  # a logger's failure is not the run's
            pass

    def _emit(self, **kw: Any) -> None:
        if self.on_event is None:
            return
        with self._emit_mu:
            try:
                self.on_event(Event(**kw))
            except Exception as e:
                self._logf(logging.WARNING, "on_event raised", error=e)

    def _background_run(self, name: str, fn: Callable[[], None]) -> None:
        """Runs fn in a thread the run waits for before it returns."""

        def body() -> None:
            try:
                fn()
            except Exception as e:
                self._logf(logging.ERROR, "background work failed", error=e)
            finally:
                with self._mu:
                    self._background.discard(threading.current_thread())

        t = threading.Thread(target=body, name=name, daemon=True)
        with self._mu:
            self._background.add(t)
        t.start()

    # -- the run

    def run(self) -> bool:
        """Runs until the agent says shutdown (True) or stop() (False). It
        returns once every handler it started has returned."""
        restore = self._handle_signals() if self.handle_signals and threading.current_thread() is threading.main_thread() else None
        result: List[bool] = []
        failure: List[BaseException] = []

        def body() -> None:
            try:
                result.append(self._run())
            except BaseException as e:  # pragma: no cover - a bug of the runner's
                failure.append(e)

        try:
            # The poll loop runs in a thread of its own, so that this thread
            # only waits while a signal may arrive: the handler then never
            # finds a lock of the run's held by the thread it interrupted.
            t = threading.Thread(target=body, name="handoff-poll", daemon=True)
            t.start()
            t.join()
        finally:
            if restore:
                restore()
            if self._own_client:
                self.client.close()
        if failure:
            raise failure[0]
        return result[0]

    def _run(self) -> bool:
        shutdown = False
        try:
            shutdown = self._poll()
        finally:
            with self._mu:
                self._stop_all()
                while self._tasks:
                    self._exited.wait()
                for task_id in list(self._preparations):
                    self._discard(task_id)
            while True:
                with self._mu:
                    pending = list(self._background)
                if not pending:
                    break
                for t in pending:
                    t.join()
        if shutdown:
            self._emit(type="shutdown")
            self._logf(logging.INFO, "the agent says shutdown: every task is stopped")
        return shutdown

    def _handle_signals(self) -> Callable[[], None]:
        """SIGTERM and SIGINT end the run; a second one kills the process."""
        previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for s, h in previous.items():
                signal.signal(s, h)

        def on_signal(signum: int, _frame: Any) -> None:
            if self._stop.is_set():
                restore()
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
                return
            self._logf(logging.INFO, f"{signal.Signals(signum).name}: stopping every task (send it again to exit at once)")
            self.stop()

        for s in previous:
            signal.signal(s, on_signal)
        return restore

    def _poll(self) -> bool:
        """Long-polls the assignment and applies each view, until stop()
        (False) or a view says shutdown (True). The first request, and the
        first after an error, does not wait, so that the runner sees the
        current view at once."""
        after, current, failures = 0, False, 0
        while not self._stop.is_set():
            try:
                v = self.client.assignment(after, self.poll_wait if current else 0, cancel=self._stop)
            except Cancelled:
                break
            except Exception as e:
                current = False
                failures += 1
                # At most 1 s: once the agent answers again, the worker is
                # attached again within a second (docs/api.md).
                backoff = min(0.05 * 2 ** min(failures, 10), 1.0)
                self._logf(logging.WARNING, "read the assignment; retrying", error=e, backoff=backoff)
                self._stop.wait(backoff)
                continue
            failures, current, after = 0, True, v.version
            if self._apply(v):
                return True
        return False

    def _apply(self, v: View) -> bool:
        """Starts and stops tasks to match v; reports whether v says shutdown."""
        revoked = set(v.revoke)
        want = {tv.id: tv for tv in v.tasks if tv.role == "active" and tv.id not in revoked}
        with self._mu:
            for task_id, s in list(self._tasks.items()):
                tv = want.get(task_id)
                if s.stopping:
                    # Start it again once it has stopped, if it is still ours then.
                    s.next = tv
                    if task_id in revoked:
                        s.release = True
                    continue
                if task_id in revoked:
                    self._logf(logging.INFO, "task revoked: stopping it", task=task_id, epoch=s.tv.epoch)
                    s.stop(True)
                elif tv is None:
                    # Moved away without a revoke (failover, or the group's
                    # last member leaving): there is nothing to release.
                    self._logf(logging.INFO, "task no longer active here: stopping it", task=task_id, epoch=s.tv.epoch)
                    s.stop(False)
                elif tv.epoch != s.tv.epoch:
                    self._logf(logging.INFO, "task epoch changed: restarting it", task=task_id, epoch=tv.epoch)
                    s.stop(False)
                    s.next = tv
            for tv in want.values():
                if tv.id not in self._tasks:
                    self._start(tv)
            self._release_idle(v, revoked)
            self._prepare_all(v, revoked)
        return v.shutdown or v.state == "done"

    def _release_idle(self, v: View, revoked: Set[str]) -> None:
        """Releases the revoked tasks this worker never ran (revoked before
        it started them): there is nothing to stop, and the move should not
        wait for the agent's release timeout."""
        for tv in v.tasks:
            if tv.id not in revoked or tv.role != "active":
                continue
            if tv.id in self._tasks or self._released_idle.get(tv.id) == tv.epoch:
                continue
            self._released_idle[tv.id] = tv.epoch
            task_id, epoch = tv.id, tv.epoch
            self._background_run(f"release-{task_id}", lambda: self._release(task_id, epoch, "a revoked task that never ran here"))

    def _release(self, task_id: str, epoch: int, what: str = "task") -> None:
        """Releases task at epoch, retrying while the agent is unreachable or
        unavailable, for up to stop_timeout."""
        deadline = time.monotonic() + self.stop_timeout
        attempt = 0
        while True:
            left = deadline - time.monotonic()
            try:
                res = self.client.release(task_id, epoch, timeout=max(0.001, min(left, self.client.call_timeout)))
                self._emit(type="release", task=task_id, epoch=res.epoch, seq=res.seq)
                self._logf(logging.INFO, f"released {what}", task=task_id, epoch=res.epoch, seq=res.seq)
                return
            except Exception as e:
                if not retryable(e):
                    # not_revoked, unknown_task, not_owner: the task left
                    # without a revoke, or moved on; nothing to hand over.
                    self._logf(logging.INFO, "release not needed", task=task_id, epoch=epoch, error=e)
                    return
                backoff = min(0.025 * 2 ** min(attempt, 6), 1.0)
                attempt += 1
                if time.monotonic() + backoff >= deadline:
                    self._logf(logging.ERROR, "gave up releasing the task; the agent hands it over after its release timeout", task=task_id, epoch=epoch, error=e)
                    return
                self._logf(logging.WARNING, "release the task; retrying", task=task_id, epoch=epoch, error=e, backoff=backoff)
                time.sleep(backoff)

    def _prepare_all(self, v: View, revoked: Set[str]) -> None:
        """Calls prepare for each stateful task that is a learner or standby
        here and has none yet, and discards the preparations of tasks that
        left without becoming active here (a task started here has taken its
        preparation already)."""
        here = {tv.id: tv for tv in v.tasks}
        for task_id in list(self._preparations):
            if task_id not in here or task_id in revoked:
                self._discard(task_id)
        prepare = self.prepare
        if prepare is None or self._closing:
            return
        for tv in v.tasks:
            if not tv.stateful or tv.role not in ("learner", "standby") or tv.id in self._preparations:
                continue
            info = TaskInfo(id=tv.id, role=tv.role, epoch=tv.epoch, cancelled=threading.Event(), checkpoint=tv.checkpoint, seq=tv.seq)
            p: _Preparation[P] = _Preparation(info)
            self._preparations[tv.id] = p
            self._emit(type="prepare", task=tv.id, epoch=tv.epoch, role=tv.role, checkpoint=tv.checkpoint, seq=tv.seq or 0)
            self._logf(logging.DEBUG, "preparing the task's input", task=tv.id, role=tv.role)

            # A thread of its own: prepare never delays the poll loop.
            threading.Thread(target=_prepare, args=(p, prepare), name=f"prepare-{tv.id}", daemon=True).start()

    def _discard(self, task_id: str) -> None:
        """Cancels the preparation of task and closes what it made, once made."""
        found = self._preparations.pop(task_id, None)
        if found is None:
            return
        p: _Preparation[P] = found
        p.info.cancelled.set()

        def dispose() -> None:
            p.settled.wait()
            if p.error is None:
                _close(p.value)
            self._emit(type="discard", task=task_id)
            self._logf(logging.DEBUG, "discarded the task's preparation: it left without becoming active here", task=task_id)

        self._background_run(f"discard-{task_id}", dispose)

    def _start(self, tv: TaskView) -> None:
        # A view that starts a task again at the epoch of an earlier run here
        # may have been built while that run was still committing: its last
        # commit is then the newer checkpoint (only this worker commits at
        # this epoch), and resuming from the view's would process input
        # twice. The view's seq tells: a copy that has applied past that
        # commit holds the newer checkpoint itself.
        lc = self._last_commit.get(tv.id)
        if lc is not None and lc.epoch == tv.epoch and lc.seq > (tv.seq or 0):
            tv = TaskView(tv.id, tv.role, tv.stateful, tv.epoch, tv.lag, lc.checkpoint, tv.seq)
        s = _Supervisor(self, tv, self._preparations.pop(tv.id, None))
        self._tasks[tv.id] = s
        s.thread.start()

    def _exit(self, s: "_Supervisor[P]") -> None:
        """Forgets a supervisor that ended, and starts the task again if the
        view asked for it meanwhile."""
        with self._mu:
            del self._tasks[s.tv.id]
            if s.release:
                self._released_idle[s.tv.id] = s.tv.epoch
            if s.seq > 0:
                self._last_commit[s.tv.id] = _CommitPoint(s.tv.epoch, s.seq, s.checkpoint)
            self._exited.notify_all()
            if s.next is not None and not self._closing:
                self._start(s.next)

    def _stop_all(self) -> None:
        self._closing = True
        for s in self._tasks.values():
            if not s.stopping:
                s.stop(False)


class _Supervisor(Generic[P]):
    """Runs one task at one epoch: its handler, its restarts, and the release
    after it stopped."""

    def __init__(self, r: Runner[P], tv: TaskView, preparation: Optional[_Preparation[P]]) -> None:
        self.r = r
        self.tv = tv
        self.preparation = preparation
        self.stopper = Cancel()  # set when the task must stop
        self.calls = Cancel()  # set stop_timeout after the stop: the task's calls end then
        self._timer: Optional[threading.Timer] = None
        # Owned by the runner, under its lock.
        self.stopping = False
        self.next: Optional[TaskView] = None
        self.release = False
        # The last acknowledged commit's sequence and checkpoint (or the start's).
        self._mu = threading.Lock()
        self.seq = 0
        self.checkpoint = tv.checkpoint
        self.thread = threading.Thread(target=self._main, name=f"task-{tv.id}", daemon=True)

    def stop(self, release: bool) -> None:
        self.stopping = True
        if release:
            self.release = True
        if self.stopper.is_set():
            return
        self.stopper.set()
        self._timer = threading.Timer(self.r.stop_timeout, self.calls.set)
        self._timer.daemon = True
        self._timer.start()

    def _main(self) -> None:
        try:
            self._supervise()
        except Exception as e:  # pragma: no cover - a bug of the runner's
            self.r._logf(logging.ERROR, "task supervisor failed", task=self.tv.id, error=e)
        finally:
            if self._timer is not None:
                self._timer.cancel()
            self.calls.set()
            self.r._exit(self)

    def _supervise(self) -> None:
        r, tv = self.r, self.tv
        checkpoint = tv.checkpoint
        prepared = self._take_prepared()
        failures = 0
        while not self.stopper.is_set():
            r._emit(type="start", task=tv.id, epoch=tv.epoch, checkpoint=checkpoint)
            r._logf(logging.DEBUG, "task starting", task=tv.id, epoch=tv.epoch)
            started = time.monotonic()
            error: Optional[BaseException] = None
            try:
                run_tv = TaskView(tv.id, tv.role, tv.stateful, tv.epoch, tv.lag, checkpoint, tv.seq)
                r.handler(Task(self, run_tv, prepared))
            except Exception as e:
                error = e
            prepared = None  # the first run owns it
            if self.stopper.is_set():
                if error is not None and not isinstance(error, Cancelled):
                    r._logf(logging.WARNING, "task handler failed while stopping", task=tv.id, epoch=tv.epoch, error=error)
                break
            if isinstance(error, NotOwner):
                r._emit(type="refused", task=tv.id, epoch=tv.epoch, code=error.code)
                r._logf(logging.INFO, "the agent says this member is not the task's owner: leaving the task alone", task=tv.id, epoch=tv.epoch, error=error)
                self.stopper.wait()
                return
            if error is None:
                r._logf(logging.INFO, "task handler returned: the task stays idle until it is revoked", task=tv.id, epoch=tv.epoch)
                self.stopper.wait()
                break
            backoff = 0.0
            if isinstance(error, Resume):
                # Not a failure: the agent holds a commit the handler was
                # not told of. Restart at once from the checkpoint that
                # includes it.
                r._logf(logging.INFO, "the agent holds a newer checkpoint: restarting the task from it", task=tv.id, epoch=tv.epoch)
            else:
                if time.monotonic() - started > r.max_restart_backoff:
                    failures = 0  # it ran well for a while
                failures += 1
                backoff = min(r.restart_backoff * 2 ** min(failures - 1, 20), r.max_restart_backoff)
                r._logf(logging.WARNING, "task handler failed: restarting it from its latest checkpoint", task=tv.id, epoch=tv.epoch, error=error, backoff=backoff)
            r._emit(type="restart", task=tv.id, epoch=tv.epoch, error=error, backoff=backoff)
            if not self.stopper.wait(backoff):
                checkpoint = self._latest_checkpoint(resume=isinstance(error, Resume))
        with self._mu:
            seq, last = self.seq, self.checkpoint
        r._emit(type="stop", task=tv.id, epoch=tv.epoch, seq=seq, checkpoint=last)
        r._logf(logging.DEBUG, "task stopped", task=tv.id, epoch=tv.epoch)
        if self.release:
            r._release(tv.id, tv.epoch)

    def _take_prepared(self) -> Optional[P]:
        """Takes the task's preparation, if it has one. A prepare still
        running has its cancelled set (the task is active now: it should
        return at once) and is waited for, unless the task is stopped first:
        then what it made is closed once made."""
        found, self.preparation = self.preparation, None
        if found is None:
            return None
        p: _Preparation[P] = found
        if not p.settled.is_set():
            p.info.cancelled.set()
        while not p.settled.wait(0.01):
            if self.stopper.is_set():

                def dispose() -> None:
                    p.settled.wait()
                    if p.error is None:
                        _close(p.value)

                self.r._background_run(f"discard-{self.tv.id}", dispose)
                return None
        if p.error is not None:
            self.r._logf(logging.WARNING, "the task's prepare failed: its handler starts without it", task=self.tv.id, error=p.error)
            return None
        return p.value

    def commit(self, epoch: int, puts: Optional[Puts], deletes: Optional[Iterable[Bytes]], checkpoint: Optional[Bytes]) -> CommitResult:
        """Commits at the task's epoch, retrying what may be retried."""
        # Materialized once: a retry sends the same commit.
        p: List[Tuple[Bytes, Bytes]] = list(puts.items()) if isinstance(puts, Mapping) else list(puts or ())
        d = list(deletes or ())
        attempt = 0
        while True:
            try:
                res = self.r.client.commit(self.tv.id, epoch=epoch, puts=p, deletes=d, checkpoint=checkpoint, cancel=self.calls)
            except Exception as e:
                if not retryable(e) or self.calls.is_set():
                    raise
                backoff = min(0.05 * 2 ** min(attempt, 5), 1.0)
                attempt += 1
                self.r._logf(logging.WARNING, "commit: retrying", task=self.tv.id, epoch=epoch, error=e, backoff=backoff)
                if self.calls.wait(backoff):
                    raise
                continue
            with self._mu:
                self.seq = res.seq
                if checkpoint is not None and len(checkpoint) > 0:
                    self.checkpoint = to_bytes(checkpoint)
            return res

    def _latest_checkpoint(self, resume: bool) -> Optional[bytes]:
        """The task's checkpoint as the agent has it. While the agent shows
        the task as a learner at this epoch, it is being activated again (its
        copy missed a commit and is catching up), and the checkpoint it will
        show once active may be newer than any acknowledged here: wait for
        it. When the agent cannot be read, the last checkpoint committed here
        is the fallback, except after Resume: the agent holds a commit this
        run was not told of, which only its view's checkpoint includes, so
        the read is retried until it answers or the task stops."""
        tv = self.tv
        after, failures = 0, 0
        while True:
            try:
                v = self.r.client.assignment(after, self.r.poll_wait, cancel=self.stopper)
            except Exception as e:  # Cancelled: the task stopped; Unreachable, ApiError
                if not resume or self.stopper.is_set():
                    self.r._logf(logging.DEBUG, "read the task's checkpoint; using the last one committed here", task=tv.id, error=e)
                    with self._mu:
                        return self.checkpoint
                failures += 1
                backoff = min(0.05 * 2 ** min(failures, 10), 1.0)
                self.r._logf(logging.WARNING, "read the task's checkpoint after resume; retrying", task=tv.id, error=e, backoff=backoff)
                after = 0
                self.stopper.wait(backoff)
                continue
            t = next((t for t in v.tasks if t.id == tv.id and t.epoch == tv.epoch), None)
            if t is None or t.role not in ("active", "learner"):
                with self._mu:
                    return self.checkpoint  # the task left: the runner stops this supervisor
            if t.role == "active":
                return t.checkpoint
            after = v.version


def run(
    handler: Handler[P],
    *,
    client: Optional[Client] = None,
    prepare: Optional[Prepare[P]] = None,
    on_event: Optional[Callable[[Event], None]] = None,
    log: Optional[logging.Logger] = None,
    handle_signals: bool = True,
    poll_wait: float = DEFAULT_POLL_WAIT,
    restart_backoff: float = DEFAULT_RESTART_BACKOFF,
    max_restart_backoff: float = DEFAULT_MAX_RESTART_BACKOFF,
    stop_timeout: float = DEFAULT_STOP_TIMEOUT,
) -> bool:
    """Follows the member's assignment and runs handler, each in a thread of
    its own, for each task that is active here, from the task's checkpoint,
    until the agent says shutdown (its view's shutdown, or state done:
    returns True) or the run is ended (SIGTERM, SIGINT, Runner.stop:
    False). It long-polls /assignment and reacts to each change at once:

    - a task that is revoked, or no longer active here, has task.stopped
      set; once its handler returns, a revoked task is released;
    - a task revoked before it ever ran here is released at once;
    - a task whose epoch changed is stopped and started again at the new one;
    - a stateful task that appears here as a learner or standby is prepared
      (prepare), and its handler gets what prepare made.

    client defaults to Client.from_env() (SIDECAR_URL, SIDECAR_TOKEN),
    closed when the run ends. Errors talking to the agent are logged and
    retried; run does not raise for them. It returns once every handler it
    started has returned. With handle_signals (and in the main thread),
    SIGTERM and SIGINT end the run; a second one kills the process."""
    return Runner(
        handler,
        client=client,
        prepare=prepare,
        on_event=on_event,
        log=log,
        handle_signals=handle_signals,
        poll_wait=poll_wait,
        restart_backoff=restart_backoff,
        max_restart_backoff=max_restart_backoff,
        stop_timeout=stop_timeout,
    ).run()


def _fmt(v: Any) -> str:
    if isinstance(v, (bytes, bytearray)):
        s = bytes(v).hex()
    elif isinstance(v, BaseException):
        s = str(v) or type(v).__name__
    elif isinstance(v, float):
        s = f"{v:g}"
    else:
        s = str(v)
    return repr(s) if any(c.isspace() for c in s) else s
