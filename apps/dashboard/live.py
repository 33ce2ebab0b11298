"""The job pages' live parts (docs/dashboard.md, "Live views"): the status fragment the detail page re-renders when
an event for the job arrives on /ws/events/ (or on its polling fallback), and the job's log as plain text, whole
or followed. Same scoping as the job page: another tenant's job is a 404."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render

from apps.jobs.selectors import job_events_recent, job_get_readable, job_log_follow, job_log_text

from .views import tenant_page

LOG_TAIL_MAX = 5000  # lines per node index a follow starts with at most; the page asks for fewer


def _job(principal, tenant, name: str):
    job = job_get_readable(principal=principal, tenant_id=tenant.pk, name=name)
    if job is None:
        raise Http404("no such job in this tenant")
    return job


def _tail(request: HttpRequest) -> int | None:
    try:
        tail = int(request.GET.get("tail", ""))
    except ValueError:
        return None
    return min(max(tail, 1), LOG_TAIL_MAX)


@tenant_page
def job_status(request: HttpRequest, principal, tenant, name: str) -> HttpResponse:
    """The job's status fragment (phase, reason, queue, nodes, conditions, newest events): the one template the
    detail page renders it with, so a live refresh and a reload show the same. The phase badge in the page's heading
    comes along as an htmx out-of-band swap."""
    job = _job(principal, tenant, name)
    context = {"job": job, "events": job_events_recent(job=job), "oob": True}
    response = render(request, "dashboard/jobs/_status.html", context)
    response["Cache-Control"] = "no-store"  # polled: a cached answer would freeze the page
    return response


@tenant_page
def job_log(request: HttpRequest, principal, tenant, name: str) -> HttpResponse:
    """The job's log as text/plain, every node index merged (`[<index>] ` prefixes), as the REST API serves it.
    `?follow=1` streams new lines until the job ends (the page's live tail); `?tail=N` starts from the last N lines
    of each index; `?download=1` saves it as `<name>.log`."""
    job = _job(principal, tenant, name)
    tail = _tail(request)
    if request.GET.get("follow") == "1":
        response = StreamingHttpResponse(job_log_follow(job=job, tail=tail), content_type="text/plain; charset=utf-8")
        response["X-Accel-Buffering"] = "no"  # a buffering proxy would hold the lines back
    else:
        response = HttpResponse(job_log_text(job=job, tail=tail), content_type="text/plain; charset=utf-8")
    response["Cache-Control"] = "no-store"
    if request.GET.get("download") == "1":
        response["Content-Disposition"] = f'attachment; filename="{job.name}.log"'
    return response
