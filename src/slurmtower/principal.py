"""Who the caller is and what their role lets them do: the one place roles are spelled.

Roles: ``reader`` (reads), ``operator`` (+ node, job and reservation actions), ``admin``
(+ triggers, rules, config) and ``alerter`` (may only post alerts to ``/hooks``). A
:class:`Principal` is what every adapter (HTTP, dashboard, CLI, rules) hands the library;
how a credential becomes one is :mod:`slurmtower.api.security`'s (tokens, JWTs), what a
principal may see is :mod:`slurmtower.visibility`'s.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Literal, get_args

__all__ = [
    "ACTION_PERM",
    "ADMIN",
    "ALERTER",
    "ANONYMOUS",
    "CSRF_HEADER",
    "LOGIN_COOKIE",
    "MAX_NAME",
    "OPERATOR",
    "READER",
    "ROLES",
    "ROLE_PERM",
    "SESSION_COOKIE",
    "USER",
    "Perm",
    "Principal",
    "Role",
    "hash_token",
    "new_token",
    "role_on_cluster",
    "role_perm",
]


class Perm(IntEnum):
    """What a route or an action needs, in increasing order."""

    PUBLIC = 0
    READ = 1
    OPERATE = 2
    ADMIN = 3


#: Every role a token, a JWT or a session may carry.
Role = Literal["user", "reader", "operator", "admin", "alerter"]

USER = "user"
"""A person who is a Slurm user: what a reader sees, the private fields of their own jobs
(as every reader), and, with job control, acting on their own jobs only."""
READER = "reader"
OPERATOR = "operator"
ADMIN = "admin"
ALERTER = "alerter"
"""Alertmanager's role: no permission of its own (every route but the alert hooks refuses it)."""

ROLES: tuple[str, ...] = get_args(Role)

#: The permission each role grants (``alerter`` and unknown roles: none beyond public).
ROLE_PERM: dict[str, Perm] = {USER: Perm.READ, READER: Perm.READ, OPERATOR: Perm.OPERATE, ADMIN: Perm.ADMIN}

#: An action's declared permission (``read``, ``operate``, ``admin``) as a :class:`Perm`.
ACTION_PERM: dict[Literal["read", "operate", "admin"], Perm] = {
    "read": Perm.READ, "operate": Perm.OPERATE, "admin": Perm.ADMIN}

#: The dashboard's session cookie: an opaque id (HttpOnly, SameSite=Lax), never a credential.
SESSION_COOKIE = "slurmtower_session"
#: Binds an OpenID Connect sign-on under way to the browser that began it (HttpOnly, 10 min).
LOGIN_COOKIE = "slurmtower_login"
#: The longest caller name taken from a credential or a sign-on (the audit's ``who`` holds 255).
MAX_NAME = 255
#: Header a cookie-authenticated mutating request must carry (value ``1``).
CSRF_HEADER = "x-slurmtower-request"


def role_perm(role: str) -> Perm:
    """The permission ``role`` grants."""
    return ROLE_PERM.get(role, Perm.PUBLIC)


def role_on_cluster(principal: Principal, roles: Mapping[str, str], max_role: str | None) -> Principal:
    """``principal`` as one cluster sees it: the role that cluster gives its name
    (``[[clusters]] roles``), else the highest it gives one of its groups (``group:<name>``),
    else its deployment role capped at the cluster's ``max_role``
    (an operator of the test cluster who only reads production). Anonymous stays anonymous.

    An ``alerter`` capped below ``operator`` keeps no role there (``none``): its alerts drive
    the rules' drains, an operator's reach, and being capped must not make it a reader either.
    """
    if principal is ANONYMOUS or (not roles and max_role is None):
        return principal
    own = roles.get(principal.name)
    if own is None and principal.groups:
        # the highest role the cluster gives one of the principal's groups
        found = [roles[key] for key in (f"group:{g}" for g in principal.groups) if key in roles]
        own = max(found, key=role_perm) if found else None
    if own is not None:
        return principal if own == principal.role else replace(principal, role=own)
    if max_role is not None and role_perm(max_role) < principal.perm:
        return replace(principal, role=max_role)
    if principal.role == ALERTER and max_role is not None and role_perm(max_role) < Perm.OPERATE:
        return replace(principal, role="none")
    return principal


@dataclass(frozen=True)
class Principal:
    """An authenticated caller (or :data:`ANONYMOUS`); ``name`` goes to audit and drain owners."""

    name: str
    role: str
    via: str = "token"
    expires_at: float | None = None
    """Unix time after which the credential is no longer accepted (a JWT's ``exp`` plus the
    allowed clock skew); long-lived responses (SSE) end then."""
    groups: tuple[str, ...] = ()
    """The groups a sign-on or a JWT names that some cluster gives a role (``group:<name>``
    in ``[[clusters]] roles``); empty for static tokens."""

    @property
    def perm(self) -> Perm:
        return role_perm(self.role)

    @property
    def may_operate(self) -> bool:
        return self.perm >= Perm.OPERATE


ANONYMOUS = Principal(name="anonymous", role="anonymous", via="none")


def hash_token(token: str) -> str:
    """Hex SHA-256 of ``token``: what ``auth.tokens[].sha256`` holds."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A fresh random bearer token (256 bits, URL-safe, prefixed so it is recognisable in leaks)."""
    return "stw_" + secrets.token_urlsafe(32)
