"""Small CPU examples of Gryvia jobs around one model: linear regression on synthetic data.

- `ddp.py`: distributed training (torch.distributed, gloo) with checkpoints, resume and failure injection
- `evaluate.py`: an evaluation job that scores the latest committed checkpoint
- `serve.py`: an inference server for the same model

The model and data are defined here; torch is imported inside the functions, so importing the package is cheap.
"""

from __future__ import annotations

import io
import os
from typing import Any

FEATURES = 8
TRUE_WEIGHTS = (0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 1.0)
TRUE_BIAS = 0.3
NOISE = 0.05
TRAIN_SEED = 1234  # rank r trains on the shard made with TRAIN_SEED + r
EVAL_SEED = 999  # held-out data


def make_data(samples: int, seed: int) -> tuple[Any, Any]:
    """(x, y): `samples` rows of FEATURES standard-normal features, y = x . w + b + noise, reproducible by seed."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, FEATURES, generator=generator)
    weights = torch.tensor(TRUE_WEIGHTS).unsqueeze(1)
    y = x @ weights + TRUE_BIAS + NOISE * torch.randn(samples, 1, generator=generator)
    return x, y


def make_model() -> Any:
    """The same freshly initialised model on every rank (small fixed weights, zero bias)."""
    import torch

    model = torch.nn.Linear(FEATURES, 1)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        model.weight.copy_(0.1 * torch.randn(1, FEATURES, generator=generator))
        model.bias.zero_()
    return model


def decode_state(data: bytes) -> dict[str, Any]:
    """A shard written by ddp.py: {"step", "model", "optimizer"}."""
    import torch

    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def load_model(checkpoint_dir: str | os.PathLike[str] | None) -> tuple[Any, int | None]:
    """(model, step): the model of the latest committed checkpoint in `checkpoint_dir` (rank 0's shard), or a fresh
    model and None when there is no directory or nothing committed in it."""
    from gryvia_trainer import CheckpointManager

    model = make_model()
    if not checkpoint_dir:
        return model, None
    manager = CheckpointManager(checkpoint_dir, rank=0, world_size=1, api_url="", job_token="")
    latest = manager.load_latest()
    if latest is None:
        return model, None
    step, data = latest
    model.load_state_dict(decode_state(data)["model"])
    return model, step


def env_int(name: str, default: int | None = None) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value else default
