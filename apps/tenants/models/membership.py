from __future__ import annotations

from django.conf import settings
from django.db import models

from apps.core.models import TenantOwnedModel

from ..choices import Role


class Membership(TenantOwnedModel):
    """A user's role in a tenant. `cluster_identity` (a Kubernetes user name) gets a RoleBinding in the namespace."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="gryvia_memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    cluster_identity = models.CharField(max_length=200, blank=True, default="")
    # "sso" when OIDC single sign-on made it: only those are removed when the provider's claim stops naming the
    # tenant; a membership granted by hand ("") stays whatever the claim says.
    source = models.CharField(max_length=10, blank=True, default="")

    AUDIT_FIELDS = ("role", "cluster_identity", "source")

    class Meta(TenantOwnedModel.Meta):
        constraints = [models.UniqueConstraint(fields=["tenant", "user"], name="membership_unique_user_per_tenant")]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant_id} as {self.role}"
