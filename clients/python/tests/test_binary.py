"""The binary form, byte by byte as docs/api.md gives it, and the strictness
of its decoders."""

import unittest

import agent  # noqa: F401  (puts the package on the path in a checkout)
from handoff_client import KV, MalformedBody, ScanPage, decode_scan, decode_values, encode_commit, encode_get


def h(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", ""))


class BinaryTest(unittest.TestCase):
    def test_commit_as_the_docs_spell_it(self) -> None:
        # epoch 3, checkpoint 07, put a=1, delete b.
        want = h("0000000000000003 0000000107 00000001 0000000161 0000000131 00000001 0000000162")
        self.assertEqual(encode_commit(3, b"\x07", [(b"a", b"1")], [b"b"]), want)

    def test_empty_commit(self) -> None:
        self.assertEqual(encode_commit(0, b"", [], []), h("0000000000000000 00000000 00000000 00000000"))

    def test_batch_get(self) -> None:
        self.assertEqual(encode_get([b"a", b"\xff\x00"]), h("00000002 0000000161 00000002ff00"))

    def test_batch_get_answer(self) -> None:
        # Two keys, the first with value 1, the second absent; then an empty value.
        self.assertEqual(decode_values(h("00000002 0000000131 ffffffff")), [b"1", None])
        self.assertEqual(decode_values(h("00000001 00000000")), [b""])

    def test_scan_answer(self) -> None:
        self.assertEqual(decode_scan(h("00000001 0000000161 0000000131 0000000162")), ScanPage([KV(b"a", b"1")], b"b"))
        self.assertEqual(decode_scan(h("00000000 00000000")), ScanPage([], None))

    def test_malformed_answers_are_refused(self) -> None:
        for what, body in [
            ("a length past the end", "00000001 0000000531"),
            ("bytes after the last field", "00000001 0000000131 00"),
            ("a count the body cannot hold", "00000003 0000000131"),
            ("a cut length", "00000001 0000"),
        ]:
            with self.subTest(what), self.assertRaises(MalformedBody):
                decode_values(h(body))
        with self.assertRaises(MalformedBody):
            decode_scan(h("00000001 0000000161 00000001"))  # cut in an item
        with self.assertRaises(MalformedBody):
            decode_scan(h("00000000"))  # no next


if __name__ == "__main__":
    unittest.main()
