"""The gateway's own URLconf (handler.py resolves /v1/ paths against it, not the site's)."""

from django.urls import re_path

from . import views

urlpatterns = [
    re_path(r"^v1/chat/completions/?$", views.chat_completions),
    re_path(r"^v1/completions/?$", views.completions),
    re_path(r"^v1/embeddings/?$", views.embeddings),
    re_path(r"^v1/models/?$", views.models),
    re_path(r"^v1/models/(?P<name>.+?)/?$", views.model),
    re_path(r"^(?P<path>.*)$", views.not_found),
]
