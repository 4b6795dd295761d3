"""The one exception tree of slurmtower.

Every library error derives from :class:`SlurmtowerError`. Errors are translated in
exactly two places: the API's exception handler (HTTP status + JSON problem body) and
the CLI's (exit code + one line). Each class carries the HTTP status and CLI exit code
it maps to, so both translators stay one small function.

::

    SlurmtowerError
    ├── ConfigError                 bad or unknown configuration key      (500 / exit 78)
    │   └── StoreSchemaError        the store's schema is older or newer than this slurmtower
    ├── InvalidInput                bad user input, names the parameter   (400 / exit 2)
    │   ├── NodeSetError            malformed node set expression
    │   └── PayloadTooLarge         a request body over the route's limit  (413 / exit 2)
    ├── NotFound                    unknown action, execution, job ...    (404 / exit 2)
    ├── AuthenticationError         missing or bad credentials            (401 / exit 77)
    ├── PermissionDenied            authenticated but not allowed         (403 / exit 77)
    ├── Conflict                    refused by a safety rule (drain owner) (409 / exit 3)
    ├── Unsupported                 this backend / Slurm release cannot   (501 / exit 3)
    ├── SlurmError                  a Slurm command or API call failed    (502 / exit 1)
    │   ├── SlurmRequestError       Slurm refused the request             (400 / exit 2)
    │   └── SlurmUnavailable        slurmctld (or slurmrestd) unreachable (503 / exit 69)
    │       └── SlurmTimeout        the call did not finish in time       (504 / exit 69)
    ├── AccountingUnavailable       the slurmdbd database does not answer (503 / exit 69)
    └── IdentityProviderUnavailable the OpenID provider does not answer   (503 / exit 69)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

__all__ = [
    "AccountingUnavailable",
    "AuthenticationError",
    "ConfigError",
    "Conflict",
    "IdentityProviderUnavailable",
    "InvalidInput",
    "KeyTaken",
    "NodeSetError",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "SlurmError",
    "SlurmRequestError",
    "SlurmTimeout",
    "SlurmUnavailable",
    "SlurmtowerError",
    "StoreError",
    "StoreSchemaError",
    "Unsupported",
]


class SlurmtowerError(Exception):
    """Base of every slurmtower error."""

    http_status: ClassVar[int] = 500
    exit_code: ClassVar[int] = 1
    title: ClassVar[str] = "slurmtower error"

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra

    def to_problem(self) -> dict[str, Any]:
        """RFC 9457 problem body (without secrets)."""
        body: dict[str, Any] = {
            "type": f"https://slurmtower.dev/problems/{type(self).__name__}",
            "title": self.title,
            "status": self.http_status,
            "detail": self.message,
        }
        body.update({k: v for k, v in self.extra.items() if v is not None})
        return body


class ConfigError(SlurmtowerError):
    http_status = 500
    exit_code = 78
    title = "configuration error"


class StoreSchemaError(ConfigError):
    """slurmtower's own store is at a schema revision this slurmtower does not run on.

    ``revision`` is the store's, ``head`` this slurmtower's; ``remedy`` the fix
    (``slurmtower db upgrade``, or upgrading slurmtower itself).
    """

    title = "store schema mismatch"


class InvalidInput(SlurmtowerError):
    """Bad user input. ``param`` names the offending parameter."""

    http_status = 400
    exit_code = 2
    title = "invalid input"

    def __init__(self, message: str, *, param: str | None = None, **extra: Any) -> None:
        super().__init__(message, param=param, **extra)
        self.param = param


class NodeSetError(InvalidInput):
    title = "invalid node set"


class PayloadTooLarge(InvalidInput):
    """A request body larger than the route takes (refused before it is all read)."""

    http_status = 413
    title = "request body too large"


class NotFound(SlurmtowerError):
    http_status = 404
    exit_code = 2
    title = "not found"


class AuthenticationError(SlurmtowerError):
    http_status = 401
    exit_code = 77
    title = "authentication required"


class PermissionDenied(SlurmtowerError):
    http_status = 403
    exit_code = 77
    title = "permission denied"


class Conflict(SlurmtowerError):
    http_status = 409
    exit_code = 3
    title = "conflict"


class StoreError(SlurmtowerError):
    """slurmtower's own store (executions, audit, holds) cannot be read or written."""

    http_status = 503
    exit_code = 69
    title = "action store unavailable"


class KeyTaken(Conflict):
    """Another execution of this principal already holds the idempotency key."""


class Unsupported(SlurmtowerError):
    http_status = 501
    exit_code = 3
    title = "not supported by this backend"


class SlurmError(SlurmtowerError):
    """A Slurm command or API call failed; carries argv, return code and Slurm's message."""

    http_status = 502
    exit_code = 1
    title = "slurm error"

    def __init__(
        self,
        message: str,
        *,
        argv: Sequence[str] | None = None,
        returncode: int | None = None,
        stderr: str | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message, **extra)
        self.argv = list(argv) if argv is not None else None
        self.returncode = returncode
        self.stderr = stderr

    def to_problem(self) -> dict[str, Any]:
        body = super().to_problem()
        if self.argv is not None:
            body["command"] = self.argv[0] if self.argv else None
        if self.returncode is not None:
            body["returncode"] = self.returncode
        return body


class SlurmRequestError(SlurmError):
    """Slurm refused the request (unknown node, invalid state, missing reason ...)."""

    http_status = 400
    exit_code = 2
    title = "slurm refused the request"


class SlurmUnavailable(SlurmError):
    http_status = 503
    exit_code = 69
    title = "slurm controller unavailable"


class SlurmTimeout(SlurmUnavailable):
    http_status = 504
    title = "slurm call timed out"


class AccountingUnavailable(SlurmtowerError):
    http_status = 503
    exit_code = 69
    title = "accounting database unavailable"


class IdentityProviderUnavailable(SlurmtowerError):
    """The OpenID provider (discovery, keys, token endpoint) did not answer, or not as one."""

    http_status = 503
    exit_code = 69
    title = "identity provider unavailable"
