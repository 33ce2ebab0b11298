"""Template tags for what the session user may do (apps.dashboard.access): templates ask by scope, never by role."""

from __future__ import annotations

from django import template

from ..access import is_sso_session, may

register = template.Library()


@register.simple_tag(takes_context=True)
def can(context: template.Context, scope: str) -> bool:
    """`{% can "jobs:write" as can_operate %}`: the user holds `scope` in the page's tenant (False off tenant pages)."""
    request = context.get("request")
    page = getattr(request, "dashboard", None)
    if not page:
        return False
    return may(page["principal"], page["tenant"], scope)


@register.simple_tag(takes_context=True)
def sso_session(context: template.Context) -> bool:
    """`{% sso_session as is_sso %}`: this session was opened by single sign-on."""
    request = context.get("request")
    return request is not None and is_sso_session(request.session)
