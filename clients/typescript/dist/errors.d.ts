/** Stable error codes of the API (docs/api.md, Errors). */
export declare const Code: {
    readonly Invalid: "invalid";
    readonly TooLarge: "too_large";
    readonly Unauthorized: "unauthorized";
    readonly UnknownTask: "unknown_task";
    readonly NotFound: "not_found";
    readonly NotOwner: "not_owner";
    readonly NotRevoked: "not_revoked";
    readonly Resume: "resume";
    readonly Unavailable: "unavailable";
    readonly MethodNotAllowed: "method_not_allowed";
    readonly Internal: "internal";
    readonly UnsupportedMediaType: "unsupported_media_type";
    readonly HostNotAllowed: "host_not_allowed";
    readonly CrossOrigin: "cross_origin";
    readonly Timeout: "timeout";
};
/**
 * An error answer of the agent: its HTTP status, the stable code to branch
 * on ("" when the answer was not the agent's JSON, as from a proxy) and a
 * message for people. The codes a worker branches on have subclasses:
 * `err instanceof NotOwner`.
 */
export declare class ApiError extends Error {
    readonly status: number;
    readonly code: string;
    name: string;
    constructor(status: number, code: string, message: string);
}
/** 400 invalid: the request is malformed; fix it. */
export declare class Invalid extends ApiError {
    name: string;
}
/** 413 too_large: a body, key, value or checkpoint over its limit; split it. */
export declare class TooLarge extends ApiError {
    name: string;
}
/** 401 unauthorized: a missing or wrong token. */
export declare class Unauthorized extends ApiError {
    name: string;
}
/** 404 unknown_task: the task is not one of the group's. */
export declare class UnknownTask extends ApiError {
    name: string;
}
/** 404 not_found: no such key (Client.get answers undefined instead). */
export declare class NotFound extends ApiError {
    name: string;
}
/**
 * 409 not_owner: this member is not (or no longer) the task's active owner,
 * or the epoch is stale. Stop the task without releasing it.
 */
export declare class NotOwner extends ApiError {
    name: string;
}
/** 409 not_revoked: a release of a task that is not being revoked. */
export declare class NotRevoked extends ApiError {
    name: string;
}
/**
 * 409 resume: the agent holds a commit of the task that the worker was not
 * told of. Never retry the commit; restart the task from the checkpoint in
 * /assignment (the runner does).
 */
export declare class Resume extends ApiError {
    name: string;
}
/** 503 unavailable: not ready, shutting down, NATS unreachable, no disk; retry shortly. */
export declare class Unavailable extends ApiError {
    name: string;
}
/** apiError makes the error of an answer: the class of its code. */
export declare function apiError(status: number, code: string, message: string): ApiError;
/**
 * No answer: the agent is down, restarting, or paused (the call's own
 * timeout passed; `timedOut` says so). The outcome of the call is unknown: a
 * commit may have landed (retry it: if it had, the retry is refused with
 * Resume).
 */
export declare class Unreachable extends Error {
    readonly timedOut: boolean;
    name: string;
    constructor(message: string, timedOut?: boolean, options?: {
        cause?: unknown;
    });
}
/** retryable says whether a call that failed with err may simply be sent again. */
export declare function retryable(err: unknown): boolean;
