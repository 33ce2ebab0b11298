"""The /oidc/ views: mozilla-django-oidc's, with endpoints from discovery and clear pages instead of 500s."""

from __future__ import annotations

import logging
from urllib.parse import urlencode

import requests
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render, resolve_url
from django.urls import reverse
from mozilla_django_oidc import views as oidc_views

from ..selectors import memberships_of_user
from .discovery import ProviderUnavailable, provider_metadata

logger = logging.getLogger(__name__)

ERROR_TEMPLATE = "dashboard/sso_error.html"


def _error_page(request: HttpRequest, reason: str, status: int) -> HttpResponse:
    return render(request, ERROR_TEMPLATE, {"reason": reason}, status=status)


class SSOAuthenticateView(oidc_views.OIDCAuthenticationRequestView):
    """GET /oidc/authenticate/: off to the provider's authorize endpoint (with state, nonce and PKCE)."""

    def __init__(self, *args, **kwargs) -> None:
        # The parent reads the endpoint from a setting at construction; here it comes from discovery in get().
        super(oidc_views.OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID

    def get(self, request: HttpRequest) -> HttpResponse:
        try:
            self.OIDC_OP_AUTH_ENDPOINT = provider_metadata()["authorization_endpoint"]
        except ProviderUnavailable as exc:
            logger.warning("sso: %s", exc)
            return _error_page(request, f"Single sign-on is unavailable: {exc}. Try again later.", 502)
        return super().get(request)


class SSOCallbackView(oidc_views.OIDCAuthenticationCallbackView):
    """GET /oidc/callback/: the provider's answer; a refused or failed sign-in gets a page that says why."""

    def get(self, request: HttpRequest) -> HttpResponse:
        try:
            return super().get(request)
        except SuspiciousOperation as exc:  # a state this browser never sent: a forged or replayed answer
            logger.warning("sso: callback refused: %s", exc)
            return _error_page(request, "This sign-in answer does not belong to this browser's sign-in.", 400)
        except (ProviderUnavailable, requests.RequestException) as exc:
            logger.warning("sso: callback failed: %s", exc)
            return _error_page(request, f"The sign-in provider did not complete the sign-in: {exc}", 502)

    def login_failure(self) -> HttpResponse:
        reason = self.request.GET.get("error_description") or self.request.GET.get("error") or "it was not accepted"
        return _error_page(self.request, f"Sign-in did not complete: {reason}.", 403)

    @property
    def success_url(self) -> str:
        user = self.request.user
        if not user.is_staff and not memberships_of_user(user_id=user.pk).exists():
            return reverse("oidc_no_tenant")
        return super().success_url


class SSOLogoutView(oidc_views.OIDCLogoutView):
    """POST /oidc/logout/: ends the local session, then the provider's (see provider_logout_url)."""

    @property
    def redirect_url(self) -> str:
        return _after_logout()


def _after_logout() -> str:
    # Django's default LOGOUT_REDIRECT_URL is None, which mozilla-django-oidc's own default does not replace.
    return resolve_url(getattr(settings, "LOGOUT_REDIRECT_URL", None) or "/")


@login_required
def no_tenant(request: HttpRequest) -> HttpResponse:
    """Signed in, but the provider's claim names no tenant of this Gryvia and no membership was granted by hand."""
    return render(request, "dashboard/no_tenant.html", {"claim": settings.GRYVIA_OIDC_TENANT_CLAIM})


def provider_logout_url(request: HttpRequest) -> str:
    """Where logout goes: the provider's end_session_endpoint when it has one, back to Gryvia afterwards."""
    after = request.build_absolute_uri(_after_logout())
    try:
        end_session = provider_metadata().get("end_session_endpoint")
    except ProviderUnavailable as exc:  # the local session still ends
        logger.warning("sso: logout stays local: %s", exc)
        return after
    if not end_session:
        return after
    params = {"post_logout_redirect_uri": after, "client_id": settings.OIDC_RP_CLIENT_ID}
    if request.session.get("oidc_id_token"):
        params["id_token_hint"] = request.session["oidc_id_token"]
    return f"{end_session}?{urlencode(params)}"
