"""At start (`manage.py bootstrap`, run by `make run`): the packaged local models become shared inference services.

When the optional models extra is installed (`make models`) and workloads run on this machine (GRYVIA_BACKEND=local,
the embedded profile), `tiny-chat` (llama.cpp) and `minilm` (sentence-transformers embeddings) are registered as
shared services, visible to every tenant; the inference service reconciler then runs them as local processes.
Existing services of those names are left as they are (an operator may have changed or disabled them). In a
cluster the packaged weights are not where the pods run, so nothing is registered there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TextIO

from django.conf import settings
from django.db import IntegrityError, transaction

from apps.core.audit import audit_record, snapshot
from apps.core.lifecycle import NotReady
from apps.core.periodic import nudge
from apps.core.principal import Principal, system

from . import packaged, routing
from .choices import ServicePhase, Task
from .models import InferenceService
from .reconciler import RECONCILE


@dataclass
class Registration:
    """What `register_local_models` did: services created, services already there, or why it did nothing."""

    registered: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    skipped: str = ""

    def summary(self) -> str:
        if self.skipped:
            return f"Local models: none registered ({self.skipped})"
        parts = []
        if self.registered:
            parts.append(f"registered {', '.join(self.registered)}")
        if self.existing:
            parts.append(f"already registered: {', '.join(self.existing)}")
        return f"Local models: {'; '.join(parts)} (shared inference services, served on this machine)"


def register_local_models(*, actor: Principal) -> Registration:
    """Make sure every installed packaged model has its shared inference service (see the module docstring)."""
    if settings.GRYVIA_BACKEND != "local":
        return Registration(skipped="GRYVIA_BACKEND is kubernetes: packaged local models run only on this machine")
    available = packaged.installed()
    if not available:
        return Registration(skipped="the models extra is not installed; run `make models` to add tiny-chat and minilm")
    result = Registration()
    for model in available:
        (result.registered if _create_shared_service(model, actor=actor) else result.existing).append(model.name)
    return result


def _create_shared_service(model: packaged.LocalModel, *, actor: Principal) -> bool:
    """Create the shared service for a packaged model, audited, unless one of that name exists; True if created."""
    try:
        with transaction.atomic():
            if InferenceService.objects.filter(tenant__isnull=True, name=model.name).exists():
                return False
            service = InferenceService.objects.create(
                tenant=None,
                name=model.name,
                runtime=model.runtime,
                task=Task.CHAT if model.kind == "chat" else Task.EMBEDDINGS,
                model=model.name,
                model_name=model.name,
                upstream_model=model.served_model,
                context_length=model.context_length,
                replicas=1,
                created_by=actor.label[:200],
            )
            audit_record(
                actor=actor,
                action="inference_service.create",
                obj=service,
                object_type="inference_service",
                object_id=service.name,
                tenant_id=None,
                before=None,
                after=snapshot(service, InferenceService.AUDIT_FIELDS),
            )
            transaction.on_commit(routing.routes_changed)
            nudge(RECONCILE)
    except IntegrityError:  # another process registered it meanwhile
        return False
    return True


def bootstrap_local_models(out: TextIO) -> None:
    """`manage.py bootstrap`'s step (apps.core.lifecycle): register the packaged models, and say which."""
    out.write(register_local_models(actor=system("bootstrap")).summary())


def local_models_readiness() -> NotReady | None:
    """/readyz's check (apps.core.lifecycle): the enabled local models registered at start (the packaged tiny-chat
    and minilm, shared, on this machine's backend) that are not Ready, with their phase and why. In a cluster
    profile there are none to wait for."""
    if settings.GRYVIA_BACKEND != "local":
        return None
    rows = (
        InferenceService.objects.filter(
            tenant__isnull=True,
            enabled=True,
            replicas__gt=0,
            name__in=[m.name for m in packaged.MODELS],
            runtime__in=[packaged.LLAMACPP, packaged.SENTENCE_TRANSFORMERS],
        )
        .exclude(status_phase=ServicePhase.READY)
        .order_by("name")
        .values_list("name", "status_phase", "status_message")
    )
    waiting = [{"name": name, "phase": phase, "message": message} for name, phase, message in rows]
    if not waiting:
        return None
    names = ", ".join(f"{s['name']} ({s['phase']})" for s in waiting)
    return NotReady(problem=f"local inference services not ready: {names}", key="inference_services", items=waiting)
