"""The job reconciler (apps.jobs.reconciler.job_reconciler) and the collaborators a pass composes:

- `placement.NodePlacement`: the nodes, their GPUs, lost nodes, and the choice of nodes for a GPU job;
- `admitting.PassAdmission`: the admission cycle's inputs and decisions, and each queue's status after it;
- `selection.PassSelection`: which jobs the pass looks at (`seen.Fingerprints`: what this process last saw);
- `desired.DesiredState`: each job's objects; `tokens.Tokens`: the workload tokens their Secrets carry;
- `observer.StatusObserver`: each job's status from what runs; `recovery.Recovery`: lost nodes, lost
  workloads and deadlines;
- `writer.StatusWriter`: the pass's writes, buffered and written together; `isolation.WriteIsolation`: one
  tenant's failing write stays that tenant's.
"""

from .job_reconciler import JobPass, JobReconciler, reconcile_jobs

__all__ = ["JobPass", "JobReconciler", "reconcile_jobs"]
