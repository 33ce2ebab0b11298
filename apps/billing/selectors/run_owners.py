"""The registry of who owns job runs. Billing meters the runs of jobs, but the jobs app is above billing: billing
cannot read jobs, so the jobs app registers its answer here from `JobsConfig.ready()` (docs/architecture.md,
Registries). Billing asks it which of its open runs' jobs still exist (the orphan sweep of `usage_refresh`) and
their timeouts (the month-end forecast).
"""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import ImproperlyConfigured

# job pks -> {pk: timeout in seconds, None without one} for those of the pks whose job exists
JobTimeouts = Callable[[list[int]], dict[int, int | None]]

_job_timeouts: list[JobTimeouts] = []


def job_runs_register(timeouts: JobTimeouts) -> None:
    """Register the jobs app's answer (once, from its AppConfig.ready(); a second call replaces the first)."""
    _job_timeouts[:] = [timeouts]


def job_timeouts(pks: list[int]) -> dict[int, int | None]:
    """job pk -> its timeout in seconds (None: no timeout), for the jobs among `pks` that still exist."""
    if not _job_timeouts:
        raise ImproperlyConfigured(
            "billing cannot tell which jobs exist: no app registered them (apps.jobs does in JobsConfig.ready(); "
            "add apps.jobs to INSTALLED_APPS)"
        )
    return _job_timeouts[0](pks)
