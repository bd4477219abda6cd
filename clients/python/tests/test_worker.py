"""The example worker (examples/python/worker.py) against real agents: it
counts every input message exactly once across a scale-up and a leave, the
tasks moved to the newcomer start on the input its worker prepared while
learning them, and it exits 0 once its agent says shutdown."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import unittest
from typing import Any, Dict, List

from agent import Agent, repo_root, start_agent, until
from handoff_client import Client

GROUP = "pyx"
TASKS = ["t-0", "t-1", "t-2", "t-3"]
KEYS = [b"apple", b"banana", b"a/b c%", b"cherry"]
WORKER = os.path.join(repo_root(), "examples", "python", "worker.py")


def load_worker() -> Any:
    """The worker's module, for its NATS reader."""
    spec = importlib.util.spec_from_file_location("example_worker", WORKER)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Worker:
    def __init__(self, test: unittest.TestCase, agent: Agent) -> None:
        env = dict(os.environ, SIDECAR_URL=agent.url, NATS_URL=agent.nats, HANDOFF_GROUP=GROUP)
        self.proc = subprocess.Popen([sys.executable, WORKER], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log: List[str] = []

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.log.append(line.rstrip("\n"))

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()

        def cleanup() -> None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.reader.join(10)
            if self.proc.stderr is not None:
                self.proc.stderr.close()

        test.addCleanup(cleanup)

    def lines(self, text: str) -> List[str]:
        return [line for line in list(self.log) if text in line]


class Input:
    """Publishes the job's input and remembers what it published."""

    def __init__(self, mod: Any, url: str) -> None:
        self.nats = mod.Nats(url)
        res = self.nats.jsapi(f"STREAM.CREATE.INPUT_{GROUP}", {"name": f"INPUT_{GROUP}", "subjects": [f"input.{GROUP}.>"], "storage": "file"})
        assert "error" not in res, res
        self.counts: Dict[str, Dict[bytes, int]] = {t: {} for t in TASKS}
        self.last: Dict[str, int] = {t: 0 for t in TASKS}
        self.round = 0

    def publish(self, rounds: int) -> None:
        for _ in range(rounds):
            for i, t in enumerate(TASKS):
                key = KEYS[(self.round + i) % len(KEYS)]
                ack = json.loads(self.nats.request(f"input.{GROUP}.{t}", key))
                assert ack.get("seq"), ack
                self.counts[t][key] = self.counts[t].get(key, 0) + 1
                self.last[t] = ack["seq"]
            self.round += 1


class WorkerTest(unittest.TestCase):
    def test_exact_counts_across_a_scale_up_and_a_leave_prepared_input(self) -> None:
        mod = load_worker()
        a = start_agent(self, "a", group=GROUP, tasks="t-0..3")
        inp = Input(mod, a.nats)
        self.addCleanup(inp.nats.close)
        inp.publish(30)
        ca = Client(a.url)
        self.addCleanup(ca.close)
        wa = Worker(self, a)

        def caught_up(c: Client, tasks: List[str]) -> bool:
            v = c.assignment()
            return all(
                any(tv.id == t and tv.role == "active" and mod.decode_checkpoint(tv.checkpoint) == inp.last[t] for tv in v.tasks) for t in tasks
            )

        until("a's worker counted the input", lambda: caught_up(ca, TASKS), 60)

        b = start_agent(self, "b", group=GROUP, tasks="t-0..3", nats=a.nats)
        cb = Client(b.url)
        self.addCleanup(cb.close)
        wb = Worker(self, b)
        until("two tasks active on b", lambda: len(wb.lines("starts")) >= 2, 60)
        moved = sorted({line.split("task ")[1].split(" ")[0] for line in wb.lines("starts")})
        self.assertEqual(len(moved), 2, wb.log)
        for t in moved:
            self.assertTrue(wb.lines(f"task {t}: input prepared as learner"), f"b's worker prepared {t} while learning it: {wb.log}")
            self.assertTrue(
                wb.lines(f"task {t} epoch") and all("starts on its prepared input" in line for line in wb.lines(f"task {t} epoch")),
                f"{t} started on its prepared input on b: {wb.log}",
            )
        inp.publish(30)
        until("both workers counted the new input", lambda: caught_up(ca, [t for t in TASKS if t not in moved]) and caught_up(cb, moved), 60)

        # b leaves: its worker hands the tasks back and exits 0 on shutdown.
        cb.leave()
        self.assertEqual(wb.proc.wait(60), 0, wb.log[-20:])
        inp.publish(10)
        until("a counted everything again", lambda: caught_up(ca, TASKS), 60)
        for t in TASKS:
            for key, n in inp.counts[t].items():
                self.assertEqual(ca.get(t, key), str(n).encode(), f"task {t}, key {key!r}: every message counted once")

        # SIGTERM: every task stops with its final commit, and the worker exits 0.
        wa.proc.send_signal(signal.SIGTERM)
        self.assertEqual(wa.proc.wait(60), 0, wa.log[-20:])


if __name__ == "__main__":
    unittest.main()
