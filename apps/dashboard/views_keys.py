"""The dashboard's API keys page: the tenant's keys, create (the secret shown once, on the result page only) and
revoke, through apps.tenants.services as the session user. Listing needs keys:read, changing keys keys:write
(403 without, as the REST API answers); another tenant's key is a 404."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from apps.core import scopes as S
from apps.tenants.selectors import api_key_get_of_tenant, api_keys_of_tenant
from apps.tenants.services import api_key_create, api_key_revoke

from .access import KEYS_READ, KEYS_WRITE, may, require
from .views import _context, tenant_page


def grantable_scopes(principal, tenant) -> list[str]:
    """The scopes this user may put on a key here: those whose grant they hold (api_key_create's own rule)."""
    held = principal.scopes_in(tenant.pk)
    return sorted(scope for scope in S.ALL_SCOPES if S.expand([scope]) <= held)


class KeyCreateForm(forms.Form):
    name = forms.CharField(max_length=100, required=False)
    scopes = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple)
    expires_at = forms.DateTimeField(
        required=False,
        label="Expires at (UTC, optional)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )

    def __init__(self, *args, choices: list[str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["scopes"].choices = [(scope, scope) for scope in choices]


@never_cache
@tenant_page
def key_list(request: HttpRequest, principal, tenant) -> HttpResponse:
    """GET: the tenant's keys and, for a user with keys:write, the create form. POST: create a key and show its
    secret on this response only (never stored, logged or put in the session: the next view of the page lacks it)."""
    require(principal, tenant, KEYS_READ)
    choices = grantable_scopes(principal, tenant)
    form, created, secret = None, None, None
    if may(principal, tenant, KEYS_WRITE):
        form = KeyCreateForm(request.POST or None, choices=choices)
    elif request.method == "POST":
        require(principal, tenant, KEYS_WRITE)
    if request.method == "POST" and form.is_valid():
        try:
            created, secret = api_key_create(
                actor=principal,
                tenant=tenant,
                scopes=form.cleaned_data["scopes"],
                name=form.cleaned_data["name"],
                expires_at=form.cleaned_data["expires_at"],
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        except PermissionError as exc:
            form.add_error("scopes", str(exc))
    if created is not None:
        # The one place the secret appears; no-store keeps it out of the browser's cache and back button.
        return render(request, "dashboard/keys/created.html", _context(request, key=created, secret=secret))
    keys = api_keys_of_tenant(principal=principal, tenant_id=tenant.pk)
    status = 400 if form is not None and form.errors else 200
    return render(request, "dashboard/keys/list.html", _context(request, keys=keys, form=form), status=status)


@require_POST
@tenant_page
def key_revoke(request: HttpRequest, principal, tenant, key_id: str) -> HttpResponse:
    """Revoke one of the tenant's keys for good (the row stays for the audit trail)."""
    key = api_key_get_of_tenant(principal=principal, tenant_id=tenant.pk, key_id=key_id)
    if key is None:
        raise Http404("no such key in this tenant")
    require(principal, tenant, KEYS_WRITE)
    api_key_revoke(actor=principal, key=key)
    messages.success(request, f"Revoked key {key.key_id}.")
    return redirect("dashboard:keys")
