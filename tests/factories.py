"""Plain factory functions for tests: tenants, users, keys, API clients."""

from __future__ import annotations

import itertools

from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from apps.core.principal import system
from apps.tenants import services
from apps.tenants.models import Tenant

_seq = itertools.count(1)
ACTOR = system("tests")


def make_tenant(slug: str | None = None, **spec) -> Tenant:
    return services.tenant_create(actor=ACTOR, slug=slug or f"t{next(_seq)}", **spec)


def make_user(username: str | None = None, *, staff: bool = False, password: str = "pw-for-tests-1"):
    user = get_user_model().objects.create_user(
        username or f"user{next(_seq)}", f"{username or 'u'}@example.com", password
    )
    if staff:
        user.is_staff = True
        user.save()
    return user


def make_key(tenant: Tenant, scopes: list[str] | None = None, *, platform: bool = False, **kw) -> str:
    """Create a key and return its plaintext."""
    _key, plaintext = services.api_key_create(
        actor=ACTOR, tenant=tenant, scopes=scopes or ["admin"], is_platform=platform, **kw
    )
    return plaintext


def client_for(key: str | None = None, **headers) -> APIClient:
    client = APIClient()
    if key is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}", **headers)
    elif headers:
        client.credentials(**headers)
    return client
