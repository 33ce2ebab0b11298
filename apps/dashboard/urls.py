from django.urls import path

from . import views

app_name = "dashboard"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", views.LogoutView.as_view(), name="logout"),
    path("jobs/", views.job_list, name="jobs"),
    path("jobs/<slug:name>/", views.job_detail, name="job"),
    path("tenant/", views.tenant_switch, name="tenant-switch"),
]
