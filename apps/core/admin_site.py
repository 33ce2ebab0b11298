"""The admin's brand (Gryvia and the installed version, where Django says "Django administration") and the site's
icon: `/favicon.ico`, which browsers ask for on every page, points at the icon under /static/."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from django.contrib.admin import AdminSite
from django.http import HttpRequest, HttpResponseRedirect
from django.templatetags.static import static

FAVICON = "gryvia/favicon.svg"


def gryvia_version() -> str:
    """The version of the installed `gryvia` package (`make install` installs the checkout itself)."""
    try:
        return version("gryvia")
    except PackageNotFoundError:  # a source tree run without being installed: no metadata to read
        return "unknown version"


def brand(site: AdminSite) -> None:
    """Name the admin after Gryvia, with the version an operator reports in an issue."""
    site.site_header = f"Gryvia {gryvia_version()}"
    site.site_title = "Gryvia admin"
    site.index_title = "Operations"


def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """A redirect, not a copy: the icon stays one static file, served like the admin's own (and hashed by
    collectstatic's storage where one is configured)."""
    return HttpResponseRedirect(static(FAVICON))


__all__ = ["FAVICON", "brand", "favicon", "gryvia_version"]
