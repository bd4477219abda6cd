// The errors a call to the agent ends with: an error answer of the API
// (ApiError, one class per code a worker branches on), or no answer at all
// (Unreachable).

/** Stable error codes of the API (docs/api.md, Errors). */
export const Code = {
  Invalid: "invalid",
  TooLarge: "too_large",
  Unauthorized: "unauthorized",
  UnknownTask: "unknown_task",
  NotFound: "not_found",
  NotOwner: "not_owner",
  NotRevoked: "not_revoked",
  Resume: "resume",
  Unavailable: "unavailable",
  MethodNotAllowed: "method_not_allowed",
  Internal: "internal",
  UnsupportedMediaType: "unsupported_media_type",
  HostNotAllowed: "host_not_allowed",
  CrossOrigin: "cross_origin",
  Timeout: "timeout",
} as const;

/**
 * An error answer of the agent: its HTTP status, the stable code to branch
 * on ("" when the answer was not the agent's JSON, as from a proxy) and a
 * message for people. The codes a worker branches on have subclasses:
 * `err instanceof NotOwner`.
 */
export class ApiError extends Error {
  override name = "ApiError";
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(code ? `${message} (${status} ${code})` : `${status}: ${message}`);
  }
}

/** 400 invalid: the request is malformed; fix it. */
export class Invalid extends ApiError {
  override name = "Invalid";
}
/** 413 too_large: a body, key, value or checkpoint over its limit; split it. */
export class TooLarge extends ApiError {
  override name = "TooLarge";
}
/** 401 unauthorized: a missing or wrong token. */
export class Unauthorized extends ApiError {
  override name = "Unauthorized";
}
/** 404 unknown_task: the task is not one of the group's. */
export class UnknownTask extends ApiError {
  override name = "UnknownTask";
}
/** 404 not_found: no such key (Client.get answers undefined instead). */
export class NotFound extends ApiError {
  override name = "NotFound";
}
/**
 * 409 not_owner: this member is not (or no longer) the task's active owner,
 * or the epoch is stale. Stop the task without releasing it.
 */
export class NotOwner extends ApiError {
  override name = "NotOwner";
}
/** 409 not_revoked: a release of a task that is not being revoked. */
export class NotRevoked extends ApiError {
  override name = "NotRevoked";
}
/**
 * 409 resume: the agent holds a commit of the task that the worker was not
 * told of. Never retry the commit; restart the task from the checkpoint in
 * /assignment (the runner does).
 */
export class Resume extends ApiError {
  override name = "Resume";
}
/** 503 unavailable: not ready, shutting down, NATS unreachable, no disk; retry shortly. */
export class Unavailable extends ApiError {
  override name = "Unavailable";
}

const classes: Record<string, new (status: number, code: string, message: string) => ApiError> = {
  [Code.Invalid]: Invalid,
  [Code.TooLarge]: TooLarge,
  [Code.Unauthorized]: Unauthorized,
  [Code.UnknownTask]: UnknownTask,
  [Code.NotFound]: NotFound,
  [Code.NotOwner]: NotOwner,
  [Code.NotRevoked]: NotRevoked,
  [Code.Resume]: Resume,
  [Code.Unavailable]: Unavailable,
};

/** apiError makes the error of an answer: the class of its code. */
export function apiError(status: number, code: string, message: string): ApiError {
  const C = classes[code] ?? ApiError;
  return new C(status, code, message);
}

/**
 * No answer: the agent is down, restarting, or paused (the call's own
 * timeout passed; `timedOut` says so). The outcome of the call is unknown: a
 * commit may have landed (retry it: if it had, the retry is refused with
 * Resume).
 */
export class Unreachable extends Error {
  override name = "Unreachable";
  constructor(
    message: string,
    readonly timedOut = false,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** retryable says whether a call that failed with err may simply be sent again. */
export function retryable(err: unknown): boolean {
  return err instanceof Unreachable || err instanceof Unavailable || (err instanceof ApiError && err.status >= 500);
}
