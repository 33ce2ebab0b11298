"""The job's admin page as an operator uses it (issue 27, item 10): read, cancel, resubmit; submit with every error
at once."""

from __future__ import annotations

import json

import pytest
from django.contrib.messages import constants
from django.urls import reverse

from apps.core.models import AuditEntry
from apps.jobs.models import Job, JobEvent
from tests.jobs.factories import make_job

pytestmark = pytest.mark.django_db
_MANAGEMENT = ("TOTAL_FORMS", "INITIAL_FORMS")


def _messages(response) -> list[tuple[int, str]]:
    return [(m.level, m.message) for m in response.context["messages"]]


def _finished(job: Job, phase: str = "Succeeded") -> Job:
    Job.all_tenants.filter(pk=job.pk).update(phase=phase)
    job.refresh_from_db()
    return job


def test_the_job_page_reads_its_spec_as_yaml_and_its_conditions_as_a_table(staff_client, tenant_a):
    job = make_job(tenant_a, "yaml-page")
    condition = {
        "type": "Ready",
        "status": "False",
        "reason": "WorkloadLost",
        "message": "started again <from> its checkpoint",
        "lastTransitionTime": "2026-01-02T03:04:05+00:00",
    }
    Job.all_tenants.filter(pk=job.pk).update(conditions=[condition])
    page = staff_client.get(reverse("admin:jobs_job_change", args=[job.pk])).content.decode()
    spec = page[page.index("<pre>") : page.index("</pre>")]
    assert "\nimage: python:3.11-slim\n" in spec and "\ntype: training\n" in spec
    assert "\ndistributed:\n  backend: gloo\n  enabled: true\n  nodes: 2\n" in spec
    assert json.dumps(job.spec) not in page  # no longer one raw JSON line
    assert (
        "<tr><td>Ready</td><td>False</td><td>WorkloadLost</td><td>started again &lt;from&gt; its checkpoint</td>"
        "<td>2026-01-02T03:04:05+00:00</td></tr>"
    ) in page


def test_a_submitted_job_has_no_save_and_a_post_changes_nothing(staff_client, tenant_a):
    job = make_job(tenant_a, "no-save")
    url = reverse("admin:jobs_job_change", args=[job.pk])
    page = staff_client.get(url).content.decode()
    assert 'name="_save"' not in page and 'name="_continue"' not in page
    assert "Delete" in page  # deleting stays possible
    response = staff_client.post(url, {"tenant": tenant_a.pk, "name": job.name, "spec": json.dumps(job.spec)})
    assert response.status_code == 403
    assert "changed successfully" not in response.content.decode()


def test_cancel_from_the_job_page(staff_client, tenant_a):
    job = make_job(tenant_a, "to-cancel")
    url = reverse("admin:jobs_job_change", args=[job.pk])
    page = staff_client.get(url).content.decode()
    cancel_url = reverse("admin:jobs_job_cancel", args=[job.pk])
    assert f'action="{cancel_url}"' in page
    assert "jobs_job_resubmit" not in page and "Resubmit</button>" not in page  # it is still active
    response = staff_client.post(cancel_url, follow=True)
    assert response.redirect_chain[-1][0] == url
    assert _messages(response) == [(constants.SUCCESS, "Cancel requested for 1 job(s): to-cancel")]
    job.refresh_from_db()
    assert job.cancel_requested_at is not None
    assert AuditEntry.all_tenants.get(object_id="to-cancel", action="job.cancel").actor == "user:root"
    again = staff_client.post(cancel_url, follow=True)
    assert _messages(again) == [(constants.WARNING, "Nothing done: job to-cancel: cancel already requested")]
    assert staff_client.get(cancel_url).status_code == 405


def test_cancel_on_a_finished_job_warns_that_it_did_nothing(staff_client, tenant_a):
    done = _finished(make_job(tenant_a, "done"))
    running = make_job(tenant_a, "running")
    response = staff_client.post(
        reverse("admin:jobs_job_changelist"),
        {"action": "cancel", "_selected_action": [done.pk, running.pk]},
        follow=True,
    )
    assert _messages(response) == [
        (constants.SUCCESS, "Cancel requested for 1 job(s): running"),
        (constants.WARNING, "job done is already Succeeded"),
    ]
    only_done = staff_client.post(
        reverse("admin:jobs_job_changelist"), {"action": "cancel", "_selected_action": [done.pk]}, follow=True
    )
    assert _messages(only_done) == [(constants.WARNING, "Nothing done: job done is already Succeeded")]
    done.refresh_from_db()
    assert done.cancel_requested_at is None


