"""The GPUs of this machine, for the local backend: how many there are, and which device indexes are in use.

`gpu_inventory()` asks NVML (the `nvidia-ml-py` package); a machine without a driver has no GPUs. Setting
`GRYVIA_LOCAL_GPUS=N` instead declares N simulated GPUs (laptops, CI, tests). `gpu_allocator()` is the one
process-wide record of which device indexes local pods hold; a pod's GPUs become its `CUDA_VISIBLE_DEVICES`.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

SIMULATED_ENV = "GRYVIA_LOCAL_GPUS"


@dataclass(frozen=True)
class GpuInventory:
    """What this machine offers: `count` devices (indexes 0..count-1); `simulated` when declared by env."""

    count: int
    simulated: bool
    models: tuple[str, ...] = field(default_factory=tuple)


@functools.lru_cache(maxsize=1)
def _nvml_inventory() -> GpuInventory:
    """Query NVML once per process; any failure (no library, no driver, no device) means no GPUs."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ImportError...
        logger.debug("NVML unavailable, no local GPUs: %s", exc)
        return GpuInventory(count=0, simulated=False)
    try:
        count = int(pynvml.nvmlDeviceGetCount())
        models = []
        for i in range(count):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            models.append(name.decode() if isinstance(name, bytes) else str(name))
        return GpuInventory(count=count, simulated=False, models=tuple(models))
    except Exception as exc:  # noqa: BLE001 - a device query failing leaves us with what we know: none
        logger.warning("NVML device query failed, no local GPUs: %s", exc)
        return GpuInventory(count=0, simulated=False)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001, S110 - nothing to do about a failing shutdown
            pass


def gpu_inventory() -> GpuInventory:
    """This machine's GPUs: `GRYVIA_LOCAL_GPUS=N` simulated ones when that is set, else NVML's (cached)."""
    declared = os.environ.get(SIMULATED_ENV, "").strip()
    if declared:
        try:
            return GpuInventory(count=max(int(declared), 0), simulated=True)
        except ValueError:
            logger.warning("%s=%r is not a number; asking NVML instead", SIMULATED_ENV, declared)
    return _nvml_inventory()


class GpuAllocator:
    """Which device indexes are held, and by whom. Thread-safe; the total is re-read on every allocation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, str] = {}

    def allocate(self, count: int, owner: str) -> list[int] | None:
        """The `count` lowest free indexes, now held by `owner`; None (and nothing held) when too few are free."""
        if count <= 0:
            return []
        total = gpu_inventory().count
        with self._lock:
            free = [i for i in range(total) if i not in self._held]
            if len(free) < count:
                return None
            chosen = free[:count]
            for i in chosen:
                self._held[i] = owner
            return chosen

    def release(self, owner: str) -> None:
        """Give back every index `owner` holds (no-op when it holds none)."""
        with self._lock:
            for i in [i for i, who in self._held.items() if who == owner]:
                del self._held[i]

    def in_use(self) -> dict[int, str]:
        """A snapshot: device index -> owner."""
        with self._lock:
            return dict(self._held)


_allocator = GpuAllocator()


def gpu_allocator() -> GpuAllocator:
    """The process-wide allocator every local backend shares (there is one set of devices per machine)."""
    return _allocator
