"""Client against a real agent: every worker route, JSON and the binary
form, TCP and a Unix socket, the token, the error classes and the timeouts."""

import socket
import threading
import time
import unittest
from typing import List

from agent import start_agent, until
from handoff_client import (
    ApiError,
    Cancel,
    Cancelled,
    Client,
    Invalid,
    NotOwner,
    NotRevoked,
    TooLarge,
    Unauthorized,
    UnknownTask,
    Unreachable,
    View,
)

TOKEN = "s3cret"


def active_view(c: Client, n: int) -> View:
    """Waits until the agent shows n tasks active."""

    def cond() -> "View | None":
        v = c.assignment()
        return v if sum(1 for t in v.tasks if t.role == "active") == n else None

    return until(f"{n} active tasks", cond)


class StateRoutesTest(unittest.TestCase):
    def test_binary_form(self) -> None:
        self.state_routes(json=False)

    def test_json(self) -> None:
        self.state_routes(json=True)

    def state_routes(self, json: bool) -> None:
        agent = start_agent(self, "m1", tasks="s-0..1", stateless_tasks="l-0", token=TOKEN, extra=["--require-worker=false"])
        c = Client(agent.url, token=TOKEN, json=json)
        self.addCleanup(c.close)
        v = active_view(c, 3)
        s0 = v.task("s-0")
        assert s0 is not None
        self.assertTrue(s0.stateful)
        self.assertIsNone(s0.checkpoint, "a task that never committed has no checkpoint")

        # Keys of any bytes: a slash, dots, a space, a percent sign, 0x00 and 0xff.
        odd = bytes([0x2E, 0x2E, 0x2F, 0x00, 0xFF, 0x20, 0x25])
        res = c.commit(
            "s-0",
            epoch=s0.epoch,
            checkpoint=bytes([0, 0, 0, 0, 0, 0, 0, 7]),
            puts=[("a", "1"), ("b", ""), ("c", b"\x00\xff"), ("p/1", "x"), ("p/2", "y"), ("p/3", "z"), (odd, "odd")],
        )
        self.assertEqual((res.task, res.epoch), ("s-0", s0.epoch))
        self.assertGreater(res.seq, 0)

        self.assertEqual(c.get("s-0", "a"), b"1")
        self.assertEqual(c.get("s-0", "b"), b"", "an empty value is present")
        self.assertIsNone(c.get("s-0", "nope"), "an absent key is None")
        self.assertEqual(c.get("s-0", odd), b"odd")
        self.assertEqual(c.get_many("s-0", ["c", "nope", "b", "a", odd, "a"]), [b"\x00\xff", None, b"", b"1", b"odd", b"1"])

        self.assertEqual([(kv.key, kv.value) for kv in c.scan("s-0", prefix="p/")], [(b"p/1", b"x"), (b"p/2", b"y"), (b"p/3", b"z")])
        page = c.scan_page("s-0", prefix="p/", limit=2)
        self.assertEqual([kv.key for kv in page.items], [b"p/1", b"p/2"])
        self.assertIsNotNone(page.next, "a page with more after it has next")
        rest = c.scan_page("s-0", prefix="p/", start=page.next)
        self.assertEqual([kv.key for kv in rest.items], [b"p/3"])
        self.assertIsNone(rest.next)
        self.assertEqual([kv.key for kv in c.scan("s-0", start="b", limit=2)], [b"b", b"c"])

        # A mapping of puts, a delete, and an absent checkpoint keeps the previous one.
        c.commit("s-0", epoch=s0.epoch, puts={"m": "1"}, deletes=["a", odd])
        self.assertEqual(c.get_many("s-0", ["a", odd, "m"]), [None, None, b"1"])
        after = c.assignment().task("s-0")
        assert after is not None and after.seq is not None
        self.assertEqual(after.checkpoint, bytes([0, 0, 0, 0, 0, 0, 0, 7]))
        self.assertGreater(after.seq, res.seq)

        # The error codes as classes.
        with self.assertRaises(NotOwner):
            c.commit("s-0", epoch=s0.epoch + 1, puts=[("a", "2")])
        with self.assertRaises(UnknownTask):
            c.commit("nope-1", epoch=1, puts=[("a", "2")])
        with self.assertRaises(Invalid, msg="a stateless task has no state"):
            c.commit("l-0", epoch=0, puts=[("a", "2")])
        with self.assertRaises(Invalid):
            c.commit("s-0", epoch=s0.epoch, puts=[("", "2")])
        with self.assertRaises(TooLarge):
            c.commit("s-0", epoch=s0.epoch, puts=[("k" * 4097, "2")])
        with self.assertRaises(NotRevoked):
            c.release("s-0", s0.epoch)
        with self.assertRaises(Unauthorized), Client(agent.url, token="wrong", json=json) as wrong:
            wrong.assignment()
        with self.assertRaises(ApiError) as cm:
            c.get("bad id!", "a")
        self.assertEqual((cm.exception.status, cm.exception.code), (400, "invalid"))
        self.assertIsInstance(cm.exception, Invalid)


