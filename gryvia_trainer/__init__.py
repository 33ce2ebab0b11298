"""Trainer-side helpers for jobs run by Gryvia: atomic sharded checkpoints, resume, checkpoint requests (SIGUSR1 or
the preStop hook's request file) and reports to the control plane.

Standard library only; torch is imported lazily, and only when a process group is initialized or a `*_torch`
helper is called. Nothing here imports Django or Gryvia's server code, so it runs inside any training image.
"""

from __future__ import annotations

from .checkpoint import CheckpointError, CheckpointManager, NoCheckpointError

__all__ = ["CheckpointError", "CheckpointManager", "NoCheckpointError", "__version__"]
__version__ = "0.1.0"
