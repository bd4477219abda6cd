// The API's binary form (application/vnd.handoff.binary, docs/api.md "The
// binary form"): keys and values as length-prefixed bytes, no base64. Every
// integer is big-endian and of fixed width: a count or a length is 4 bytes,
// the epoch 8. Nothing may follow the last field.

import type { Bytes, CommitRequest, KV, ScanPage } from "./types.js";

/** The media type of the API's binary bodies. */
export const MediaBinary = "application/vnd.handoff.binary";
/** The media type of the API's JSON bodies, the default. */
export const MediaJSON = "application/json";

/** The length that marks an absent value in a batch get's answer. */
const absentLen = 0xffffffff;

/** bytesOf returns b as bytes (a string as its UTF-8 encoding). */
export function bytesOf(b: Bytes): Buffer {
  if (typeof b === "string") return Buffer.from(b, "utf8");
  return Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength);
}

/** Writer appends fields to a body whose size it knows in advance. */
class Writer {
  readonly buf: Buffer;
  private off = 0;
  constructor(size: number) {
    this.buf = Buffer.allocUnsafe(size);
  }
  u32(n: number): void {
    this.off = this.buf.writeUInt32BE(n, this.off);
  }
  u64(n: number): void {
    this.off = this.buf.writeBigUInt64BE(BigInt(n), this.off);
  }
  bytes(b: Buffer): void {
    this.u32(b.length);
    this.off += b.copy(this.buf, this.off);
  }
  done(): Buffer {
    if (this.off !== this.buf.length) throw new Error(`binary body: wrote ${this.off} of ${this.buf.length} bytes`);
    return this.buf;
  }
}

/** encodeCommit returns the binary form of a commit. */
export function encodeCommit(req: CommitRequest): Buffer {
  const puts = (req.puts ?? []).map((kv) => [bytesOf(kv.key), bytesOf(kv.value)] as const);
  const deletes = (req.deletes ?? []).map(bytesOf);
  const checkpoint = req.checkpoint === undefined ? Buffer.alloc(0) : bytesOf(req.checkpoint);
  let size = 8 + 4 + checkpoint.length + 4 + 4;
  for (const [k, v] of puts) size += 8 + k.length + v.length;
  for (const k of deletes) size += 4 + k.length;
  const w = new Writer(size);
  w.u64(req.epoch ?? 0);
  w.bytes(checkpoint);
  w.u32(puts.length);
  for (const [k, v] of puts) {
    w.bytes(k);
    w.bytes(v);
  }
  w.u32(deletes.length);
  for (const k of deletes) w.bytes(k);
  return w.done();
}

/** encodeGet returns the binary form of a batch get of keys. */
export function encodeGet(keys: readonly Buffer[]): Buffer {
  let size = 4;
  for (const k of keys) size += 4 + k.length;
  const w = new Writer(size);
  w.u32(keys.length);
  for (const k of keys) w.bytes(k);
  return w.done();
}

/** MalformedBody is a binary answer that is not the layout it should be. */
export class MalformedBody extends Error {
  override name = "MalformedBody";
}

/** Reader reads a binary body; its errors name the field and the byte. */
class Reader {
  private off = 0;
  constructor(private readonly b: Buffer) {}
  private fail(what: string, why: string): never {
    throw new MalformedBody(`malformed binary body: ${what} at byte ${this.off}: ${why}`);
  }
  left(): number {
    return this.b.length - this.off;
  }
  u32(what: string): number {
    if (this.left() < 4) this.fail(what, `the body ends ${this.left()} bytes into its 4-byte length or count`);
    const n = this.b.readUInt32BE(this.off);
    this.off += 4;
    return n;
  }
  peekU32(): number | undefined {
    return this.left() >= 4 ? this.b.readUInt32BE(this.off) : undefined;
  }
  skip(n: number): void {
    this.off += n;
  }
  bytes(what: string): Buffer {
    const n = this.u32(what);
    if (n > this.left()) {
      this.off -= 4;
      this.fail(what, `its length says ${n} bytes, the body holds ${this.left() - 4} more`);
    }
    const out = this.b.subarray(this.off, this.off + n);
    this.off += n;
    return out;
  }
  count(what: string, min: number): number {
    const n = this.u32(what);
    if (n * min > this.left()) {
      this.off -= 4;
      this.fail(what, `it counts ${n} entries of at least ${min} bytes, the body holds ${this.left() - 4} more bytes`);
    }
    return n;
  }
  end(): void {
    if (this.left() !== 0) this.fail("the body", `${this.left()} bytes follow its last field; nothing may`);
  }
}

/**
 * decodeValues decodes a batch get's binary answer: undefined for an absent
 * key. The values are views of b.
 */
export function decodeValues(b: Buffer): (Buffer | undefined)[] {
  const r = new Reader(b);
  const n = r.count("values", 4);
  const out: (Buffer | undefined)[] = new Array(n);
  for (let i = 0; i < n; i++) {
    if (r.peekU32() === absentLen) {
      r.skip(4);
      out[i] = undefined;
      continue;
    }
    out[i] = r.bytes(`values[${i}]`);
  }
  r.end();
  return out;
}

/** decodeScan decodes a scan's binary answer; keys and values are views of b. */
export function decodeScan(b: Buffer): ScanPage {
  const r = new Reader(b);
  const n = r.count("items", 8);
  const items: KV[] = new Array(n);
  for (let i = 0; i < n; i++) {
    const key = r.bytes(`items[${i}].key`);
    const value = r.bytes(`items[${i}].value`);
    items[i] = { key, value };
  }
  const next = r.bytes("next");
  r.end();
  return next.length > 0 ? { items, next } : { items };
}
