"""The API's binary form (application/vnd.handoff.binary, docs/api.md "The
binary form"): keys and values as length-prefixed bytes, no base64. Every
integer is big-endian and of fixed width: a count or a length is 4 bytes,
the epoch 8. Nothing may follow the last field."""

from __future__ import annotations

import struct
from typing import List, Optional, Sequence, Tuple

from .errors import MalformedBody
from .types import KV, ScanPage

MEDIA_BINARY = "application/vnd.handoff.binary"
"""The media type of the API's binary bodies."""
MEDIA_JSON = "application/json"
"""The media type of the API's JSON bodies, the default."""

_ABSENT = 0xFFFFFFFF  # the length that marks an absent value in a batch get's answer
_u32 = struct.Struct(">I")
_u64 = struct.Struct(">Q")


def encode_commit(
    epoch: int,
    checkpoint: bytes,
    puts: Sequence[Tuple[bytes, bytes]],
    deletes: Sequence[bytes],
) -> bytes:
    """The binary form of a commit (epoch 0: none given; an empty checkpoint
    keeps the previous one)."""
    out = [_u64.pack(epoch), _u32.pack(len(checkpoint)), checkpoint, _u32.pack(len(puts))]
    for k, v in puts:
        out += [_u32.pack(len(k)), k, _u32.pack(len(v)), v]
    out.append(_u32.pack(len(deletes)))
    for k in deletes:
        out += [_u32.pack(len(k)), k]
    return b"".join(out)


def encode_get(keys: Sequence[bytes]) -> bytes:
    """The binary form of a batch get of keys."""
    out = [_u32.pack(len(keys))]
    for k in keys:
        out += [_u32.pack(len(k)), k]
    return b"".join(out)


class _Reader:
    """Reads a binary body; its errors name the field and the byte."""

    def __init__(self, b: bytes) -> None:
        self.b = memoryview(b)
        self.off = 0

    def fail(self, what: str, why: str) -> MalformedBody:
        return MalformedBody(f"malformed binary body: {what} at byte {self.off}: {why}")

    def left(self) -> int:
        return len(self.b) - self.off

    def u32(self, what: str) -> int:
        if self.left() < 4:
            raise self.fail(what, f"the body ends {self.left()} bytes into its 4-byte length or count")
        (n,) = _u32.unpack_from(self.b, self.off)
        self.off += 4
        return int(n)

    def peek_u32(self) -> Optional[int]:
        return int(_u32.unpack_from(self.b, self.off)[0]) if self.left() >= 4 else None

    def bytes(self, what: str) -> bytes:
        n = self.u32(what)
        if n > self.left():
            self.off -= 4
            raise self.fail(what, f"its length says {n} bytes, the body holds {self.left() - 4} more")
        out = bytes(self.b[self.off:self.off + n])
        self.off += n
        return out

    def count(self, what: str, least: int) -> int:
        n = self.u32(what)
        if n * least > self.left():
            self.off -= 4
            raise self.fail(what, f"it counts {n} entries of at least {least} bytes, the body holds {self.left() - 4} more bytes")
        return n

    def end(self) -> None:
        if self.left() != 0:
            raise self.fail("the body", f"{self.left()} bytes follow its last field; nothing may")


def decode_values(b: bytes) -> List[Optional[bytes]]:
    """Decodes a batch get's binary answer: None for an absent key."""
    r = _Reader(b)
    n = r.count("values", 4)
    out: List[Optional[bytes]] = []
    for i in range(n):
        if r.peek_u32() == _ABSENT:
            r.off += 4
            out.append(None)
            continue
        out.append(r.bytes(f"values[{i}]"))
    r.end()
    return out


def decode_scan(b: bytes) -> ScanPage:
    """Decodes a scan's binary answer."""
    r = _Reader(b)
    n = r.count("items", 8)
    items = []
    for i in range(n):
        key = r.bytes(f"items[{i}].key")
        value = r.bytes(f"items[{i}].value")
        items.append(KV(key, value))
    nxt = r.bytes("next")
    r.end()
    return ScanPage(items, nxt or None)
