"""Sharded, atomically committed checkpoints for a job's ranks, checkpoint requests and reports to Gryvia.

Layout under the checkpoint directory (GRYVIA_CHECKPOINT_DIR)::

    LATEST                      the last committed step, e.g. "40"
    step-00000040/rank-0.pt     one shard per rank, each written to a temp file, fsynced and renamed
    step-00000040/rank-1.pt
    step-00000040/COMMITTED     written by rank 0 after every rank wrote its shard

A save writes this rank's shard, waits for every rank (torch.distributed.barrier() when a process group is
initialized, else a file barrier on the shards), and rank 0 commits: COMMITTED, then LATEST, then the control plane
is told. LATEST therefore never names a step that some rank has not written, and a crash at any point leaves the
previous committed step intact.

Checkpoint requests (a node drain, a preemption) arrive as SIGUSR1 or as the request file the preStop hook
(`python3 -m gryvia_trainer.request_checkpoint`) writes; `should_checkpoint(step)` turns true at the next step, and
once the checkpoint is committed rank 0 removes the request file and writes `<request file>.ack` with the step.

Standard library only: torch is imported lazily (a process group already set up by the caller, or the
`save_torch`/`load_torch` helpers).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from .distributed import any_rank, env_int, initialized_dist
from .files import (  # noqa: F401 - re-exported: this module is the public entry point
    COMMITTED_FILE,
    DEFAULT_BARRIER_TIMEOUT_S,
    ENV_API_URL,
    ENV_DIR,
    ENV_INTERVAL,
    ENV_JOB_NAME,
    ENV_JOB_TOKEN,
    ENV_REQUEST_FILE,
    ENV_RESUME,
    LATEST_FILE,
    PROGRESS_INTERVAL_S,
    REPORT_BACKOFF_S,
    REPORT_RETRIES,
    REPORT_TIMEOUT_S,
    REQUEST_FILE_NAME,
    TMP_PREFIX,
    State,
    ack_path,
    atomic_write,
    fsync_dir,
    log,
    request_file_from_env,
    resume_enabled,
    step_dir_name,
)
from .reporting import ProgressReporter, post_report

_STEP_DIR = re.compile(r"^step-(\d+)$")


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or committed (e.g. a rank never arrived at the barrier)."""


class NoCheckpointError(CheckpointError, FileNotFoundError):
    """There is no committed checkpoint to load (or none for this rank)."""


