"""Turning service-layer errors into API errors, in one place."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.core.exceptions import ObjectDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions

from apps.core.errors import Conflict


class ConflictError(exceptions.APIException):
    status_code = 409
    default_code = "conflict"
    default_detail = "the object's state does not allow this"


@contextmanager
def service_errors() -> Iterator[None]:
    """Django ValidationError -> 400 with field errors; PermissionError -> 403; DoesNotExist -> 404; Conflict -> 409."""
    try:
        yield
    except DjangoValidationError as exc:
        if hasattr(exc, "error_dict"):
            raise exceptions.ValidationError({k: [str(m) for m in v] for k, v in exc.message_dict.items()}) from exc
        raise exceptions.ValidationError({"non_field_errors": exc.messages}) from exc
    except PermissionError as exc:
        raise exceptions.PermissionDenied(str(exc)) from exc
    except ObjectDoesNotExist as exc:
        raise exceptions.NotFound(str(exc)) from exc
    except Conflict as exc:
        raise ConflictError(str(exc)) from exc
