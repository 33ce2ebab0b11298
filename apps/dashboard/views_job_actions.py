"""The dashboard's job actions: submit a GryviaAIJob manifest, cancel, resubmit. Each goes through the jobs services
as the session user's principal (audited as `user:<name>`), and each is refused as the REST API refuses it: a job of
another tenant is a 404, an action the user's role lacks a 403."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from apps.jobs.selectors import job_get_readable
from apps.jobs.services import JobConflict, job_cancel, job_create, job_document_load, job_document_parse, job_resubmit

from .access import JOBS_WRITE, require
from .views import _context, tenant_page

MANIFEST_EXAMPLE = """apiVersion: gryvia.io/v1alpha1
kind: GryviaAIJob
metadata:
  name: my-job
spec:
  type: training
  image: python:3.11-slim
  gpus: 0
  timeout: 10m
  command: ["python3", "-c", "print('hello')"]
"""


@tenant_page
def job_submit(request: HttpRequest, principal, tenant) -> HttpResponse:
    """GET: the submit form (a YAML manifest, as `gryvia submit` and `POST /api/v1/jobs/` take it). POST: validate
    it with the API's own checks and create the job, then go to its page; on any error, nothing is created and every
    error is listed by field path next to the form (400)."""
    require(principal, tenant, JOBS_WRITE)
    manifest, errors = MANIFEST_EXAMPLE, []
    if request.method == "POST":
        manifest = request.POST.get("manifest", "")
        try:
            name, spec = job_document_parse(job_document_load(manifest))
            job = job_create(actor=principal, tenant=tenant, name=name, spec=spec)
        except ValidationError as exc:
            errors = sorted((field, " ".join(msgs)) for field, msgs in exc.message_dict.items())
        else:
            messages.success(request, f"Submitted {job.name}.")
            return redirect("dashboard:job", name=job.name)
    context = _context(request, manifest=manifest, errors=errors)
    return render(request, "dashboard/jobs/submit.html", context, status=400 if errors else 200)


def _job_for_write(principal, tenant, name: str):
    """The job if the user may see it (else 404, as the API), then the write check (403, as the API)."""
    job = job_get_readable(principal=principal, tenant_id=tenant.pk, name=name)
    if job is None:
        raise Http404("no such job in this tenant")
    require(principal, tenant, JOBS_WRITE)
    return job


@require_POST
@tenant_page
def job_cancel_view(request: HttpRequest, principal, tenant, name: str) -> HttpResponse:
    """Cancel the job (checkpoint request, grace period, then stop); a finished job is reported, not changed."""
    job = _job_for_write(principal, tenant, name)
    try:
        job_cancel(actor=principal, job=job)
    except JobConflict as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Cancel requested for {job.name}.")
    return redirect("dashboard:job", name=job.name)


@require_POST
@tenant_page
def job_resubmit_view(request: HttpRequest, principal, tenant, name: str) -> HttpResponse:
    """Submit a finished job's spec again as `<name>-r<N>` and go to the new job; an active job is refused."""
    job = _job_for_write(principal, tenant, name)
    try:
        created = job_resubmit(actor=principal, job=job)
    except (JobConflict, ValidationError) as exc:
        messages.error(request, exc.messages[0] if isinstance(exc, ValidationError) else str(exc))
        return redirect("dashboard:job", name=job.name)
    messages.success(request, f"Resubmitted {job.name} as {created.name}.")
    return redirect("dashboard:job", name=created.name)
