"""The dashboard's pages. Interfaces only: each view resolves the user's principal and session tenant, then reads
through the other apps' selectors with the REST API's scoping (what the API would 404 is a 404 here)."""

from __future__ import annotations

from functools import wraps

import yaml
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from apps.jobs.choices import JobPhase
from apps.jobs.selectors import job_events_recent, job_filterset, job_get_readable, job_phase_counts, jobs_readable
from apps.tenants.services import principal_for_user

from .services import TenantNotVisible, session_tenant, session_tenant_switch, tenants_switchable

LOGIN_URL = reverse_lazy("dashboard:login")
JOBS_PER_PAGE = 25
RECENT_JOBS = 10


class LoginView(auth_views.LoginView):
    """Local accounts: Django's session login (django-axes locks out repeated failures, as on the admin)."""

    template_name = "dashboard/login.html"
    redirect_authenticated_user = True
    next_page = reverse_lazy("dashboard:overview")

    def get_default_redirect_url(self) -> str:
        return str(self.next_page)


class LogoutView(auth_views.LogoutView):
    """POST only (Django's LogoutView): ends the session, back to the login page."""

    next_page = LOGIN_URL


def tenant_page(view):
    """Log in first (redirect to the login page with ?next=); then hand the view the user's principal and the
    session's tenant, or show the "no tenant yet" page when the user is a member of none."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not request.user.is_authenticated:
            return auth_views.redirect_to_login(request.get_full_path(), LOGIN_URL)
        principal = principal_for_user(user=request.user, kind="session")
        tenant = session_tenant(session=request.session, principal=principal)
        if tenant is None:
            return render(request, "dashboard/tenant_none.html", status=403)
        request.dashboard = {
            "principal": principal,
            "tenant": tenant,
            "tenants": list(tenants_switchable(principal=principal)),
        }
        return view(request, principal, tenant, *args, **kwargs)

    return wrapper


def _context(request: HttpRequest, **extra) -> dict:
    return {"tenant": request.dashboard["tenant"], "tenants": request.dashboard["tenants"], **extra}


@tenant_page
def overview(request: HttpRequest, principal, tenant) -> HttpResponse:
    """The tenant's overview: running, queued and failed job counts and the most recent jobs."""
    counts = job_phase_counts(principal=principal, tenant_id=tenant.pk)
    waiting = counts.get(JobPhase.PENDING, 0) + counts.get(JobPhase.QUEUED, 0)
    cards = [
        ("Running", counts.get(JobPhase.RUNNING, 0) + counts.get(JobPhase.SCHEDULING, 0), "Running"),
        ("Queued", waiting, "Queued"),
        ("Failed", counts.get(JobPhase.FAILED, 0), "Failed"),
    ]
    recent = list(jobs_readable(principal=principal, tenant_id=tenant.pk)[:RECENT_JOBS])
    return render(request, "dashboard/overview.html", _context(request, cards=cards, jobs=recent))


@tenant_page
def job_list(request: HttpRequest, principal, tenant) -> HttpResponse:
    """The tenant's jobs, filtered by the REST API's filterset (phase, queue, name), newest first, paginated.
    An htmx request gets the table only (the filter form swaps it in place)."""
    filterset = job_filterset(principal=principal, tenant_id=tenant.pk, data=request.GET)
    jobs = filterset.qs if filterset.is_valid() else jobs_readable(principal=principal, tenant_id=tenant.pk).none()
    page = Paginator(jobs, JOBS_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = _context(request, filterset=filterset, page=page, query=query.urlencode())
    template = "dashboard/_job_table.html" if request.htmx else "dashboard/job_list.html"
    return render(request, template, context)


@tenant_page
def job_detail(request: HttpRequest, principal, tenant, name: str) -> HttpResponse:
    """One job of the session's tenant: phase, reason, queue position, conditions, spec (YAML) and events."""
    job = job_get_readable(principal=principal, tenant_id=tenant.pk, name=name)
    if job is None:
        raise Http404("no such job in this tenant")
    spec_yaml = yaml.safe_dump(job.spec, sort_keys=False, default_flow_style=False)
    events = job_events_recent(job=job)
    return render(request, "dashboard/job_detail.html", _context(request, job=job, spec_yaml=spec_yaml, events=events))


@require_POST
@tenant_page
def tenant_switch(request: HttpRequest, principal, tenant) -> HttpResponse:
    """Switch the session's tenant (the header's form). A tenant the user is not a member of is refused (404)."""
    try:
        chosen = session_tenant_switch(
            session=request.session, principal=principal, slug=request.POST.get("tenant", "")
        )
    except TenantNotVisible as exc:
        raise Http404(str(exc)) from exc
    messages.info(request, f"Now working in {chosen.display_name or chosen.slug}.")
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = str(reverse_lazy("dashboard:overview"))
    # A job page of the previous tenant would 404 in the new one: go to the same kind of page, not the same object.
    if target.startswith(str(reverse_lazy("dashboard:jobs"))):
        target = str(reverse_lazy("dashboard:jobs"))
    return redirect(target)
