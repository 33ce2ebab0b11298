"""Keys bound to an object's lifecycle (a job's token): issued by the system when the object needs one, revoked when
it ends. Not audited separately: they are part of the bound object's own lifecycle, whose changes are audited.
User-managed keys: .api_keys; checking a presented key: .credentials."""

from __future__ import annotations

from collections.abc import Iterable

from django.utils import timezone

from apps.core.db.bulk import bulk_insert

from .. import keys
from ..models import ApiKey, Tenant


def api_key_issue_bound(*, tenant: Tenant, bound_to: str, scopes: list[str], name: str) -> str:
    """Issue an internal key bound to one object (replacing any earlier one); returns its plaintext.

    Part of the bound object's own lifecycle (its creation is audited there), so not audited separately.
    """
    return api_keys_issue_bound([(tenant, bound_to, scopes, name)])[bound_to]


def api_keys_issue_bound(
    wanted: list[tuple[Tenant | int, str, list[str], str]], *, revoke_earlier: bool = True
) -> dict[str, str]:
    """`api_key_issue_bound` for many (tenant, bound_to, scopes, name) at once: one UPDATE revokes the earlier
    keys, one INSERT stores the new ones. Returns bound_to -> plaintext.

    `revoke_earlier=False`: the caller revokes the earlier keys itself, later in its transaction, with
    `api_key_revoke_bound(bound_to=..., keep=...)` keeping the new ones (a reconcile pass folds it into the one
    revocation it makes anyway)."""
    if not wanted:
        return {}
    if revoke_earlier:
        api_key_revoke_bound(bound_to=[w[1] for w in wanted])
    rows, plaintext = [], {}
    for (tenant, bound_to, scopes, name), (key_id, secret) in zip(
        wanted, keys.new_key_ids_and_secrets(len(wanted)), strict=True
    ):
        rows.append(
            {
                "tenant_id": getattr(tenant, "pk", tenant),
                "key_id": key_id,
                "name": name,
                "secret_digest": keys.digest(secret),
                "scopes": sorted(set(scopes)),
                "created_by": "system",
                "bound_to": bound_to,
            }
        )
        plaintext[bound_to] = keys.format_key(key_id, secret)
    for start in range(0, len(rows), 1000):  # plain rows: no model instance per key (a pass issues dozens)
        bulk_insert(ApiKey, rows[start : start + 1000])
    return plaintext


def _revoke_bound(bound_to: list[str], keep: list[str]) -> int:
    return (
        ApiKey.all_tenants.filter(bound_to__in=bound_to, revoked_at__isnull=True)
        .exclude(key_id__in=keep)
        .update(revoked_at=timezone.now())
    )


def api_key_revoke_bound(*, bound_to: str | list[str], keep: Iterable[str] = ()) -> int:
    """Revoke every key bound to an object, or to any of a list of objects (e.g. when jobs end), except the keys
    (by key id) in `keep`. One UPDATE. Returns how many were revoked."""
    targets = [bound_to] if isinstance(bound_to, str) else list(bound_to)
    if not targets:
        return 0
    return _revoke_bound(targets, list(keep))
