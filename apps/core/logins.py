"""Password logins: django-axes refuses them while the username or the client address is locked out
(settings: AUTHENTICATION_BACKENDS, AXES_*)."""

from __future__ import annotations

from axes.backends import AxesStandaloneBackend
from django.http import HttpRequest


class LoginLockoutBackend(AxesStandaloneBackend):
    """Refuses a login whose username or client address has too many recent failures; it logs no one in itself
    (ModelBackend, after it, does). A login with no request, which only code in this process makes (a shell,
    Django's test client), has no address to count against and is left to the next backend, where axes would
    raise: Django's `authenticate()` takes the request as optional."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs
    ):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)
