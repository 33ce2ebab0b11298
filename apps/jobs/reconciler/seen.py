"""What this process last observed of each job: the shortcut that lets a pass leave unchanged jobs alone.

A job's fingerprint is its row's state and its objects' resourceVersions. A later pass in this process that sees
the same fingerprint has nothing to do for the job. Only ever a shortcut: a fresh process observes every job.
"""

from __future__ import annotations

from typing import Any

from ..models import Job

# job uid -> what its last observation saw (its row's state, its objects' resourceVersions)
_SEEN: dict[str, tuple] = {}
_SEEN_MAX = 200_000

Listing = dict[str | None, dict[str, dict[str, Any]]]
ObservedListing = dict[str | None, dict[str, list[dict[str, Any]]]]


class Fingerprints:
    """The pass's listing of the cluster (objects by owner) and the fingerprints read from it, with what this
    pass observed (`seen_now`, remembered by `commit()` once the pass's writes are done)."""

    def __init__(self, live_by_owner: Listing, observed_by_owner: ObservedListing) -> None:
        self.live_by_owner = live_by_owner
        self.observed_by_owner = observed_by_owner
        self.seen_now: dict[str, tuple] = {}

    def fingerprint(self, key: str, row_state: tuple, live: dict[str, dict[str, Any]] | None = None) -> tuple | None:
        """What observing a job depends on: its row's state and its objects' versions (None: unknown versions)."""
        objects = self.live_by_owner.get(key, {}) if live is None else live
        versions = [(obj.get("metadata") or {}).get("resourceVersion") for obj in objects.values()]
        observed = self.observed_by_owner.get(key)
        if observed:
            for items in observed.values():
                versions += [(o.get("metadata") or {}).get("resourceVersion") for o in items]
        if None in versions:
            return None
        versions.sort()
        return (*row_state, tuple(versions))

    def of_rows(self, rows: list[Any]) -> dict[int, tuple | None]:
        """Each admitted or ended job's fingerprint now (job pk -> None when its objects' versions are unknown)."""
        fingerprint = self.fingerprint
        return {
            r.pk: fingerprint(r.uid, (r.phase, r.generation, r.observed_generation, r.cancel_requested_at))
            for r in rows
        }

    @staticmethod
    def as_last_observed(uid: str, fingerprint: tuple | None) -> bool:
        """Whether the job's row and objects are as this process's last observation of it left them."""
        return fingerprint is not None and _SEEN.get(uid) == fingerprint

    @staticmethod
    def last(uid: str) -> tuple | None:
        """The fingerprint this process last remembered for a job (None: none)."""
        return _SEEN.get(uid)

    def remember(self, owner: Job, live: dict[str, dict[str, Any]]) -> None:
        """The job as the next pass will see it if nothing changes: its row now, its objects as they are now."""
        key = owner.uid_text
        if owner.finalized:  # no later pass reads it (owners() lists jobs not finalized): nothing to remember
            _SEEN.pop(key, None)
            self.seen_now.pop(key, None)
            return
        seen = self.fingerprint(
            key, (owner.phase, owner.generation, owner.observed_generation, owner.cancel_requested_at), live
        )
        if seen is not None:
            self.seen_now[key] = seen

    def forget(self, uid: str) -> None:
        """Observe this job again next pass (its write was held back or failed)."""
        self.seen_now.pop(uid, None)

    def commit(self) -> None:
        """Remember what this pass observed (after its writes: a job whose write failed was forgotten first)."""
        if len(_SEEN) > _SEEN_MAX:
            _SEEN.clear()
        _SEEN.update(self.seen_now)
        self.seen_now = {}
