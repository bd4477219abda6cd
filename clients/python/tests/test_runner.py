"""run against real agents: the lifecycle of the Go client's client.Run and
the prepare hook."""

import threading
import unittest
from typing import Dict, List, Optional

from agent import start_agent, until
from handoff_client import Client, Event, NotOwner, Runner, Task, TaskInfo


class Prepared:
    """What the tests' prepare makes: it records whether it was closed."""

    def __init__(self, member: str, info: TaskInfo) -> None:
        self.member, self.info, self.closed = member, info, 0

    def close(self) -> None:
        self.closed += 1


class Start:
    def __init__(self, member: str, task: Task[Prepared]) -> None:
        self.member, self.task, self.epoch = member, task.id, task.epoch
        self.checkpoint = task.checkpoint.decode() if task.checkpoint else None
        self.prepared = task.prepared


class Member:
    """An agent's worker: a runner with a job that counts its commits in key
    n, checkpoint = n. With late, prepare returns only once its info is
    cancelled: when the task became active here (its value is handed over
    then) or left (it is closed)."""

    def __init__(self, test: unittest.TestCase, member: str, url: str, late: bool = False) -> None:
        self.id, self.late = member, late
        self.events: List[Event] = []
        self.starts: List[Start] = []
        self.prepared: List[Prepared] = []
        self.finals: Dict[str, str] = {}
        self.client = Client(url)
        self.runner: Runner[Prepared] = Runner(
            self.job,
            client=self.client,
            handle_signals=False,
            restart_backoff=0.001,
            on_event=self.events.append,
            prepare=self.prepare,
        )
        self.result: List[bool] = []
        self.thread = threading.Thread(target=lambda: self.result.append(self.runner.run()), daemon=True)
        self.thread.start()
        test.addCleanup(self.end)

    def end(self) -> None:
        self.runner.stop()
        self.thread.join(60)
        self.client.close()

    def prepare(self, info: TaskInfo) -> Prepared:
        p = Prepared(self.id, info)
        self.prepared.append(p)
        if self.late:
            info.cancelled.wait()
        return p

    def job(self, task: Task[Prepared]) -> None:
        self.starts.append(Start(self.id, task))
        n = int(task.checkpoint or b"0")

        def commit() -> None:
            nonlocal n
            n += 1
            task.commit(puts={"n": str(n)}, checkpoint=str(n))

        while not task.stopped.is_set():
            commit()
            task.stopped.wait(0.02)
        commit()  # the final commit, after the stop
        self.finals[task.id] = str(n)

    def of(self, type_: str, task: Optional[str] = None) -> List[Event]:
        return [e for e in list(self.events) if e.type == type_ and (task is None or e.task == task)]


