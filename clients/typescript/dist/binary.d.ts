import type { Bytes, CommitRequest, ScanPage } from "./types.js";
/** The media type of the API's binary bodies. */
export declare const MediaBinary = "application/vnd.handoff.binary";
/** The media type of the API's JSON bodies, the default. */
export declare const MediaJSON = "application/json";
/** bytesOf returns b as bytes (a string as its UTF-8 encoding). */
export declare function bytesOf(b: Bytes): Buffer;
/** encodeCommit returns the binary form of a commit. */
export declare function encodeCommit(req: CommitRequest): Buffer;
/** encodeGet returns the binary form of a batch get of keys. */
export declare function encodeGet(keys: readonly Buffer[]): Buffer;
/** MalformedBody is a binary answer that is not the layout it should be. */
export declare class MalformedBody extends Error {
    name: string;
}
/**
 * decodeValues decodes a batch get's binary answer: undefined for an absent
 * key. The values are views of b.
 */
export declare function decodeValues(b: Buffer): (Buffer | undefined)[];
/** decodeScan decodes a scan's binary answer; keys and values are views of b. */
export declare function decodeScan(b: Buffer): ScanPage;
