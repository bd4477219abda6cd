"""Client calls one agent's worker API over HTTP: a TCP address or the
agent's Unix socket, with its token, a timeout of its own on every call, and
the binary form for the state routes."""

from __future__ import annotations

import base64
import http.client
import json as jsonlib
import os
import socket
import threading
import urllib.parse
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from .binary import MEDIA_BINARY, MEDIA_JSON, decode_scan, decode_values, encode_commit, encode_get
from .errors import ApiError, Cancelled, Unreachable, api_error
from .types import KV, Bytes, CommitResult, ReleaseResult, ScanPage, View, to_bytes

DEFAULT_CALL_TIMEOUT = 10.0
"""How long a call may take, in seconds (a long-poll: its wait plus this). A
paused agent accepts connections and never answers: without a bound of its
own a worker would hang with it (docs/api.md, Client-side timeouts)."""

MAX_GET_KEYS = 10_000
"""The most keys an agent with its default limits takes in one batch get."""

DEFAULT_URL = "http://127.0.0.1:7070"
"""The agent's address when none is given and SIDECAR_URL is unset."""

UNIX_PREFIX = "unix:"
"""The prefix of an address that names the agent's Unix socket."""

Puts = Union[Mapping[str, Bytes], Mapping[bytes, Bytes], Mapping[Bytes, Bytes], Iterable[Tuple[Bytes, Bytes]]]
"""The puts of a commit: a mapping of keys to values, or (key, value) pairs."""

_MAX_IDLE = 64  # idle connections a client keeps


class _Unset:
    pass


_UNSET: Any = _Unset()


class Cancel(threading.Event):
    """An event that also ends the calls given it: set() makes each call in
    flight with this Cancel fail at once with Cancelled (its connection is
    shut down), and any later call fail before it is sent. A runner's task
    has one of these as its ``stopped``."""

    def __init__(self) -> None:
        super().__init__()
        self._conns_lock = threading.Lock()
        self._conns: "set[http.client.HTTPConnection]" = set()

    def set(self) -> None:
        super().set()
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            _shutdown(conn)

    cancel = set

    def _attach(self, conn: http.client.HTTPConnection) -> bool:
        with self._conns_lock:
            if self.is_set():
                return False
            self._conns.add(conn)
            return True

    def _detach(self, conn: http.client.HTTPConnection) -> None:
        with self._conns_lock:
            self._conns.discard(conn)


def _shutdown(conn: http.client.HTTPConnection) -> None:
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over the agent's Unix socket, as http://localhost."""

    def __init__(self, path: str, timeout: Optional[float]) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class _Answer:
    __slots__ = ("status", "type", "body")

    def __init__(self, status: int, type_: str, body: bytes) -> None:
        self.status, self.type, self.body = status, type_, body


