export { Client, DefaultCallTimeout, DefaultURL, MaxGetKeys, UnixPrefix } from "./client.js";
export type { CallOptions, ClientOptions } from "./client.js";
export { MalformedBody, MediaBinary, MediaJSON, bytesOf, decodeScan, decodeValues, encodeCommit, encodeGet } from "./binary.js";
export { ApiError, Code, Invalid, NotFound, NotOwner, NotRevoked, Resume, TooLarge, Unauthorized, Unavailable, UnknownTask, Unreachable, retryable, } from "./errors.js";
export { DefaultMaxRestartBackoff, DefaultPollWait, DefaultRestartBackoff, DefaultStopTimeout, Stopped, run, stderrLogger, } from "./runner.js";
export type { Event, EventType, Handler, LogLevel, Logger, Prepare, RunOptions, Task, TaskInfo } from "./runner.js";
export type * from "./types.js";
