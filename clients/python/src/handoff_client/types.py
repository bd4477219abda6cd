"""The documents of the worker's API (api/openapi.yaml), as the client
returns them: bytes (keys, values, checkpoints) are bytes, not base64."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

Bytes = Union[bytes, bytearray, memoryview, str]
"""Bytes a caller may pass: a str is its UTF-8 encoding."""


def to_bytes(b: Bytes) -> bytes:
    """b as bytes (a str as its UTF-8 encoding)."""
    if isinstance(b, str):
        return b.encode("utf-8")
    return bytes(b)


def _b64(s: Optional[str]) -> Optional[bytes]:
    return base64.b64decode(s) if s else None


@dataclass(frozen=True)
class TaskView:
    """One task of a View."""

    id: str
    role: str
    """active, learner or standby: only active tasks are the worker's to run."""
    stateful: bool
    epoch: int
    """Rises each time the task's owner changes; commits and releases send it."""
    lag: int = 0
    """Changelog messages this member's copy is behind (learners and standbys)."""
    checkpoint: Optional[bytes] = None
    """Actives: the input position to resume from (None: from the beginning).
    Learners and standbys, from agents that give it: the checkpoint their copy
    has applied so far, a hint of where the task's input will resume."""
    seq: Optional[int] = None
    """The changelog sequence this member's copy has applied (stateful tasks)."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "TaskView":
        return cls(
            id=d["id"],
            role=d["role"],
            stateful=bool(d.get("stateful")),
            epoch=int(d.get("epoch") or 0),
            lag=int(d.get("lag") or 0),
            checkpoint=_b64(d.get("checkpoint")),
            seq=d.get("seq"),
        )


@dataclass(frozen=True)
class View:
    """The member's assignment as its worker sees it (GET /assignment)."""

    member: str
    generation: int
    version: int
    """Rises on every change of this view; pass it back as after."""
    state: str
    """joining, member, leaving or done."""
    tasks: List[TaskView] = field(default_factory=list)
    revoke: List[str] = field(default_factory=list)
    """Active tasks to stop, commit and release, including any never started."""
    shutdown: bool = False
    """The member may exit: a leave has handed every task over."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "View":
        return cls(
            member=d.get("member", ""),
            generation=int(d.get("generation") or 0),
            version=int(d.get("version") or 0),
            state=d.get("state", ""),
            tasks=[TaskView.from_json(t) for t in d.get("tasks") or []],
            revoke=list(d.get("revoke") or []),
            shutdown=bool(d.get("shutdown")),
        )

    def task(self, task_id: str) -> Optional[TaskView]:
        """The task of this view with id task_id, or None."""
        return next((t for t in self.tasks if t.id == task_id), None)


@dataclass(frozen=True)
class CommitResult:
    """An acknowledged commit: it is in the changelog and the agent's store."""

    task: str
    seq: int
    """The commit's changelog sequence."""
    epoch: int


@dataclass(frozen=True)
class ReleaseResult:
    """An acknowledged release."""

    task: str
    epoch: int
    seq: int
    """The changelog sequence of the task's last commit on this member."""


@dataclass(frozen=True)
class KV:
    """A key and value read from a task's state."""

    key: bytes
    value: bytes


@dataclass(frozen=True)
class ScanPage:
    """One page of a scan; next, when set, is the start of the following page."""

    items: List[KV]
    next: Optional[bytes] = None
