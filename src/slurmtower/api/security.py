"""Who is asking and what they may do. Every route declares one permission.

Roles: ``reader`` (GET endpoints), ``operator`` (+ node and reservation actions), ``admin``
(+ triggers, rules, config). Anonymous callers reach only ``public`` routes, and read routes
when ``auth.anonymous_read`` is on.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from enum import IntEnum
from typing import Annotated

from fastapi import Depends, Request

from slurmtower.errors import AuthenticationError, PermissionDenied

__all__ = ["Perm", "Principal", "hash_token", "require"]


class Perm(IntEnum):
    PUBLIC = 0
    READ = 1
    OPERATE = 2
    ADMIN = 3


ROLE_PERM = {"reader": Perm.READ, "operator": Perm.OPERATE, "admin": Perm.ADMIN}


@dataclass(frozen=True)
class Principal:
    name: str
    role: str
    via: str = "token"

    @property
    def perm(self) -> Perm:
        return ROLE_PERM.get(self.role, Perm.PUBLIC)


ANONYMOUS = Principal(name="anonymous", role="anonymous", via="none")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def authenticate(request: Request) -> Principal:
    """The caller's principal (anonymous when no credentials were sent)."""
    cached: Principal | None = getattr(request.state, "principal", None)
    if cached is not None:
        return cached
    from slurmtower.api.services import get_services

    settings = get_services(request).settings
    header = request.headers.get("authorization", "")
    principal = ANONYMOUS
    if header:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise AuthenticationError("use 'Authorization: Bearer <token>'")
        digest = hash_token(token.strip())
        for entry in settings.auth.tokens:
            if hmac.compare_digest(entry.sha256, digest):
                principal = Principal(name=entry.name, role=entry.role)
                break
        else:
            extra = request.app.state.services.extras.get("authenticate_other")
            found = extra(token.strip()) if extra else None
            if found is None:
                raise AuthenticationError("invalid token")
            principal = found
    request.state.principal = principal
    return principal


def require(perm: Perm):  # type: ignore[no-untyped-def]
    """A dependency that lets the route run only for callers with ``perm``."""

    def dependency(request: Request) -> Principal:
        principal = authenticate(request)
        if perm == Perm.PUBLIC:
            return principal
        settings = request.app.state.services.settings
        if principal is ANONYMOUS:
            if perm == Perm.READ and settings.auth.anonymous_read:
                return principal
            raise AuthenticationError("authentication required")
        if principal.perm < perm:
            raise PermissionDenied(f"{principal.name} ({principal.role}) may not do this: needs "
                                   f"{perm.name.lower()}")
        return principal

    dependency.__slurmtower_perm__ = perm  # type: ignore[attr-defined]
    return Depends(dependency)


CurrentPrincipal = Annotated[Principal, Depends(authenticate)]
