"""Queueing's choices: resource names, priority bounds, preemption policies and the phases a Kueue Workload maps to."""

from django.db import models

GPU = "nvidia.com/gpu"
CPU = "cpu"
MEMORY = "memory"
RESOURCES = (GPU, CPU, MEMORY)
PRIORITY_MIN = -1_000_000_000
PRIORITY_MAX = 1_000_000_000


class PreemptionPolicy(models.TextChoices):
    PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
    NEVER = "Never"


class WorkloadPhase(models.TextChoices):
    """What a Kueue Workload's conditions say of its job (apps.queueing.kueue.phase_from_workload). The values are
    the job phases of the same names (apps.jobs.choices.JobPhase), so a job's phase compares equal to them."""

    QUEUED = "Queued"
    SCHEDULING = "Scheduling"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
