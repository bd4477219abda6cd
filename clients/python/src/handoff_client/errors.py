"""The errors a call to the agent ends with: an error answer of the API
(ApiError, one subclass per code), no answer at all (Unreachable), or a call
ended by its caller (Cancelled)."""

from __future__ import annotations

from typing import Dict, Type


class Code:
    """The stable error codes of the API (docs/api.md, Errors)."""

    INVALID = "invalid"
    TOO_LARGE = "too_large"
    UNAUTHORIZED = "unauthorized"
    UNKNOWN_TASK = "unknown_task"
    NOT_FOUND = "not_found"
    NOT_OWNER = "not_owner"
    NOT_REVOKED = "not_revoked"
    RESUME = "resume"
    UNAVAILABLE = "unavailable"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    INTERNAL = "internal"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    HOST_NOT_ALLOWED = "host_not_allowed"
    CROSS_ORIGIN = "cross_origin"
    TIMEOUT = "timeout"


class ApiError(Exception):
    """An error answer of the agent: its HTTP status, the stable code to
    branch on ("" when the answer was not the agent's JSON, as from a proxy)
    and a message for people. Each code has a subclass:
    ``except NotOwner``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{message} ({status} {code})" if code else f"{status}: {message}")
        self.status = status
        self.code = code
        self.message = message


class Invalid(ApiError):
    """400 invalid: the request is malformed; fix it."""


class Unauthorized(ApiError):
    """401 unauthorized: a missing or wrong token."""


class HostNotAllowed(ApiError):
    """403 host_not_allowed: the Host header does not name the agent."""


class CrossOrigin(ApiError):
    """403 cross_origin: a POST a browser sent from another web origin."""


class UnknownTask(ApiError):
    """404 unknown_task: the task is not one of the group's."""


class NotFound(ApiError):
    """404 not_found: no such key (Client.get answers None instead), or no such route."""


class MethodNotAllowed(ApiError):
    """405 method_not_allowed: the wrong method for the route."""


class Timeout(ApiError):
    """408 timeout: the request's body did not arrive within the agent's
    --api-body-timeout. (A call the agent never answers is Unreachable.)"""


class NotOwner(ApiError):
    """409 not_owner: this member is not (or no longer) the task's active
    owner, or the epoch is stale. Stop the task without releasing it."""


class NotRevoked(ApiError):
    """409 not_revoked: a release of a task that is not being revoked."""


class Resume(ApiError):
    """409 resume: the agent holds a commit of the task that the worker was
    not told of. Never retry the commit; restart the task from the
    checkpoint in /assignment (the runner does)."""


class TooLarge(ApiError):
    """413 too_large: a body, key, value or checkpoint over its limit, or a
    batch get of too many keys or values; split it."""


class UnsupportedMediaType(ApiError):
    """415 unsupported_media_type: a body sent without its Content-Type."""


class Internal(ApiError):
    """500 internal: a bug or an unexpected failure of the agent; retry, and
    report it (details are in the agent's log)."""


class Unavailable(ApiError):
    """503 unavailable: not ready, shutting down, NATS unreachable, no disk,
    too many requests; retry shortly."""


_classes: Dict[str, Type[ApiError]] = {
    Code.INVALID: Invalid,
    Code.TOO_LARGE: TooLarge,
    Code.UNAUTHORIZED: Unauthorized,
    Code.UNKNOWN_TASK: UnknownTask,
    Code.NOT_FOUND: NotFound,
    Code.NOT_OWNER: NotOwner,
    Code.NOT_REVOKED: NotRevoked,
    Code.RESUME: Resume,
    Code.UNAVAILABLE: Unavailable,
    Code.METHOD_NOT_ALLOWED: MethodNotAllowed,
    Code.INTERNAL: Internal,
    Code.UNSUPPORTED_MEDIA_TYPE: UnsupportedMediaType,
    Code.HOST_NOT_ALLOWED: HostNotAllowed,
    Code.CROSS_ORIGIN: CrossOrigin,
    Code.TIMEOUT: Timeout,
}


def api_error(status: int, code: str, message: str) -> ApiError:
    """The error of an answer: the subclass of its code, else ApiError."""
    return _classes.get(code, ApiError)(status, code, message)


class Unreachable(Exception):
    """No answer: the agent is down, restarting, or paused (the call's own
    timeout passed: timed_out says so). The outcome of the call is unknown:
    a commit may have landed (retry it: if it had, the retry is refused with
    Resume)."""

    def __init__(self, message: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class Cancelled(Exception):
    """The call was ended by its caller (its Cancel was set) before the
    answer came. As with Unreachable, its outcome is unknown."""


class MalformedBody(Exception):
    """A binary answer that is not the layout it should be."""


def retryable(err: BaseException) -> bool:
    """Whether a call that failed with err may simply be sent again."""
    return isinstance(err, (Unreachable, Unavailable)) or (isinstance(err, ApiError) and err.status >= 500)
