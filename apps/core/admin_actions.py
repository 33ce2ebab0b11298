"""What the admin's actions and Saves share: a report of what an action did, read-only pages for objects that are
only ever changed through actions (jobs, API keys), and a Save that changed nothing saying so.

An action that changed nothing must not read as a success: the operator who selects a finished job and clicks
Cancel is told that nothing was cancelled, and why.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.contrib import messages

# Names listed in one message; a larger selection ends with "and N more".
_NAMES_SHOWN = 10


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_NAMES_SHOWN])
    return shown + (f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else "")


def report_action(
    modeladmin, request, *, did: str, noun: str, changed: Sequence[str], unchanged: Sequence[str] = ()
) -> None:
    """Tell the operator what an action did: `did` ("cancel requested for") with the changed objects' names as a
    success, and each object left as it was (`unchanged`: why, e.g. "job a is already Succeeded") as a warning,
    headed "nothing done" when no object changed."""
    if changed:
        modeladmin.message_user(request, f"{did} {len(changed)} {noun}: {_names(list(changed))}", messages.SUCCESS)
    if unchanged:
        head = "" if changed else "Nothing done: "
        modeladmin.message_user(request, head + "; ".join(unchanged), messages.WARNING)
    elif not changed:
        modeladmin.message_user(request, "Nothing done: no object selected", messages.WARNING)


class ActionsOnlyAdminMixin:
    """For objects no form edits (a submitted job, an API key): their page is read-only, with no Save buttons, so
    a Save can no longer report "changed successfully" for a change that was never made. Actions that call
    services (`@admin.action(permissions=["operate"])`) still need the model's change permission."""

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_operate_permission(self, request) -> bool:
        return super().has_change_permission(request)


class UnchangedSaveAdminMixin:
    """A Save with no field edited reports "Nothing changed" (a warning) instead of Django's "was changed
    successfully", which reads as if something had."""

    def construct_change_message(self, request, form, formsets, add=False):
        message = super().construct_change_message(request, form, formsets, add)
        request._gryvia_unchanged = not add and not message
        return message

    def message_user(self, request, message, level=messages.INFO, *args, **kwargs) -> None:
        if level == messages.SUCCESS and getattr(request, "_gryvia_unchanged", False):
            request._gryvia_unchanged = False
            message, level = "Nothing changed: no field was edited.", messages.WARNING
        super().message_user(request, message, level, *args, **kwargs)


__all__ = ["ActionsOnlyAdminMixin", "UnchangedSaveAdminMixin", "report_action"]
