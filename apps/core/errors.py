"""Domain errors services raise, shared by every app (the API maps them in apps.core.api.errors)."""


class Conflict(Exception):
    """The object is in a state that does not allow the change (HTTP 409)."""
