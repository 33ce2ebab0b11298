"""Inference services and model aliases: every change goes through these functions.

Each write is transactional and leaves one audit row; once it commits, the gateway's cached routes are dropped
(`routing.routes_changed`) and the inference service reconciler is nudged. A service or alias with no tenant is
shared by the platform: only platform staff with `admin` create, change or delete those; a tenant's own need
`models:write` in that tenant. Errors are Django `ValidationError`s naming the field, or `PermissionError` (403).

The upstream credential is stored only encrypted (apps.core.crypto); the audit log says `credential: "set"`,
`"changed"` or `"removed"`, never the value.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F

from apps.core import crypto
from apps.core import scopes as S
from apps.core.audit import audit_record, snapshot
from apps.core.periodic import nudge
from apps.core.principal import Principal
from apps.tenants.models import Tenant

from . import routing, spec
from .models import InferenceService, ModelAlias
from .reconciler import RECONCILE

__all__ = [
    "ALIAS_FIELDS",
    "MODELS_WRITE",
    "RECONCILE",
    "SERVICE_FIELDS",
    "inference_service_create",
    "inference_service_delete",
    "inference_service_update",
    "model_alias_create",
    "model_alias_delete",
    "model_alias_update",
    "upstream_credential",
    "validate_inference_service",
    "validate_key_limits",
    "validate_model_alias",
]

MODELS_WRITE = "models:write"
# What `inference_service_update` may change: every spec field but the name (the object's address) and tenant.
SERVICE_FIELDS = tuple(f for f in InferenceService.AUDIT_FIELDS if f != "name") + ("credential",)
ALIAS_FIELDS = ("targets",)
_TYPES = {InferenceService: "inference_service", ModelAlias: "model_alias"}


def _audit(actor: Principal, action: str, obj: InferenceService | ModelAlias, before: Any, after: Any) -> None:
    tenant = obj.tenant
    audit_record(
        actor=actor,
        action=action,
        obj=obj,
        object_type=_TYPES[type(obj)],
        object_id=obj.name,
        tenant_id=tenant.pk if tenant is not None else None,
        tenant_slug=tenant.slug if tenant is not None else "",
        before=before,
        after=after,
    )


def _changed() -> None:
    """After commit: the gateway reloads its routes, the reconciler looks at once."""
    transaction.on_commit(routing.routes_changed)
    nudge(RECONCILE)


def _require_write(actor: Principal, tenant: Tenant | None, what: str) -> None:
    if tenant is None:
        if not (actor.is_platform and S.ADMIN in actor.platform_scopes):
            raise PermissionError(f"only platform staff with admin can create, change or delete shared {what}")
    elif not actor.has_scope(MODELS_WRITE, tenant.pk):
        raise PermissionError(f"this credential lacks the scope {MODELS_WRITE!r} in tenant {tenant.slug}")


def _reject_unknown(changes: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(changes) - set(allowed))
    if unknown:
        raise ValidationError({name: "unknown field, or one that cannot be changed" for name in unknown})


def _owner(tenant: Tenant | None) -> str:
    return f"tenant {tenant.slug}" if tenant is not None else "the shared services"


def _snapshot(service: InferenceService) -> dict[str, Any]:
    return snapshot(service, InferenceService.AUDIT_FIELDS)


# --- inference services ----------------------------------------------------------------------------------------


def validate_inference_service(**fields: Any) -> dict[str, Any]:
    """Check a service's fields without writing (the admin form's check); returns the values to store."""
    return spec.clean_service(fields)


@transaction.atomic
def inference_service_create(
    *,
    actor: Principal,
    tenant: Tenant | None,
    name: str,
    runtime: str,
    model: str,
    model_name: str = "",
    task: str | None = None,
    upstream_model: str = "",
    version: str = "",
    weight: int = 100,
    url: str = "",
    credential: str = "",
    replicas: int = 1,
    resources: dict[str, Any] | None = None,
    args: list[str] | None = None,
    price_input_per_1m: Decimal | int | str = 0,
    price_output_per_1m: Decimal | int | str = 0,
    context_length: int | None = None,
    enabled: bool = True,
) -> InferenceService:
    """Create an inference service in `tenant`, or a shared one (`tenant=None`, platform admins only).

    `model_name` (what clients call) defaults to `name`; `upstream_model` to `model` for external services and
    to `model_name` otherwise; `task` to embeddings for sentence-transformers and chat otherwise. `credential`,
    the upstream's API key, is stored encrypted.

    Raises:
        ValidationError: a bad field (named), or the name is taken in the tenant (or among shared services).
        PermissionError: the actor may not write there.
    """
    _require_write(actor, tenant, "inference services")
    values = spec.clean_service(
        dict(
            name=name,
            runtime=runtime,
            task=task,
            model=model,
            model_name=model_name,
            upstream_model=upstream_model,
            version=version,
            weight=weight,
            url=url,
            replicas=replicas,
            resources=resources,
            args=args,
            price_input_per_1m=price_input_per_1m,
            price_output_per_1m=price_output_per_1m,
            context_length=context_length,
            enabled=enabled,
        )
    )
    credential = spec.clean_credential(credential)
    service = InferenceService(
        tenant=tenant, created_by=actor.label, credential_encrypted=crypto.encrypt(credential), **values
    )
    taken = ValidationError({"name": f"an inference service named {name!r} already exists in {_owner(tenant)}"})
    if InferenceService.objects.filter(tenant=tenant, name=values["name"]).exists():
        raise taken
    try:
        with transaction.atomic():
            service.save()
    except IntegrityError as exc:  # created meanwhile
        raise taken from exc
    after = _snapshot(service)
    if credential:
        after["credential"] = "set"
    _audit(actor, "inference_service.create", service, None, after)
    _changed()
    return service


def _credential_change(service: InferenceService, new: str) -> str | None:
    """What happens to the stored credential: "set", "changed", "removed", or None (it stays as it is)."""
    if not new:
        return "removed" if service.credential_encrypted else None
    if not service.credential_encrypted:
        return "set"
    try:
        same = crypto.decrypt(service.credential_encrypted) == new
    except crypto.SecretUnreadable:
        same = False
    return None if same else "changed"


@transaction.atomic
def inference_service_update(*, actor: Principal, service: InferenceService, **changes: Any) -> InferenceService:
    """Change spec fields (any of `SERVICE_FIELDS`); bumps `generation` when one changes. The name never changes.

    `credential=""` removes the upstream credential, leaving it out keeps it. `model_name=""` and
    `upstream_model=""` go back to their defaults; an `upstream_model` that was the default follows `model`.
    """
    _reject_unknown(changes, SERVICE_FIELDS)
    service = InferenceService.objects.select_for_update(of=("self",)).select_related("tenant").get(pk=service.pk)
    _require_write(actor, service.tenant, "inference services")
    before = _snapshot(service)
    merged: dict[str, Any] = {field: getattr(service, field) for field in InferenceService.AUDIT_FIELDS}
    if service.upstream_model == spec.default_upstream_model(service.runtime, service.model, service.model_name):
        merged["upstream_model"] = ""  # the default: it follows model / model_name
    if "runtime" in changes and "task" not in changes:
        merged["task"] = None  # the new runtime's default
    credential = changes.pop("credential", None)
    merged.update(changes)
    values = spec.clean_service(merged)
    for field, value in values.items():
        setattr(service, field, value)
    after = _snapshot(service)
    action = None
    if credential is not None:
        credential = spec.clean_credential(credential)
        action = _credential_change(service, credential)
        if action is not None:
            service.credential_encrypted = crypto.encrypt(credential)
            after["credential"] = action
    if after == before:
        return service
    service.generation = F("generation") + 1
    service.save()
    service.refresh_from_db()
    _audit(actor, "inference_service.update", service, before, after)
    _changed()
    return service


@transaction.atomic
def inference_service_delete(*, actor: Principal, service: InferenceService) -> None:
    """Delete a service; the reconciler removes what it ran, and the gateway stops routing to it."""
    _require_write(actor, service.tenant, "inference services")
    before = _snapshot(service)
    if service.credential_encrypted:
        before["credential"] = "set"
    _audit(actor, "inference_service.delete", service, before, None)
    service.delete()
    _changed()


def upstream_credential(service: InferenceService) -> str:
    """The upstream's API key in plaintext ("" when none), for the gateway's upstream request only."""
    return crypto.decrypt(service.credential_encrypted)


# --- model aliases ---------------------------------------------------------------------------------------------


def validate_model_alias(*, name: str, targets: Any) -> list[str]:
    """Check an alias's name and targets without writing; returns the targets to store."""
    return spec.clean_alias(name, targets)[1]