class Client:
    """Client calls one agent's API. It keeps connections alive and may be
    used by many threads at once; one Client per agent is enough. close()
    ends its idle connections.

    url is "http://127.0.0.1:7070", or "unix:/run/handoff/api.sock" for an
    agent listening on a Unix socket (its --listen unix:PATH), called as
    http://localhost. token is the agent's --api-token. call_timeout
    replaces DEFAULT_CALL_TIMEOUT (seconds). json=True sends and receives
    JSON only, instead of the binary form for commits, batch gets and scans:
    slower, but readable on the wire."""

    def __init__(self, url: str = DEFAULT_URL, *, token: str = "", call_timeout: float = DEFAULT_CALL_TIMEOUT, json: bool = False) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.call_timeout = call_timeout
        self.json = json
        self._socket_path = ""
        self._host = ""
        self._port = 80
        if self.url.startswith(UNIX_PREFIX):
            self._socket_path = self.url[len(UNIX_PREFIX):]
            if not self._socket_path:
                raise ValueError(f"{url}: the socket path is empty: use unix:/path/to/api.sock")
        else:
            u = urllib.parse.urlsplit(self.url)
            if u.scheme != "http" or not u.hostname:
                raise ValueError(f"{url}: the agent's address is http://HOST:PORT or unix:PATH")
            if u.path not in ("", "/") or u.query or u.fragment:
                raise ValueError(f"{url}: give the agent's address without a path")
            self._host = u.hostname
            self._port = u.port or 80
        self._idle: List[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, *, call_timeout: float = DEFAULT_CALL_TIMEOUT, json: bool = False) -> "Client":
        """A client of the agent named by the environment, as `handoff
        conformance` and the Kubernetes example give it: SIDECAR_URL (default
        http://127.0.0.1:7070, or unix:PATH) and SIDECAR_TOKEN."""
        return cls(os.environ.get("SIDECAR_URL") or DEFAULT_URL, token=os.environ.get("SIDECAR_TOKEN", ""), call_timeout=call_timeout, json=json)

    def close(self) -> None:
        """Ends the client's idle connections; calls in flight go on."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the routes

    def assignment(self, after: int = 0, wait: float = 0, *, cancel: Optional[Cancel] = None) -> View:
        """The member's view. With wait > 0 (seconds) it long-polls: it
        answers as soon as the view's version exceeds after, or with the
        current view once wait (capped by the agent at 60 s) has passed. The
        call gives up wait plus the call timeout after it began."""
        query = {"wait": f"{round(wait * 1000)}ms", "after": str(after)} if wait > 0 else None
        a = self._call("GET", "/assignment", query=query, timeout=wait + self.call_timeout, cancel=cancel)
        return View.from_json(self._json(a, "GET /assignment"))

    def commit(
        self,
        task: str,
        *,
        epoch: int,
        puts: Optional[Puts] = None,
        deletes: Optional[Iterable[Bytes]] = None,
        checkpoint: Optional[Bytes] = None,
        cancel: Optional[Cancel] = None,
        timeout: Optional[float] = _UNSET,
    ) -> CommitResult:
        """Atomically applies puts, deletes and the new checkpoint (None or
        empty keeps the previous one) to task's state at epoch. Raises
        NotOwner when this member is not (or no longer) the task's active
        owner or the epoch is stale, Resume when the agent holds a commit of
        the task the worker was not told of (never retry it then)."""
        p = _puts(puts)
        d = [to_bytes(k) for k in deletes or ()]
        cp = to_bytes(checkpoint) if checkpoint is not None else b""
        if self.json:
            doc: Dict[str, Any] = {}
            if p:
                doc["puts"] = [{"key": _b64(k), "value": _b64(v)} for k, v in p]
            if d:
                doc["deletes"] = [_b64(k) for k in d]
            if cp:
                doc["checkpoint"] = _b64(cp)
            if epoch:
                doc["epoch"] = epoch
            body, media = jsonlib.dumps(doc).encode(), MEDIA_JSON
        else:
            body, media = encode_commit(epoch, cp, p, d), MEDIA_BINARY
        path = _task_path(task, "commit")
        a = self._call("POST", path, body=body, media=media, cancel=cancel, timeout=timeout)
        r = self._json(a, f"POST {path}")
        return CommitResult(task=r["task"], seq=int(r["seq"]), epoch=int(r["epoch"]))

    def release(self, task: str, epoch: int = 0, *, cancel: Optional[Cancel] = None, timeout: Optional[float] = _UNSET) -> ReleaseResult:
        """Tells the agent the worker stopped revoked task and made its last
        commit, so that the hand-off may proceed. epoch, when given (not 0),
        is the ownership the worker stopped: the agent refuses (NotOwner) to
        release the task at any other epoch."""
        path = _task_path(task, "release")
        query = {"epoch": str(epoch)} if epoch else None
        r = self._json(self._call("POST", path, query=query, cancel=cancel, timeout=timeout), f"POST {path}")
        return ReleaseResult(task=r["task"], epoch=int(r["epoch"]), seq=int(r["seq"]))

    def get(self, task: str, key: Bytes, *, cancel: Optional[Cancel] = None) -> Optional[bytes]:
        """The value of key in task's state, or None when the key is absent."""
        path = f"{_task_path(task, 'state')}/{_escape_key(to_bytes(key))}"
        try:
            return self._call("GET", path, cancel=cancel).body
        except ApiError as e:
            if e.code == "not_found":
                return None
            raise

    def get_many(self, task: str, keys: Sequence[Bytes], *, cancel: Optional[Cancel] = None) -> List[Optional[bytes]]:
        """The values of keys in task's state, in their order: None for an
        absent key. The agent reads each request's keys at one point in
        time; more than MAX_GET_KEYS keys go in several requests, each read
        at its own."""
        all_keys = [to_bytes(k) for k in keys]
        out: List[Optional[bytes]] = []
        for i in range(0, len(all_keys), MAX_GET_KEYS):
            chunk = all_keys[i:i + MAX_GET_KEYS]
            vals = self._get_chunk(task, chunk, cancel)
            if len(vals) != len(chunk):
                raise ApiError(200, "", f"get {len(chunk)} keys of task {task}: the agent answered {len(vals)} values")
            out.extend(vals)
        return out

    def _get_chunk(self, task: str, keys: List[bytes], cancel: Optional[Cancel]) -> List[Optional[bytes]]:
        path = _task_path(task, "get")
        if self.json:
            body = jsonlib.dumps({"keys": [_b64(k) for k in keys]}).encode()
            r = self._json(self._call("POST", path, body=body, media=MEDIA_JSON, cancel=cancel), f"POST {path}")
            return [None if v is None else base64.b64decode(v) for v in r["values"]]
        a = self._call("POST", path, body=encode_get(keys), media=MEDIA_BINARY, accept=MEDIA_BINARY, cancel=cancel)
        return decode_values(self._binary(a, f"POST {path}"))

    def scan(
        self,
        task: str,
        *,
        prefix: Optional[Bytes] = None,
        start: Optional[Bytes] = None,
        limit: int = 0,
        cancel: Optional[Cancel] = None,
    ) -> List[KV]:
        """task's keys and values in key order, from start on, within prefix,
        at most limit of them (all when 0). It reads as many pages as it
        needs; scan_page reads one."""
        out: List[KV] = []
        while True:
            page = self.scan_page(task, prefix=prefix, start=start, limit=limit - len(out) if limit else 0, cancel=cancel)
            out.extend(page.items)
            if page.next is None or (limit and len(out) >= limit):
                return out
            start = page.next

    def scan_page(
        self,
        task: str,
        *,
        prefix: Optional[Bytes] = None,
        start: Optional[Bytes] = None,
        limit: int = 0,
        cancel: Optional[Cancel] = None,
    ) -> ScanPage:
        """One page of a scan (GET /tasks/{id}/state): at most limit items
        (the agent's default 1000 when 0, its maximum 10000); page.next, when
        set, is the start of the next page."""
        query: Dict[str, str] = {}
        if prefix is not None and to_bytes(prefix):
            query["prefix_b64"] = _b64url(to_bytes(prefix))
        if start is not None and to_bytes(start):
            query["start_b64"] = _b64url(to_bytes(start))
        if limit:
            query["limit"] = str(limit)
        path = _task_path(task, "state")
        if self.json:
            r = self._json(self._call("GET", path, query=query, cancel=cancel), f"GET {path}")
            items = [KV(base64.b64decode(kv["key"]), base64.b64decode(kv["value"])) for kv in r.get("items") or []]
            nxt = r.get("next")
            return ScanPage(items, base64.b64decode(nxt) if nxt else None)
        a = self._call("GET", path, query=query, accept=MEDIA_BINARY, cancel=cancel)
        return decode_scan(self._binary(a, f"GET {path}"))

    def leave(self, *, cancel: Optional[Cancel] = None) -> Dict[str, Any]:
        """Starts a graceful leave of the member (idempotent) and returns its
        progress (the LeaveStatus document). Keep following the assignment:
        it says shutdown once the member's tasks are handed over."""
        return self._json(self._call("POST", "/leave", cancel=cancel), "POST /leave")  # type: ignore[no-any-return]

    def leave_status(self, *, cancel: Optional[Cancel] = None) -> Dict[str, Any]:
        """The progress of the member's leave (the LeaveStatus document)."""
        return self._json(self._call("GET", "/leave", cancel=cancel), "GET /leave")  # type: ignore[no-any-return]

    def group(self, *, cancel: Optional[Cancel] = None) -> Dict[str, Any]:
        """The whole group's view, with learners' progress (the GroupView document)."""
        return self._json(self._call("GET", "/group", cancel=cancel), "GET /group")  # type: ignore[no-any-return]

    def ready(self, *, cancel: Optional[Cancel] = None) -> None:
        """Returns once the agent has joined its group; raises Unavailable
        (saying why not) until then."""
        self._call("GET", "/readyz", cancel=cancel)

    # -- the transport

    def _json(self, a: _Answer, what: str) -> Any:
        try:
            return jsonlib.loads(a.body)
        except ValueError as e:
            raise ApiError(a.status, "", f"{what}: decode answer: {e}") from e

    def _binary(self, a: _Answer, what: str) -> bytes:
        if a.type != MEDIA_BINARY:
            raise ApiError(
                a.status,
                "",
                f"{what}: the agent answered {a.type!r}, not the binary form {MEDIA_BINARY} it was asked for "
                "(is it older than this client? use json=True)",
            )
        return a.body

    def _connection(self) -> Tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        if self._socket_path:
            return _UnixConnection(self._socket_path, None), False
        return http.client.HTTPConnection(self._host, self._port), False

    def _put_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, str]] = None,
        body: Optional[bytes] = None,
        media: str = MEDIA_JSON,
        accept: str = "",
        timeout: Optional[float] = _UNSET,
        cancel: Optional[Cancel] = None,
    ) -> _Answer:
        """Sends one request and reads its whole answer. Each read and write
        on the connection waits at most timeout seconds (default the call
        timeout; None: no bound). A 2xx answer returns; an error answer
        raises its ApiError; no answer (a connection error, the timeout)
        raises Unreachable; a set cancel raises Cancelled."""
        if timeout is _UNSET:
            timeout = self.call_timeout
        target = path + ("?" + urllib.parse.urlencode(query) if query else "")
        what = f"{method} {path}"
        headers = {}
        if body is not None:
            headers["Content-Type"] = media
        if accept:
            headers["Accept"] = accept
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        # A connection kept alive may have been closed by the agent while it
        # was idle: then the request is sent again once, on a new one.
        for attempt in range(2):
            conn, reused = self._connection()
            if cancel is not None and not cancel._attach(conn):
                conn.close()
                raise Cancelled(f"{what}: cancelled")
            try:
                conn.timeout = timeout
                if conn.sock is None:
                    conn.connect()
                else:
                    conn.sock.settimeout(timeout)
                if cancel is not None and cancel.is_set():
                    raise Cancelled(f"{what}: cancelled")
                conn.request(method, target, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except Cancelled:
                conn.close()
                raise
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                if cancel is not None and cancel.is_set():
                    raise Cancelled(f"{what}: cancelled") from e
                stale = isinstance(e, (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError))
                if reused and stale and attempt == 0:
                    continue
                if isinstance(e, socket.timeout):
                    raise Unreachable(f"{what}: no answer within {timeout} s (is the agent paused?)", timed_out=True) from e
                raise Unreachable(f"{what}: {e or type(e).__name__}") from e
            finally:
                if cancel is not None:
                    cancel._detach(conn)
            if resp.will_close:
                conn.close()
            else:
                self._put_back(conn)
            if not 200 <= resp.status <= 299:
                raise _decode_error(resp.status, data)
            return _Answer(resp.status, resp.getheader("Content-Type", "") or "", data)
        raise AssertionError("unreachable")


def _puts(puts: Optional[Puts]) -> List[Tuple[bytes, bytes]]:
    if puts is None:
        return []
    items: Iterable[Tuple[Bytes, Bytes]] = puts.items() if isinstance(puts, Mapping) else puts
    return [(to_bytes(k), to_bytes(v)) for k, v in items]


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def _b64url(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).decode("ascii").rstrip("=")


def _task_path(task: str, what: str) -> str:
    return f"/tasks/{urllib.parse.quote(task, safe='')}/{what}"


_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_~-")


def _escape_key(key: bytes) -> str:
    """Percent-encodes every byte of key but letters, digits, "-", "_" and
    "~", so that any key, "/" and "." included, is one path segment that no
    one resolves."""
    return "".join(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in key)


def _decode_error(status: int, body: bytes) -> ApiError:
    try:
        e = jsonlib.loads(body)
        if isinstance(e, dict) and isinstance(e.get("code"), str) and e["code"]:
            return api_error(status, e["code"], str(e.get("message", "")))
    except ValueError:
        pass  # not the agent's JSON: a proxy, another server on the port
    msg = body.decode("utf-8", errors="replace").strip()
    if len(msg) > 200:
        msg = msg[:200] + "..."
    return ApiError(status, "", msg or http.client.responses.get(status, "error"))
