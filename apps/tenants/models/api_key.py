from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from apps.core.models import TenantOwnedModel


class ApiKey(TenantOwnedModel):
    """A credential `gry_<key_id>_<secret>`. Only an HMAC-SHA256 of the secret (server pepper) is stored.

    After a rotation the previous digest stays valid until `previous_valid_until`. Platform keys act across
    tenants (their `tenant` is the one they were created in, for ownership and audit).
    """

    key_id = models.CharField(max_length=16, unique=True)
    name = models.CharField(max_length=100, blank=True, default="")
    secret_digest = models.CharField(max_length=64)
    previous_secret_digest = models.CharField(max_length=64, blank=True, default="")
    previous_valid_until = models.DateTimeField(null=True, blank=True)
    scopes = models.JSONField(default=list)
    is_platform = models.BooleanField(default=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    created_by = models.CharField(max_length=200, blank=True, default="")
    # Internal credentials bound to one object (a job's report token: "job:<uid>"); not listed with user keys.
    bound_to = models.CharField(max_length=100, blank=True, default="", db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # LLM gateway limits (empty: none beyond the tenant's). Models: names the key may call; empty: every model the
    # tenant may use.
    allowed_models = models.JSONField(default=list, blank=True)
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_minute = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_day = models.PositiveBigIntegerField(null=True, blank=True)

    AUDIT_FIELDS = (
        "key_id",
        "name",
        "scopes",
        "is_platform",
        "expires_at",
        "revoked_at",
        "previous_valid_until",
        "allowed_models",
        "requests_per_minute",
        "tokens_per_minute",
        "tokens_per_day",
    )

    class Meta(TenantOwnedModel.Meta):
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"gry_{self.key_id}_… ({self.name or 'unnamed'})"

    @property
    def state(self) -> str:
        now = timezone.now()
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"
