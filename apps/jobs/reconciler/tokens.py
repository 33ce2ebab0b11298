"""The job reconciler's workload tokens: the API keys bound to the jobs admitted this pass, issued together before
their Secrets are made, and handed out by DesiredState.prepare() when a token Secret is (re)created.

The key ids issued are recorded on the pass's status writer: its flush revokes each job's earlier keys.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from apps.core.scopes import JOBS_REPORT
from apps.tenants.services import api_keys_issue_bound, parse_key

from .. import manifests
from ..models import Job
from .admitting import PassAdmission
from .writer import StatusWriter


class Tokens:
    """This pass's issued tokens (bound_to -> raw key), until a Secret takes its own."""

    def __init__(
        self, *, admission: PassAdmission, writer: StatusWriter, live_by_owner: dict[str | None, dict[str, Any]]
    ) -> None:
        self.admission = admission
        self.writer = writer
        self.live_by_owner = live_by_owner
        self.raw: dict[str, str] = {}

    def take(self, bound_to: str) -> str | None:
        """The token issued for this job this pass, once (None: none was)."""
        return self.raw.pop(bound_to, None)

    def issue(self, jobs: list[Job]) -> None:
        """The tokens of the workloads about to be created that have none yet, issued together."""
        self._issue(
            (job.tenant_id, job.tenant.namespace, job.uid_text, job.name)
            for job in jobs
            if self.admission.outcome(job.pk) == "admit" and f"job:{job.uid_text}" not in self.writer.issued
        )

    def issue_early(self, tenants: dict[int, Any]) -> set[str]:
        """`issue` for the admitted jobs before their rows are read, from what the waiting heads gave (a tenant the
        pass has not read yet waits for the read). Returns the bound_to of the tokens issued."""
        wanted = []
        for pk, decision in self.admission.decisions.items():
            identity = self.admission.head_identity.get(pk) if decision.outcome == "admit" else None
            if identity is not None and identity[0] in tenants:
                tenant_id, uid, name = identity
                wanted.append((tenant_id, tenants[tenant_id].namespace, uid, name))
        return self._issue(wanted)

    def _issue(self, jobs: Iterable[tuple[int, str, str, str]]) -> set[str]:
        """Issue the tokens of (tenant id, namespace, uid, name) jobs whose token Secret does not exist yet."""
        starting = [
            (tenant_id, uid, name)
            for tenant_id, namespace, uid, name in jobs
            if f"Secret/{namespace}/{manifests.names(name)['secret']}" not in self.live_by_owner.get(uid, {})
        ]
        issued = api_keys_issue_bound(
            [(tenant_id, f"job:{uid}", [JOBS_REPORT], f"job {name}") for tenant_id, uid, name in starting],
            revoke_earlier=False,  # the writer's flush revokes the earlier keys, with the pass's other revocations
        )
        self.raw.update(issued)
        self.writer.issued.update((bound_to, parse_key(raw)[0]) for bound_to, raw in issued.items())
        return set(issued)