class LongPollTest(unittest.TestCase):
    def test_answers_when_the_view_changes(self) -> None:
        agent = start_agent(self, "m1", tasks="s-0", extra=["--require-worker=false"])
        c = Client(agent.url)
        self.addCleanup(c.close)
        v = active_view(c, 1)
        unchanged = c.assignment(v.version, 0.2)
        self.assertEqual(unchanged.version, v.version, "with nothing new it answers the same view after the wait")

        got = []
        poll = threading.Thread(target=lambda: got.append(c.assignment(v.version, 30)))
        poll.start()
        leave = c.leave()
        self.assertIn(leave["state"], ("leaving", "done"))
        poll.join(30)
        self.assertEqual(len(got), 1, "the long-poll answered")
        self.assertGreater(got[0].version, v.version)
        self.assertIn(got[0].state, ("leaving", "done"))
        self.assertIn(c.leave_status()["state"], ("leaving", "done"))


class UnixSocketTest(unittest.TestCase):
    def test_every_route_over_a_unix_socket(self) -> None:
        agent = start_agent(self, "m1", tasks="s-0", unix=True, token=TOKEN, extra=["--require-worker=false"])
        self.assertTrue(agent.url.startswith("unix:"))
        for json in (False, True):
            with self.subTest(json=json):
                c = Client(agent.url, token=TOKEN, json=json)
                self.addCleanup(c.close)

                def ready() -> bool:
                    c.ready()
                    return True

                until("ready", ready)
                tv = active_view(c, 1).tasks[0]
                c.commit(tv.id, epoch=tv.epoch, puts=[("k", "v")], checkpoint="cp")
                self.assertEqual(c.get(tv.id, "k"), b"v")
                self.assertEqual(c.get_many(tv.id, ["k"]), [b"v"])
                self.assertEqual([(kv.key, kv.value) for kv in c.scan(tv.id)], [(b"k", b"v")])
                g = c.group()
                self.assertEqual(g["members"][0]["id"], "m1")
                self.assertEqual([t["id"] for t in g["tasks"]], ["s-0"])


class TimeoutTest(unittest.TestCase):
    def test_a_call_to_an_agent_that_never_answers_gives_up(self) -> None:
        # A paused agent: the kernel accepts the connection, nothing answers.
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(16)
        self.addCleanup(srv.close)
        c = Client(f"http://127.0.0.1:{srv.getsockname()[1]}", call_timeout=0.1)
        self.addCleanup(c.close)
        for name, call in [
            ("commit", lambda: c.commit("t-0", epoch=1, checkpoint="x")),
            ("assignment", lambda: c.assignment(0, 0.1)),
            ("get", lambda: c.get("t-0", "k")),
        ]:
            with self.subTest(name), self.assertRaises(Unreachable) as cm:
                call()
            self.assertTrue(cm.exception.timed_out, f"{name}: {cm.exception}")

        # A Cancel ends a call in flight, and any call after it. (A server of
        # its own: its first connection is the poll's.)
        srv2 = socket.socket()
        srv2.bind(("127.0.0.1", 0))
        srv2.listen(16)
        self.addCleanup(srv2.close)
        c2 = Client(f"http://127.0.0.1:{srv2.getsockname()[1]}")
        self.addCleanup(c2.close)
        held: List[socket.socket] = []
        connected = threading.Event()

        def accept() -> None:
            conn, _ = srv2.accept()
            held.append(conn)
            conn.recv(65536)  # the request: the poll waits for its answer now
            connected.set()

        acceptor = threading.Thread(target=accept, daemon=True)
        acceptor.start()
        cancel = Cancel()
        failed = []

        def poll() -> None:
            try:
                c2.assignment(0, 30, cancel=cancel)
            except Exception as e:
                failed.append(e)

        t = threading.Thread(target=poll)
        start = time.monotonic()
        t.start()
        self.assertTrue(connected.wait(10), "the poll was sent")
        cancel.set()
        t.join(5)
        self.assertEqual(len(failed), 1)
        self.assertIsInstance(failed[0], Cancelled)
        self.assertLess(time.monotonic() - start, 5, "the cancelled poll did not wait out its 30 s")
        with self.assertRaises(Cancelled):
            c2.assignment(cancel=cancel)
        for conn in held:
            conn.close()

    def test_no_agent_is_unreachable_at_once(self) -> None:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        with self.assertRaises(Unreachable) as cm, Client(f"http://127.0.0.1:{port}") as c:
            c.assignment()
        self.assertFalse(cm.exception.timed_out)

    def test_addresses_the_client_refuses(self) -> None:
        for url in ("https://127.0.0.1:7070", "http://127.0.0.1:7070/api", "unix:"):
            with self.subTest(url), self.assertRaises(ValueError):
                Client(url)


if __name__ == "__main__":
    unittest.main()
