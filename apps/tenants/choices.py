"""The tenants app's fixed vocabularies: a tenant's status phase and a member's role."""

from __future__ import annotations

from django.db import models


class TenantPhase(models.TextChoices):
    """Where the tenant reconciler stands with a tenant's cluster objects."""

    PENDING = "Pending"
    READY = "Ready"
    ERROR = "Error"
    ARCHIVED = "Archived"


class Role(models.TextChoices):
    """A member's role in a tenant (its scopes: apps.core.scopes.ROLE_SCOPES)."""

    OWNER = "owner"
    ADMIN = "admin"
    MEMBER = "member"
    VIEWER = "viewer"