class RunnerTest(unittest.TestCase):
    def test_a_leave_hands_tasks_over_and_prepared_values_go_to_the_handler_or_are_closed(self) -> None:
        opts = {"tasks": "s-0..3", "extra": ["--standbys", "1"]}
        agent_a = start_agent(self, "a", **opts)  # type: ignore[arg-type]
        a = Member(self, "a", agent_a.url)
        until("a runs every task", lambda: len({s.task for s in a.starts}) == 4)

        agent_b = start_agent(self, "b", nats=agent_a.nats, **opts)  # type: ignore[arg-type]
        b = Member(self, "b", agent_b.url, late=True)
        # Two tasks move to b: a learner there first, then active; a keeps a
        # standby of them, and b one of a's.
        until("two tasks active on b", lambda: len({s.task for s in b.starts}) == 2 and len(b.starts) == 2)
        moved = sorted(s.task for s in b.starts)
        kept = [t for t in ("s-0", "s-1", "s-2", "s-3") if t not in moved]
        until("a prepared standbys of b's tasks", lambda: all(any(p.info.id == t and p.info.role == "standby" for p in a.prepared) for t in moved))
        until("b prepared standbys of a's tasks", lambda: all(any(p.info.id == t and p.info.role == "standby" for p in b.prepared) for t in kept))

        for s in b.starts:
            # Each came from a: its checkpoint is a's final commit, and b's
            # learner was prepared and handed to the handler.
            self.assertEqual(s.checkpoint, a.finals.get(s.task), f"b starts {s.task} at a's final commit")
            assert s.prepared is not None, f"b's handler of {s.task} got its preparation"
            self.assertEqual((s.prepared.info.id, s.prepared.info.role, s.prepared.member), (s.task, "learner", "b"))
            self.assertTrue(s.prepared.info.cancelled.is_set(), "the activation cancelled the prepare still running, and took what it returned")
        for t in moved:
            self.assertEqual(len(a.of("release", t)), 1, f"a released {t} once")
            stop = a.of("stop", t)[0]
            self.assertEqual(stop.checkpoint, (a.finals[t]).encode(), "the stop event has the final commit's checkpoint")

        b.client.leave()
        b.thread.join(60)  # the agent says shutdown once b's tasks are handed over
        self.assertEqual(b.result, [True], "b's run ended on shutdown")
        self.assertEqual(len(b.of("shutdown")), 1)
        for t in moved:
            self.assertEqual(len(b.of("release", t)), 1, f"b released {t}")
            self.assertIn(t, b.finals, f"b made the final commit of {t}")
        until("a runs b's tasks again", lambda: all(any(s.task == t and s.checkpoint == b.finals[t] for s in a.starts) for t in moved))
        for t in moved:
            s = next(s for s in a.starts if s.task == t and s.checkpoint == b.finals[t])
            p = next(p for p in a.prepared if p.info.id == t and p.info.role == "standby")
            self.assertIs(s.prepared, p, f"a's handler of {t} got a's standby preparation")
            self.assertEqual(p.closed, 0, "a handed preparation is the handler's: the runner does not close it")
        # b's standbys left b without becoming active there: each was
        # cancelled and closed once, though prepare returned only after that.
        standbys = [p for p in b.prepared if p.info.role == "standby"]
        self.assertGreaterEqual(len(standbys), 2)
        for p in standbys:
            self.assertTrue(p.info.cancelled.is_set(), f"b's preparation of {p.info.id} was cancelled")
            self.assertEqual(p.closed, 1, f"b's preparation of {p.info.id} was closed once")
        for p in b.prepared:
            if p.info.role == "learner":
                self.assertEqual(p.closed, 0)
        self.assertEqual(len(b.of("discard")), len(standbys))

        # Every commit of every task is exact: the state's n is its checkpoint.
        a.end()
        self.assertEqual(a.result, [False], "a's run ended on stop()")
        with Client(agent_a.url) as c:
            for tv in c.assignment().tasks:
                if tv.role == "active":
                    self.assertEqual(c.get(tv.id, "n"), tv.checkpoint, f"task {tv.id}: n is its checkpoint")

    def test_restart_after_a_failure_stop_on_not_owner_final_commits_when_the_run_ends(self) -> None:
        agent = start_agent(self, "m", tasks="s-0..2")
        events: List[Event] = []
        starts: List[tuple] = []
        s2 = [0]

        def job(task: Task[None]) -> None:
            starts.append((task.id, task.checkpoint))
            if task.id == "s-0" and task.checkpoint is None:
                task.commit(puts=[("k", "1")], checkpoint="first")
                raise RuntimeError("boom")
            if task.id == "s-1":
                # A commit at another epoch: the agent refuses it with not_owner.
                task.client.commit(task.id, epoch=task.epoch + 1, puts=[("k", "1")])
            while not task.stopped.is_set():
                task.commit(puts=[("k", "2")], checkpoint="later")
                if task.id == "s-2":
                    s2[0] += 1
                task.stopped.wait(0.01)
            task.commit(puts=[("k", "3")], checkpoint="final")

        client = Client(agent.url)
        self.addCleanup(client.close)
        r: Runner[None] = Runner(job, client=client, handle_signals=False, restart_backoff=0.001, on_event=events.append)
        result: List[bool] = []
        t = threading.Thread(target=lambda: result.append(r.run()))
        t.start()
        self.addCleanup(t.join, 60)
        self.addCleanup(r.stop)
        until("s-0 runs again", lambda: sum(1 for s in starts if s[0] == "s-0") == 2)
        until("s-1 is refused", lambda: any(e.type == "refused" and e.task == "s-1" for e in events))
        # Time for a wrong restart of s-1 (its backoff is 1 ms) to show: s-2
        # commits 20 more times meanwhile.
        mark = s2[0]
        until("s-2 goes on", lambda: s2[0] >= mark + 20)
        r.stop()
        t.join(60)
        self.assertEqual(result, [False])

        def of(type_: str, task: str) -> List[Event]:
            return [e for e in events if e.type == type_ and e.task == task]

        self.assertEqual([s[1] for s in starts if s[0] == "s-0"][1], b"first", "s-0 restarts from its last commit")
        restart = of("restart", "s-0")
        self.assertEqual(len(restart), 1)
        self.assertEqual(str(restart[0].error), "boom")
        self.assertEqual(restart[0].backoff, 0.001)

        self.assertEqual(len(of("start", "s-1")), 1, "s-1 is left alone after not_owner")
        self.assertEqual(len(of("restart", "s-1")), 0)
        self.assertEqual(of("refused", "s-1")[0].code, "not_owner")
        self.assertFalse(any(e.type == "release" for e in events), "nothing was revoked: nothing is released")

        v = client.assignment()
        for task_id in ("s-0", "s-2"):
            stop = of("stop", task_id)
            self.assertEqual(len(stop), 1)
            self.assertEqual(stop[0].checkpoint, b"final")
            tv = v.task(task_id)
            assert tv is not None
            self.assertEqual(tv.checkpoint, b"final", f"{task_id}'s final commit landed")
            self.assertEqual(tv.seq, stop[0].seq)
        self.assertTrue(issubclass(NotOwner, Exception))


if __name__ == "__main__":
    unittest.main()
