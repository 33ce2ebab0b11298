from django.urls import path

from . import live, views, views_job_actions, views_keys

app_name = "dashboard"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", views.LogoutView.as_view(), name="logout"),
    path("jobs/", views.job_list, name="jobs"),
    path("jobs/<slug:name>/", views.job_detail, name="job"),
    path("jobs/<slug:name>/cancel/", views_job_actions.job_cancel_view, name="job-cancel"),
    path("jobs/<slug:name>/resubmit/", views_job_actions.job_resubmit_view, name="job-resubmit"),
    # Not under jobs/: any DNS label, "new" or "submit" too, is a job's name there.
    path("submit/", views_job_actions.job_submit, name="job-submit"),
    path("keys/", views_keys.key_list, name="keys"),
    path("keys/<str:key_id>/revoke/", views_keys.key_revoke, name="key-revoke"),
    path("jobs/<slug:name>/status/", live.job_status, name="job-status"),
    path("jobs/<slug:name>/log/", live.job_log, name="job-log"),
    path("tenant/", views.tenant_switch, name="tenant-switch"),
]
