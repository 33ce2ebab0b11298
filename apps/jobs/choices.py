"""Job types, phases and the names every job object and environment shares."""

from django.db import models

API_VERSION = "gryvia.io/v1alpha1"
KIND = "GryviaAIJob"
JOB_TYPES = ("training", "fine-tuning", "evaluation", "inference")
BACKENDS = ("nccl", "gloo", "mpi")
MASTER_PORT = 29500
RDZV_PORT = 29400
MAX_NAME_LENGTH = 52  # leaves room for "-headless" and pod suffixes within 63-character DNS labels
DEFAULT_STORAGE_REQUEST = "10Gi"
DEFAULT_CHECKPOINT_DIR = "/data/checkpoints"
DEFAULT_CHECKPOINT_GRACE_S = 60
JOB_LABEL = "gryvia.io/job"
JOB_UID_LABEL = "gryvia.io/job-uid"
TYPE_LABEL = "gryvia.io/type"
ATTEMPT_LABEL = "gryvia.io/attempt"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


class JobPhase(models.TextChoices):
    PENDING = "Pending"
    QUEUED = "Queued"
    SCHEDULING = "Scheduling"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"
    REJECTED = "Rejected"
    PREEMPTED = "Preempted"


TERMINAL_PHASES = frozenset({JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.CANCELLED, JobPhase.REJECTED})
WAITING_PHASES = ("Pending", "Queued")  # waiting for admission (plain strings: also an index condition)
HOLDING_PHASES = ("Scheduling", "Running", "Preempted")  # admitted: holds its quota until its pods are gone
# Variables Gryvia sets; a job's own `env` may not override them.
RESERVED_ENV = frozenset(
    {
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "NODE_RANK",
        "LOCAL_RANK",
        "NNODES",
        "NPROC_PER_NODE",
        "JOB_COMPLETION_INDEX",
        "CUDA_VISIBLE_DEVICES",
        "PORT",
        "NCCL_DEBUG",
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE",
    }
)
RESERVED_ENV_PREFIXES = ("PET_", "GRYVIA_")