class CheckpointManager:
    """Checkpoints of one rank of a job. Every argument defaults to Gryvia's environment:

    directory   GRYVIA_CHECKPOINT_DIR (required one way or the other)
    rank        the initialized process group's rank, else RANK, else 0
    world_size  the process group's size, else WORLD_SIZE, else 1
    api_url, job_token, job_name   GRYVIA_API_URL, GRYVIA_JOB_TOKEN, GRYVIA_JOB_NAME (reports; optional)
    interval    GRYVIA_CHECKPOINT_INTERVAL steps (None: only requested checkpoints)
    request_file  GRYVIA_CHECKPOINT_REQUEST_FILE, else `<directory>/.checkpoint-request`

    Call `save` and `should_checkpoint` on every rank with the same steps: with a process group both are
    collective (a barrier, an all-reduce of the request flag).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        api_url: str | None = None,
        job_token: str | None = None,
        job_name: str | None = None,
        interval: int | None = None,
        request_file: str | os.PathLike[str] | None = None,
        barrier_timeout: float = DEFAULT_BARRIER_TIMEOUT_S,
        poll_interval: float = 0.05,
    ) -> None:
        directory = directory if directory is not None else os.environ.get(ENV_DIR)
        if not directory:
            raise ValueError(f"no checkpoint directory: pass one or set {ENV_DIR}")
        self.directory = Path(directory)
        dist = initialized_dist()
        if rank is None:
            rank = dist.get_rank() if dist is not None else env_int("RANK", 0)
        if world_size is None:
            world_size = dist.get_world_size() if dist is not None else env_int("WORLD_SIZE", 1)
        if not (world_size >= 1 and 0 <= rank < world_size):
            raise ValueError(f"rank {rank} is not within a world of size {world_size}")
        self.rank: int = int(rank)
        self.world_size: int = int(world_size)
        self.api_url = ((api_url if api_url is not None else os.environ.get(ENV_API_URL)) or "").rstrip("/") or None
        self.job_token = (job_token if job_token is not None else os.environ.get(ENV_JOB_TOKEN)) or None
        self.job_name = (job_name if job_name is not None else os.environ.get(ENV_JOB_NAME)) or None
        if interval is None:
            interval = env_int(ENV_INTERVAL, None)
        self.interval: int | None = int(interval) if interval and int(interval) > 0 else None
        if request_file is None:
            request_file = os.environ.get(ENV_REQUEST_FILE) or self.directory / REQUEST_FILE_NAME
        self.request_file = Path(request_file)
        self.barrier_timeout = float(barrier_timeout)
        self.poll_interval = float(poll_interval)
        self._signal_flag = False  # set by the SIGUSR1 handler (or request_checkpoint())
        self._pending_request = False  # should_checkpoint() said yes because of a request
        self._served_request: tuple[int, int, int] | None = None  # the request file a save already served
        self._progress = ProgressReporter(lambda step: self.report(step, committed=False))

    def __repr__(self) -> str:
        return f"CheckpointManager({str(self.directory)!r}, rank={self.rank}, world_size={self.world_size})"

    # -- layout ------------------------------------------------------------------------------------------------

    def path_for(self, step: int) -> Path:
        """The directory of `step`: `<directory>/step-<step:08d>`."""
        return self.directory / step_dir_name(step)

    def shard_path(self, step: int, rank: int | None = None) -> Path:
        return self.path_for(step) / f"rank-{self.rank if rank is None else rank}.pt"

    def is_committed(self, step: int) -> bool:
        return (self.path_for(step) / COMMITTED_FILE).is_file()

    def _step_dirs(self) -> list[int]:
        try:
            names = os.listdir(self.directory)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(int(m.group(1)) for m in map(_STEP_DIR.match, names) if m)

    def committed_steps(self) -> list[int]:
        """Committed steps, oldest first."""
        return [step for step in self._step_dirs() if self.is_committed(step)]

    def latest_step(self) -> int | None:
        """The step LATEST names when that step is committed; without a usable LATEST (a crash between COMMITTED and
        LATEST, a hand-edited file) the highest committed step; None when nothing is committed."""
        try:
            step = int((self.directory / LATEST_FILE).read_text().strip())
        except (OSError, ValueError):
            step = None
        if step is not None and self.is_committed(step):
            return step
        committed = self.committed_steps()
        return committed[-1] if committed else None

    # -- load ----------------------------------------------------------------------------------------------------

    def load(self, step: int | None = None) -> bytes:
        """This rank's shard of `step` (default: the latest committed step). Raises NoCheckpointError when there is
        none, when `step` is not committed, or when it has no shard for this rank (a different world size)."""
        if step is None:
            step = self.latest_step()
            if step is None:
                raise NoCheckpointError(f"no committed checkpoint in {self.directory}")
        elif not self.is_committed(step):
            raise NoCheckpointError(f"step {step} is not a committed checkpoint in {self.directory}")
        path = self.shard_path(step)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise NoCheckpointError(
                f"step {step} has no shard for rank {self.rank} in {self.directory} (was it saved by another world "
                f"size?)"
            ) from None

    def load_latest(self) -> tuple[int, bytes] | None:
        """(step, this rank's shard) of the latest committed step, or None: the usual resume call."""
        step = self.latest_step()
        if step is None:
            return None
        return step, self.load(step)

    # -- save ----------------------------------------------------------------------------------------------------

    def save(self, step: int, state: State) -> None:
        """Write this rank's shard of `step` atomically, wait for every rank, and (rank 0) commit and report.
        `state` is bytes or a callable that writes into the open binary file (e.g. `lambda f: torch.save(obj, f)`).
        On return the step is committed on every rank. Saving an already committed step changes nothing."""
        step = int(step)
        if step < 0:
            raise ValueError("step must be >= 0")
        requested = self._signal_flag or self._pending_request
        self._signal_flag = self._pending_request = False
        signature = self._request_signature()
        if signature is not None:  # whatever request is there now, this save serves it
            self._served_request = signature
            requested = True
        if self.is_committed(step):
            log(f"step {step} is already committed in {self.directory}; not overwriting it")
            if self.rank == 0 and requested:
                self._acknowledge(step)
            return
        dist = initialized_dist() if self.world_size > 1 else None
        step_dir = self.path_for(step)
        step_dir.mkdir(parents=True, exist_ok=True)
        fsync_dir(self.directory)
        atomic_write(self.shard_path(step), state)
        self._barrier(step, dist, committed=False)
        if self.rank == 0:
            self._commit(step)
            if requested or self.request_file.exists():
                self._acknowledge(step)
        self._barrier(step, dist, committed=True)
        if self.rank == 0:
            self.report(step, committed=True)

    def _commit(self, step: int) -> None:
        marker = {"step": step, "world_size": self.world_size, "time": time.time()}
        atomic_write(self.path_for(step) / COMMITTED_FILE, (json.dumps(marker) + "\n").encode())
        atomic_write(self.directory / LATEST_FILE, f"{step}\n".encode())
        log(f"committed checkpoint step {step} ({self.world_size} shard(s)) in {self.directory}")

    def _barrier(self, step: int, dist: Any | None, *, committed: bool) -> None:
        """All ranks meet: torch.distributed.barrier() with a process group; otherwise rank 0 waits for every shard
        (before the commit) and the other ranks wait for COMMITTED (after it)."""
        if self.world_size == 1:
            return
        if dist is not None:
            dist.barrier()
            return
        if committed == (self.rank == 0):
            return
        deadline = time.monotonic() + self.barrier_timeout
        while True:
            if committed:
                missing = [] if self.is_committed(step) else ["COMMITTED"]
            else:
                missing = [r for r in range(self.world_size) if not self.shard_path(step, r).is_file()]
            if not missing:
                return
            if time.monotonic() >= deadline:
                what = "rank 0's commit" if committed else f"the shards of ranks {missing}"
                raise CheckpointError(
                    f"rank {self.rank}: timed out after {self.barrier_timeout:g}s waiting for {what} of step {step}"
                )
            time.sleep(self.poll_interval)

    def save_torch(self, step: int, obj: Any) -> None:
        """`save(step, ...)` of `torch.save(obj)`."""
        import torch

        self.save(step, lambda fh: torch.save(obj, fh))

    def load_torch(self, step: int | None = None, *, map_location: Any = "cpu", weights_only: bool = True) -> Any:
        """`torch.load` of this rank's shard of `step` (default: the latest committed one)."""
        import torch

        return torch.load(io.BytesIO(self.load(step)), map_location=map_location, weights_only=weights_only)

    # -- pruning ---------------------------------------------------------------------------------------------------

    def keep_last(self, n: int) -> list[int]:
        """Rank 0 removes all committed steps but the newest `n` (never the latest) and the leftovers of failed saves
        below the latest; other ranks do nothing. Returns the removed steps."""
        if n < 1:
            raise ValueError("keep_last needs n >= 1")
        if self.rank != 0:
            return []
        latest = self.latest_step()
        committed = self.committed_steps()
        keep = set(committed[-n:])
        if latest is not None:
            keep.add(latest)
        removed = []
        for step in self._step_dirs():
            is_old = step in committed or (latest is not None and step < latest)
            if step not in keep and is_old:
                self._remove_step(step)
                removed.append(step)
        return removed

    def _remove_step(self, step: int) -> None:
        step_dir = self.path_for(step)
        with contextlib.suppress(FileNotFoundError):  # uncommit first: a half-removed step is never "committed"
            os.unlink(step_dir / COMMITTED_FILE)
            fsync_dir(step_dir)
        shutil.rmtree(step_dir, ignore_errors=True)

    # -- checkpoint requests ----------------------------------------------------------------------------------

    def install_signal_handler(self, signum: int = signal.SIGUSR1) -> bool:
        """Make `signum` (SIGUSR1) request a checkpoint at the next step. Only possible in the main thread: returns
        False elsewhere. A previously installed Python handler still runs."""
        if threading.current_thread() is not threading.main_thread():
            return False
        previous = signal.getsignal(signum)

        def handler(sig: int, frame: Any) -> None:
            self._signal_flag = True
            if callable(previous):
                previous(sig, frame)

        signal.signal(signum, handler)
        return True

    def request_checkpoint(self) -> None:
        """What SIGUSR1 does: the next `should_checkpoint` is true."""
        self._signal_flag = True

    def _request_signature(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.request_file)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    @property
    def checkpoint_requested(self) -> bool:
        """A signal, or a request file that no save of this process has served yet."""
        signature = self._request_signature()
        file_request = signature is not None and signature != self._served_request
        return self._signal_flag or self._pending_request or file_request

    def should_checkpoint(self, step: int, *, sync: bool = True) -> bool:
        """True every `interval` steps and when a checkpoint was requested. With an initialized process group (and
        `sync`) the ranks agree on the request through an all-reduce, so every rank gives the same answer; call it
        on every rank at every step."""
        periodic = self.interval is not None and step > 0 and step % self.interval == 0
        requested = self.checkpoint_requested
        dist = initialized_dist() if sync and self.world_size > 1 else None
        if dist is not None:
            requested = any_rank(dist, requested)
        if requested:
            self._pending_request = True
        return periodic or requested

    def _acknowledge(self, step: int) -> None:
        """Rank 0, after the commit: remove the request file and write `<request file>.ack` with the step."""
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.request_file)
            self.request_file.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(ack_path(self.request_file), f"{step}\n".encode())
            log(f"checkpoint request served: step {step} committed ({ack_path(self.request_file)})")
        except OSError as exc:
            log(f"could not acknowledge the checkpoint request at {self.request_file}: {exc}")

    # -- reports to the control plane ---------------------------------------------------------------------------

    @property
    def report_url(self) -> str | None:
        if not (self.api_url and self.job_token and self.job_name):
            return None
        return f"{self.api_url}/api/v1/jobs/{urllib.parse.quote(self.job_name, safe='')}/checkpoints/"

    def report(self, step: int, committed: bool) -> bool:
        """POST {"step", "committed"} to the job's checkpoints endpoint with the job's bearer token: 5 s timeout, 2
        retries with backoff. Failures are logged, never raised. No-op (False) without an API URL, token or job
        name. True when the control plane accepted it."""
        url = self.report_url
        if url is None:
            return False
        return post_report(url, token=self.job_token or "", step=step, committed=committed)

    def report_progress(self, step: int, *, block: bool = False) -> bool:
        """Rank 0 reports `step` as progress (committed=False), at most once every 10 s, in a background thread
        unless `block`. Returns whether a report was sent (or, in the background, started)."""
        if self.rank != 0 or self.report_url is None:
            return False
        return self._progress.report(step, block=block)

    def wait_for_reports(self, timeout: float | None = None) -> None:
        """Join a progress report still in flight (e.g. before exiting)."""
        self._progress.wait(timeout)
