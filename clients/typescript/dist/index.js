// @handoffhq/client: the worker's client of the handoff sidecar agent for
// Node.js. Client calls every worker route (docs/api.md); run follows the
// member's assignment with the lifecycle of the Go client's client.Run.
export { Client, DefaultCallTimeout, DefaultURL, MaxGetKeys, UnixPrefix } from "./client.js";
export { MalformedBody, MediaBinary, MediaJSON, bytesOf, decodeScan, decodeValues, encodeCommit, encodeGet } from "./binary.js";
export { ApiError, Code, Invalid, NotFound, NotOwner, NotRevoked, Resume, TooLarge, Unauthorized, Unavailable, UnknownTask, Unreachable, retryable, } from "./errors.js";
export { DefaultMaxRestartBackoff, DefaultPollWait, DefaultRestartBackoff, DefaultStopTimeout, Stopped, run, stderrLogger, } from "./runner.js";
