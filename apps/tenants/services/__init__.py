"""The tenants app's public face for writes and credentials: tenants, memberships, API keys (user-managed and
bound to an object's lifecycle), the one check of a presented key, and the hooks other apps fill in.

Every change goes through these functions (audited, transactional). Reads: apps.tenants.selectors.
"""

from ..keys import parse_key
from ..manifests import CONTAINER_DEFAULT_LIMITS
from .api_keys import KEY_UPDATE_FIELDS, api_key_create, api_key_revoke, api_key_rotate, api_key_update
from .bound_keys import api_key_issue_bound, api_key_revoke_bound, api_keys_issue_bound
from .credentials import (
    KEY_RECORD_FIELDS,
    LAST_USED_RESOLUTION,
    KeyRecord,
    admin_principal,
    api_key_authenticate,
    api_key_verify,
    principal_for_user,
)
from .hooks import KEY_LIMIT_FIELDS, access_changed, on_access_changed, register_key_limit_validator
from .memberships import membership_add, membership_remove, membership_update
from .sso import SSO_SOURCE, memberships_sync_from_claims, sso_roles_from_claim
from .tenants import (
    RECONCILE,
    TENANT_SPEC_FIELDS,
    tenant_archive,
    tenant_create,
    tenant_record_reconcile_error,
    tenant_set_status,
    tenant_update,
)

__all__ = [
    "CONTAINER_DEFAULT_LIMITS",
    "KEY_LIMIT_FIELDS",
    "KEY_RECORD_FIELDS",
    "KEY_UPDATE_FIELDS",
    "LAST_USED_RESOLUTION",
    "RECONCILE",
    "SSO_SOURCE",
    "TENANT_SPEC_FIELDS",
    "KeyRecord",
    "access_changed",
    "admin_principal",
    "api_key_authenticate",
    "api_key_create",
    "api_key_issue_bound",
    "api_key_revoke",
    "api_key_revoke_bound",
    "api_key_rotate",
    "api_key_update",
    "api_key_verify",
    "api_keys_issue_bound",
    "membership_add",
    "membership_remove",
    "membership_update",
    "memberships_sync_from_claims",
    "on_access_changed",
    "parse_key",
    "principal_for_user",
    "register_key_limit_validator",
    "sso_roles_from_claim",
    "tenant_archive",
    "tenant_create",
    "tenant_record_reconcile_error",
    "tenant_set_status",
    "tenant_update",
]