def test_resubmit_from_the_job_page_makes_a_new_job_from_its_spec(staff_client, tenant_a):
    job = _finished(make_job(tenant_a, "train", gpus=0), phase="Failed")
    url = reverse("admin:jobs_job_change", args=[job.pk])
    resubmit_url = reverse("admin:jobs_job_resubmit", args=[job.pk])
    page = staff_client.get(url).content.decode()
    assert f'action="{resubmit_url}"' in page
    assert reverse("admin:jobs_job_cancel", args=[job.pk]) not in page  # finished: nothing to cancel
    response = staff_client.post(resubmit_url, follow=True)
    new = Job.all_tenants.get(tenant=tenant_a, name="train-r2")
    assert response.redirect_chain[-1][0] == reverse("admin:jobs_job_change", args=[new.pk])
    assert _messages(response) == [(constants.SUCCESS, "Resubmitted 1 job(s): train as train-r2")]
    assert new.spec == job.spec and new.phase == "Pending"
    assert AuditEntry.all_tenants.get(object_id="train-r2", action="job.create").actor == "user:root"
    assert JobEvent.objects.filter(job=new, reason="Resubmitted", message__contains="from train").exists()
    # Again, from the original or from the copy: the next free name.
    staff_client.post(resubmit_url)
    _finished(new)
    staff_client.post(reverse("admin:jobs_job_resubmit", args=[new.pk]))
    names = set(Job.all_tenants.filter(tenant=tenant_a).values_list("name", flat=True))
    assert names == {"train", "train-r2", "train-r3", "train-r4"}
    job.refresh_from_db()
    assert job.phase == "Failed"  # the original stays as it was


def test_resubmit_refuses_an_active_job(staff_client, tenant_a):
    active = make_job(tenant_a, "active")
    response = staff_client.post(
        reverse("admin:jobs_job_changelist"), {"action": "resubmit", "_selected_action": [active.pk]}, follow=True
    )
    assert _messages(response) == [
        (
            constants.WARNING,
            "Nothing done: job active is Pending: only a finished job can be resubmitted (cancel it first)",
        )
    ]
    assert Job.all_tenants.filter(tenant=tenant_a).count() == 1


def test_the_add_form_reports_every_error_at_once(staff_client, tenant_a):
    response = staff_client.post(
        reverse("admin:jobs_job_add"),
        {"tenant": tenant_a.pk, "name": "Bad_Name", "spec": json.dumps({"type": "nope", "gpus": -1})},
    )
    assert response.status_code == 200
    form = response.context["adminform"].form
    assert form.errors["name"] == ["must be a DNS label: lowercase letters, digits and '-'"]
    spec_errors = form.errors["spec"]
    assert any(e.startswith("spec.type: ") for e in spec_errors), spec_errors
    assert any(e.startswith("spec.image: ") for e in spec_errors), spec_errors
    assert any(e.startswith("spec.gpus: ") for e in spec_errors), spec_errors
    not_json = (
        staff_client.post(
            reverse("admin:jobs_job_add"), {"tenant": tenant_a.pk, "name": "Bad_Name", "spec": "{type: training"}
        )
        .context["adminform"]
        .form.errors
    )
    assert not_json["name"] == ["must be a DNS label: lowercase letters, digits and '-'"]
    assert not_json["spec"] == ["Enter a valid JSON."]
    assert not Job.all_tenants.exists()
    # What the browser posts along: the (empty) events inline's management form.
    inline = {f"{f.formset.prefix}-{n}": 0 for f in response.context["inline_admin_formsets"] for n in _MANAGEMENT}
    good = {"tenant": tenant_a.pk, "name": "good", "spec": json.dumps({"type": "training", "image": "python:3.11"})}
    ok = staff_client.post(reverse("admin:jobs_job_add"), {**good, **inline})
    assert ok.status_code == 302, ok.context["adminform"].form.errors
    assert Job.all_tenants.get(name="good").submitted_by == "user:root"
