"""Admin for jobs: submitted through services; a submitted job's page is read-only (its spec as YAML, its
conditions as a table) with Cancel and Resubmit buttons that run the list's actions, which call the services the
API calls."""

from __future__ import annotations

import yaml
from django import forms
from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from apps.core.admin_actions import ActionsOnlyAdminMixin, report_action
from apps.core.admin_filters import FilterSetAdminMixin
from apps.tenants.services import admin_principal

from . import services
from .api.filters import JobFilterSet
from .models import Job, JobEvent
from .selectors import with_queue_positions

_CONDITION_ROW = "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"
_CONDITIONS = (
    "<table><thead><tr><th>type</th><th>status</th><th>reason</th><th>message</th><th>last transition</th></tr>"
    "</thead><tbody>{}</tbody></table>"
)


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    fields = ("created_at", "type", "reason", "message")
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


class JobAdminForm(forms.ModelForm):
    spec = forms.JSONField(help_text='The GryviaAIJob spec (upstream field names), e.g. {"type": "training", ...}')

    class Meta:
        model = Job
        fields = ("tenant", "name", "spec")

    def clean(self):
        """Every error the form can see at once (job_validate's): the name's, and each of the spec's fields'."""
        data = super().clean()
        if self.instance.pk is not None:
            return data
        try:
            if "spec" in data:
                services.job_validate(name=data.get("name"), spec=data["spec"], name_required=False)
            elif data.get("name") is not None:  # the spec is not JSON (the field says so): the name is still checked
                services.validate_name(data["name"])
        except ValidationError as exc:
            for field, messages in exc.message_dict.items():
                if field == "name":
                    self.add_error("name", messages)
                else:
                    self.add_error("spec", [m if field == "spec" else f"{field}: {m}" for m in messages])
        return data


@admin.register(Job)
class JobAdmin(ActionsOnlyAdminMixin, FilterSetAdminMixin, admin.ModelAdmin):
    form = JobAdminForm
    filterset_class = JobFilterSet
    list_display = (
        "name",
        "tenant",
        "phase",
        "reason",
        "queue_name",
        "queue_place",
        "current_nodes",
        "gpus_allocated",
        "attempts",
        "created_at",
    )
    list_filter = ("phase", "tenant")
    search_fields = ("name", "tenant__slug", "uid")
    readonly_fields = (
        "uid",
        "generation",
        "observed_generation",
        "submitted_by",
        "phase",
        "reason",
        "message",
        "queue_name",
        "queue_place",
        "priority",
        "request",
        "conditions",
        "start_time",
        "completion_time",
        "attempts",
        "restarts",
        "allocated_nodes",
        "current_nodes",
        "ready_nodes",
        "gpus_allocated",
        "endpoint",
        "last_checkpoint_step",
        "last_checkpoint_at",
        "last_reported_step",
        "node_loss_recoveries",
        "lost_steps",
        "cancel_requested_at",
        "finalized",
        "status_applied",
        "created_at",
    )
    inlines = [JobEventInline]
    actions = ["cancel", "resubmit"]

    def get_queryset(self, request):
        return with_queue_positions(super().get_queryset(request))

    @admin.display(description="position")
    def queue_place(self, obj: Job) -> str:
        """`3 of 7` in its queue while it waits (read now, like the API's status.queuePosition)."""
        return f"{obj.queue_position} of {obj.queue_length}" if obj.queue_position else "-"

    @admin.display(description="spec")
    def spec_yaml(self, obj: Job) -> str:
        # Keys sorted: PostgreSQL's jsonb keeps no order, and the page reads the same on both profiles.
        return format_html("<pre>{}</pre>", yaml.safe_dump(obj.spec, sort_keys=True, allow_unicode=True))

    @admin.display(description="conditions")
    def conditions_table(self, obj: Job) -> str:
        if not obj.conditions:
            return "none"
        fields = ("type", "status", "reason", "message", "lastTransitionTime")
        rows = format_html_join("", _CONDITION_ROW, ([c.get(f, "") for f in fields] for c in obj.conditions))
        return format_html(_CONDITIONS, rows)

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return self.readonly_fields
        return ("tenant", "name", "spec_yaml", *self.readonly_fields, "conditions_table")

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("tenant", "name", "spec")
        shown = [field if field != "conditions" else "conditions_table" for field in self.readonly_fields]
        return ("tenant", "name", "spec_yaml", *shown)

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("<path:object_id>/cancel/", view(self.cancel_view), name="jobs_job_cancel"),
            path("<path:object_id>/resubmit/", view(self.resubmit_view), name="jobs_job_resubmit"),
            *super().get_urls(),
        ]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        job = self.get_object(request, unquote(object_id))
        operate = job is not None and self.has_operate_permission(request)
        extra = {"can_cancel": operate and not job.is_terminal, "can_resubmit": operate and job.is_terminal}
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), **extra})

    def save_model(self, request, obj, form, change) -> None:
        # Only adds get here: a submitted job's page has no Save (cancel, resubmit, resize and delete change it).
        created = services.job_create(
            actor=admin_principal(request), tenant=obj.tenant, name=obj.name, spec=form.cleaned_data["spec"]
        )
        obj.pk = created.pk

    def delete_model(self, request, obj) -> None:
        services.job_delete(actor=admin_principal(request), job=obj)

    def delete_queryset(self, request, queryset) -> None:
        for job in queryset:
            services.job_delete(actor=admin_principal(request), job=job)

    @admin.action(description="Cancel (checkpoint request, grace period, then stop)", permissions=["operate"])
    def cancel(self, request, queryset) -> None:
        actor, changed, unchanged = admin_principal(request), [], []
        for job in queryset:
            if job.cancel_requested_at is not None and not job.is_terminal:
                unchanged.append(f"job {job.name}: cancel already requested")
                continue
            try:
                services.job_cancel(actor=actor, job=job)
            except services.JobConflict as exc:
                unchanged.append(str(exc))
            else:
                changed.append(job.name)
        report_action(self, request, did="Cancel requested for", noun="job(s)", changed=changed, unchanged=unchanged)

    @admin.action(description="Resubmit (a new job from the same spec, named <name>-r<N>)", permissions=["operate"])
    def resubmit(self, request, queryset):
        actor, created, unchanged = admin_principal(request), [], []
        for job in queryset:
            try:
                created.append((job.name, services.job_resubmit(actor=actor, job=job)))
            except services.JobConflict as exc:
                unchanged.append(str(exc))
            except ValidationError as exc:
                unchanged.append(f"job {job.name}: {'; '.join(exc.messages)}")
        changed = [f"{old} as {new.name}" for old, new in created]
        report_action(self, request, did="Resubmitted", noun="job(s)", changed=changed, unchanged=unchanged)
        if len(created) == 1:  # one new job: show it
            return HttpResponseRedirect(reverse("admin:jobs_job_change", args=[created[0][1].pk]))
        return None

    def _button(self, request, object_id: str, action):
        """The job page's buttons run the list's action on that one job."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_operate_permission(request):
            raise PermissionDenied
        job = self.get_object(request, unquote(object_id))
        if job is None:
            raise Http404(f"no job with id {object_id}")
        response = action(request, Job.all_tenants.filter(pk=job.pk))
        return response or HttpResponseRedirect(reverse("admin:jobs_job_change", args=[job.pk]))

    def cancel_view(self, request, object_id: str):
        return self._button(request, object_id, self.cancel)

    def resubmit_view(self, request, object_id: str):
        return self._button(request, object_id, self.resubmit)
