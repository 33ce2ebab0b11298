"""Helpers for the gryvia_trainer checkpoint tests: a manager that ignores the surrounding environment, and the
environment a subprocess of the trainer package gets."""

from __future__ import annotations

import os
from pathlib import Path

from gryvia_trainer import CheckpointManager

REPO = Path(__file__).resolve().parents[2]


def manager(directory: Path, **kwargs) -> CheckpointManager:
    """A manager that ignores the surrounding environment (no reports unless asked, rank 0 of 1)."""
    kwargs.setdefault("rank", 0)
    kwargs.setdefault("world_size", 1)
    kwargs.setdefault("api_url", "")
    kwargs.setdefault("job_token", "")
    kwargs.setdefault("job_name", "")
    kwargs.setdefault("interval", 0)
    kwargs.setdefault("request_file", directory / ".checkpoint-request")
    kwargs.setdefault("poll_interval", 0.01)
    return CheckpointManager(directory, **kwargs)


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRYVIA_", "DJANGO_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(extra)
    return env