@transaction.atomic
def model_alias_create(*, actor: Principal, tenant: Tenant | None, name: str, targets: list[str]) -> ModelAlias:
    """Create a model alias in `tenant`, or a shared one (`tenant=None`, platform admins only).

    `targets`: model names tried in order (at most 8, none of them the alias itself).
    """
    _require_write(actor, tenant, "model aliases")
    name, targets = spec.clean_alias(name, targets)
    alias = ModelAlias(tenant=tenant, name=name, targets=targets)
    taken = ValidationError({"name": f"a model alias named {name!r} already exists in {_owner(tenant)}"})
    if ModelAlias.objects.filter(tenant=tenant, name=name).exists():
        raise taken
    try:
        with transaction.atomic():
            alias.save()
    except IntegrityError as exc:
        raise taken from exc
    _audit(actor, "model_alias.create", alias, None, snapshot(alias, ModelAlias.AUDIT_FIELDS))
    _changed()
    return alias


@transaction.atomic
def model_alias_update(*, actor: Principal, alias: ModelAlias, **changes: Any) -> ModelAlias:
    """Change an alias's `targets`. The name never changes."""
    _reject_unknown(changes, ALIAS_FIELDS)
    alias = ModelAlias.objects.select_for_update(of=("self",)).select_related("tenant").get(pk=alias.pk)
    _require_write(actor, alias.tenant, "model aliases")
    before = snapshot(alias, ModelAlias.AUDIT_FIELDS)
    if "targets" in changes:
        alias.targets = spec.clean_alias(alias.name, changes["targets"])[1]
    after = snapshot(alias, ModelAlias.AUDIT_FIELDS)
    if after != before:
        alias.save()
        _audit(actor, "model_alias.update", alias, before, after)
        _changed()
    return alias


@transaction.atomic
def model_alias_delete(*, actor: Principal, alias: ModelAlias) -> None:
    _require_write(actor, alias.tenant, "model aliases")
    _audit(actor, "model_alias.delete", alias, snapshot(alias, ModelAlias.AUDIT_FIELDS), None)
    alias.delete()
    _changed()


# --- API key limits (apps.tenants calls this when a key is created or changed) ---------------------------------


def validate_key_limits(limits: dict[str, Any]) -> dict[str, Any]:
    """Check an API key's gateway limits: `allowed_models` a list of model names (empty: every model the tenant
    may use), `requests_per_minute`, `tokens_per_minute`, `tokens_per_day` positive whole numbers or None."""
    out: dict[str, Any] = {}
    for field, value in limits.items():
        if field == "allowed_models":
            out[field] = spec.clean_model_names(value, field)
        elif field == "tokens_per_day":
            out[field] = spec.clean_limit(value, field, high=2**63 - 1)
        else:
            out[field] = spec.clean_limit(value, field)
    return out
