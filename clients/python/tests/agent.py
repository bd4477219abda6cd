"""Real agents for the tests: `handoff agent` processes with their embedded
NATS server, built from this repository (or HANDOFF_BIN)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Any, Callable, Dict, List, Optional, TypeVar

try:
    import handoff_client  # noqa: F401  the installed package
except ImportError:  # a checkout without it: the sources beside the tests
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

T = TypeVar("T")


def repo_root() -> str:
    """The first directory above the tests with a go.mod."""
    d = os.path.dirname(os.path.abspath(__file__))
    while not os.path.exists(os.path.join(d, "go.mod")):
        up = os.path.dirname(d)
        if up == d:
            raise RuntimeError("no go.mod above the tests: set HANDOFF_BIN to a handoff binary")
        d = up
    return d


_built: Optional[str] = None
_build_lock = threading.Lock()


def handoff_binary() -> str:
    """HANDOFF_BIN, or ./cmd/handoff built once per test process."""
    global _built
    if os.environ.get("HANDOFF_BIN"):
        return os.environ["HANDOFF_BIN"]
    with _build_lock:
        if _built is None:
            d = tempfile.mkdtemp(prefix="handoff-py-bin-")
            atexit.register(shutil.rmtree, d, True)
            b = os.path.join(d, "handoff")
            subprocess.run(["go", "build", "-o", b, "./cmd/handoff"], cwd=repo_root(), check=True)
            _built = b
    return _built


class Agent:
    """A running `handoff agent`."""

    def __init__(self, member: str, directory: str, proc: "subprocess.Popen[str]") -> None:
        self.member = member
        self.dir = directory
        self.proc = proc
        self.url = ""  # the worker API's address, as a Client takes it
        self.nats = ""  # the NATS server the agent uses
        self.lines: List[Dict[str, Any]] = []  # lines the agent logged (JSON)
        self.started = threading.Event()


def start_agent(
    test: unittest.TestCase,
    member: str,
    *,
    group: str = "py",
    tasks: str = "",
    stateless_tasks: str = "",
    nats: str = "",
    token: str = "",
    unix: bool = False,
    extra: Optional[List[str]] = None,
) -> Agent:
    """Starts an agent and waits until it serves its API (its log names the
    address). The test kills it when it ends."""
    d = tempfile.mkdtemp(prefix=f"handoff-py-{member}-")
    args = [handoff_binary(), "agent", "--group", group, "--member-id", member, "--data-dir", os.path.join(d, "data"), "--log-format", "json"]
    args += ["--listen", f"unix:{os.path.join(d, 'api.sock')}" if unix else "127.0.0.1:0"]
    args += ["--nats", nats] if nats else ["--embedded-nats-listen", "127.0.0.1:0"]
    if tasks:
        args += ["--tasks", tasks]
    if stateless_tasks:
        args += ["--stateless-tasks", stateless_tasks]
    if token:
        args += ["--api-token", token]
    args += extra or []
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    a = Agent(member, d, proc)
    a.nats = nats

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            a.lines.append(entry)
            msg = str(entry.get("message", ""))
            if msg.startswith("embedded NATS server started") and isinstance(entry.get("url"), str):
                a.nats = entry["url"]
            if msg == "agent started":
                api = str(entry.get("api", ""))
                a.url = api if api.startswith("unix:") else f"http://{api}"
                a.started.set()
        a.started.set()

    reader = threading.Thread(target=read, name=f"agent-{member}-log", daemon=True)
    reader.start()

    def cleanup() -> None:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        reader.join(10)
        if proc.stdout is not None:
            proc.stdout.close()
        shutil.rmtree(d, ignore_errors=True)

    test.addCleanup(cleanup)
    if not a.started.wait(120) or not a.url:
        test.fail(f"agent {member} did not start (exit {proc.poll()}): {a.lines[-5:]}")
    return a


def until(what: str, cond: Callable[[], Optional[T]], timeout: float = 30) -> T:
    """Polls cond every 20 ms until it returns a value other than None or
    False, for at most timeout seconds."""
    deadline = time.monotonic() + timeout
    last: Optional[BaseException] = None
    while True:
        try:
            v = cond()
            if v is not None and v is not False:
                return v
        except Exception as e:
            last = e
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s" + (f" (last error: {last!r})" if last else ""))
        time.sleep(0.02)
