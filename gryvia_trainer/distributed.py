"""What a checkpoint needs to know about its ranks: the environment's integers and torch.distributed, if in use.

torch is never imported here unless the caller already initialized a process group (`any_rank` runs a collective).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .files import log


def env_int(name: str, default: int | None) -> int | None:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        log(f"ignoring {name}={value!r}: not an integer")
        return default


def initialized_dist() -> Any | None:
    """torch.distributed when the caller already imported it and initialized a process group; never imports."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if dist.is_available() and dist.is_initialized():
            return dist
    except Exception:  # an odd torch build must not break checkpointing
        return None
    return None


def any_rank(dist: Any, flag: bool) -> bool:
    """True on every rank when it is true on some rank (an all-reduce MAX of one int)."""
    import torch

    device = torch.device("cpu")
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    tensor = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())
