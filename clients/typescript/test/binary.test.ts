// The binary form, byte by byte as docs/api.md gives it, and the strictness
// of its decoders.

import assert from "node:assert/strict";
import { test } from "node:test";

import { MalformedBody, decodeScan, decodeValues, encodeCommit, encodeGet } from "@handoffhq/client";

const hex = (s: string) => Buffer.from(s.replace(/\s+/g, ""), "hex");

test("a commit, as docs/api.md spells it", () => {
  // epoch 3, checkpoint 07, put a=1, delete b.
  const want = hex("0000000000000003 0000000107 00000001 0000000161 0000000131 00000001 0000000162");
  assert.deepEqual(encodeCommit({ epoch: 3, checkpoint: Buffer.from([7]), puts: [{ key: "a", value: "1" }], deletes: ["b"] }), want);
});

test("an empty commit: epoch 0, no checkpoint, no puts, no deletes", () => {
  assert.deepEqual(encodeCommit({}), hex("0000000000000000 00000000 00000000 00000000"));
});

test("a batch get", () => {
  assert.deepEqual(encodeGet([Buffer.from("a"), Buffer.from([0xff, 0])]), hex("00000002 0000000161 00000002ff00"));
});

test("a batch get's answer, as docs/api.md spells it", () => {
  // Two keys, the first with value 1, the second absent; then an empty value.
  assert.deepEqual(decodeValues(hex("00000002 0000000131 ffffffff")), [Buffer.from("1"), undefined]);
  assert.deepEqual(decodeValues(hex("00000001 00000000")), [Buffer.alloc(0)]);
});

test("a scan's answer", () => {
  const page = decodeScan(hex("00000001 0000000161 0000000131 0000000162"));
  assert.deepEqual(page, { items: [{ key: Buffer.from("a"), value: Buffer.from("1") }], next: Buffer.from("b") });
  assert.deepEqual(decodeScan(hex("00000000 00000000")), { items: [] });
});

test("malformed answers are refused", () => {
  const bad: [string, string][] = [
    ["a length past the end", "00000001 0000000531"],
    ["bytes after the last field", "00000001 0000000131 00"],
    ["a count the body cannot hold", "00000003 0000000131"],
    ["a cut length", "00000001 0000"],
  ];
  for (const [what, body] of bad) {
    assert.throws(() => decodeValues(hex(body)), MalformedBody, what);
  }
  assert.throws(() => decodeScan(hex("00000001 0000000161 00000001")), MalformedBody, "a scan cut in an item");
  assert.throws(() => decodeScan(hex("00000000")), MalformedBody, "a scan without next");
});
