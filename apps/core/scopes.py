"""API scopes: `<family>:read`, `<family>:write`, `llm:invoke` and `admin`, and what each role grants."""

from __future__ import annotations

from collections.abc import Iterable

FAMILIES = ("keys", "jobs", "queues", "models", "billing", "webhooks")
ADMIN = "admin"
LLM_INVOKE = "llm:invoke"
ALL_SCOPES: frozenset[str] = frozenset(
    [f"{family}:{verb}" for family in FAMILIES for verb in ("read", "write")] + [LLM_INVOKE, ADMIN]
)
# Internal scopes: held only by credentials Gryvia issues itself (never grantable through the API).
JOBS_REPORT = "jobs:report"
READ_SCOPES: frozenset[str] = frozenset(f"{family}:read" for family in FAMILIES)

ROLES = ("owner", "admin", "member", "viewer")
ROLE_SCOPES: dict[str, frozenset[str]] = {
    "owner": frozenset({ADMIN}),
    "admin": frozenset({ADMIN}),
    "member": READ_SCOPES | frozenset({"jobs:write", "models:write", LLM_INVOKE, "webhooks:write"}),
    "viewer": READ_SCOPES,
}
ROLE_RANK = {role: rank for rank, role in enumerate(reversed(ROLES))}  # viewer 0 ... owner 3


def expand(scopes: Iterable[str]) -> frozenset[str]:
    """Every scope the given ones grant: `admin` grants all, `x:write` grants `x:read`."""
    out: set[str] = set()
    for scope in scopes:
        if scope == ADMIN:
            return ALL_SCOPES
        out.add(scope)
        if scope.endswith(":write"):
            out.add(scope.removesuffix(":write") + ":read")
    return frozenset(out)


def not_a_scope(scope: object) -> str:
    """What to tell a caller who asked for `scope`, which is none: every scope there is, to pick from."""
    return f"{str(scope)!r} is not a scope; the scopes are {', '.join(sorted(ALL_SCOPES))}"


def unknown(scopes: Iterable[str]) -> list[str]:
    return sorted(set(scopes) - ALL_SCOPES)


def read_only(scopes: frozenset[str]) -> frozenset[str]:
    return frozenset(s for s in scopes if s.endswith(":read"))
