"""gryvia_trainer: atomic sharded commits, resume, pruning and the defaults taken from the environment. No database,
no torch: the file barrier stands in for torch.distributed. Checkpoint requests and reports are in
test_checkpoint_requests.py."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gryvia_trainer import CheckpointError, CheckpointManager, NoCheckpointError
from gryvia_trainer import checkpoint as ck

from .checkpoint_env import REPO, manager, subprocess_env


def temp_files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.name.startswith(ck.TMP_PREFIX)]


# -- save, commit, load ---------------------------------------------------------------------------------------------


def test_save_commits_atomically_and_loads_back(tmp_path: Path) -> None:
    mgr = manager(tmp_path / "ckpt")
    assert mgr.latest_step() is None
    mgr.save(3, b"weights-at-3")
    mgr.save(7, lambda fh: fh.write(b"weights-at-7"))

    assert mgr.latest_step() == 7
    assert mgr.load() == b"weights-at-7"
    assert mgr.load(3) == b"weights-at-3"
    assert mgr.load_latest() == (7, b"weights-at-7")
    assert mgr.path_for(7) == tmp_path / "ckpt" / "step-00000007"
    assert (tmp_path / "ckpt" / "LATEST").read_text() == "7\n"
    assert json.loads((mgr.path_for(7) / "COMMITTED").read_text())["world_size"] == 1
    assert sorted(p.name for p in mgr.path_for(7).iterdir()) == ["COMMITTED", "rank-0.pt"]
    assert temp_files(tmp_path) == []
    assert mgr.committed_steps() == [3, 7]


def test_load_without_a_committed_checkpoint_raises_clearly(tmp_path: Path) -> None:
    mgr = manager(tmp_path / "missing")
    assert mgr.latest_step() is None
    assert mgr.load_latest() is None
    with pytest.raises(NoCheckpointError, match="no committed checkpoint"):
        mgr.load()
    mgr.save(1, b"x")
    mgr.path_for(2).mkdir()
    (mgr.path_for(2) / "rank-0.pt").write_bytes(b"half-saved")
    with pytest.raises(NoCheckpointError, match="step 2 is not a committed checkpoint"):
        mgr.load(2)
    other_rank = manager(tmp_path / "missing", rank=1, world_size=2)
    with pytest.raises(NoCheckpointError, match="no shard for rank 1"):
        other_rank.load()
    assert isinstance(NoCheckpointError("x"), FileNotFoundError)


def test_bad_state_leaves_no_temp_file(tmp_path: Path) -> None:
    mgr = manager(tmp_path)

    def broken(fh) -> None:
        fh.write(b"partial")
        raise RuntimeError("serialisation failed")

    with pytest.raises(RuntimeError, match="serialisation failed"):
        mgr.save(1, broken)
    with pytest.raises(TypeError):
        mgr.save(2, {"not": "bytes"})  # type: ignore[arg-type]
    assert temp_files(tmp_path) == []
    assert mgr.latest_step() is None


def _save_in_thread(mgr: CheckpointManager, step: int, state, results: dict) -> threading.Thread:
    def run() -> None:
        try:
            mgr.save(step, state)
            results[mgr.rank] = "ok"
        except BaseException as exc:  # handed to the test thread
            results[mgr.rank] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_latest_is_written_only_after_every_rank_wrote_its_shard(tmp_path: Path) -> None:
    """Two ranks with the file barrier: while rank 1 is still writing its shard, rank 0 has written its own but
    waits, and neither COMMITTED nor LATEST exist; afterwards both are there and no temp file is left."""
    directory = tmp_path / "ckpt"
    rank0 = manager(directory, rank=0, world_size=2, barrier_timeout=30)
    rank1 = manager(directory, rank=1, world_size=2, barrier_timeout=30)
    writing, release = threading.Event(), threading.Event()

    def slow_rank1(fh) -> None:
        fh.write(b"rank1-")
        writing.set()
        assert release.wait(30)
        fh.write(b"step4")

    results: dict = {}
    t0 = _save_in_thread(rank0, 4, b"rank0-step4", results)
    t1 = _save_in_thread(rank1, 4, slow_rank1, results)
    assert writing.wait(10)
    deadline = time.monotonic() + 10
    while not rank0.shard_path(4).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # rank 0 is now in the barrier
    assert rank0.shard_path(4).read_bytes() == b"rank0-step4"
    assert not rank0.shard_path(4, rank=1).exists()
    assert temp_files(directory), "rank 1's shard is being written to a temp file"
    assert not (directory / "LATEST").exists()
    assert not rank0.is_committed(4)
    assert rank0.latest_step() is None
    assert t0.is_alive() and t1.is_alive()

    release.set()
    t0.join(10)
    t1.join(10)
    assert results == {0: "ok", 1: "ok"}
    assert rank0.latest_step() == rank1.latest_step() == 4
    assert rank0.load() == b"rank0-step4"
    assert rank1.load() == b"rank1-step4"
    assert temp_files(directory) == []


def test_a_missing_rank_times_out_and_keeps_the_previous_commit(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    rank0 = manager(directory, rank=0, world_size=2, barrier_timeout=0.3)
    rank1 = manager(directory, rank=1, world_size=2, barrier_timeout=0.3)
    results: dict = {}
    threads = [_save_in_thread(m, 2, f"{m.rank}".encode(), results) for m in (rank0, rank1)]
    for t in threads:
        t.join(10)
    assert results == {0: "ok", 1: "ok"}

    with pytest.raises(CheckpointError, match=r"waiting for the shards of ranks \[1\] of step 3"):
        rank0.save(3, b"0")  # rank 1 never arrives
    with pytest.raises(CheckpointError, match="rank 0's commit of step 4"):
        rank1.save(4, b"1")  # rank 0 never commits
    assert rank0.latest_step() == 2
    assert (directory / "LATEST").read_text() == "2\n"
    assert not rank0.is_committed(3)


def test_latest_step_ignores_an_uncommitted_or_broken_latest(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    mgr.save(1, b"1")
    mgr.save(2, b"2")
    (tmp_path / "LATEST").write_text("9\n")  # names a step that is not committed
    assert mgr.latest_step() == 2
    (tmp_path / "LATEST").write_text("garbage")
    assert mgr.latest_step() == 2
    (tmp_path / "LATEST").unlink()
    assert mgr.latest_step() == 2


def test_saving_a_committed_step_again_changes_nothing(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    mgr.save(5, b"first")
    mgr.save(5, b"second")
    assert mgr.load(5) == b"first"


def test_keep_last_prunes_older_steps_but_never_the_latest(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    for step in range(1, 6):
        mgr.save(step, f"s{step}".encode())
    leftover = mgr.path_for(2) / "rank-0.pt"  # step 2 committed; also a failed save's dir below the latest
    assert leftover.exists()
    mgr.path_for(6).mkdir()  # a save in progress above the latest: kept
    (mgr.path_for(6) / "rank-0.pt").write_bytes(b"in progress")

    assert manager(tmp_path, rank=1, world_size=2).keep_last(1) == []  # only rank 0 prunes
    assert mgr.keep_last(2) == [1, 2, 3]
    assert mgr.committed_steps() == [4, 5]
    assert mgr.path_for(6).exists()
    assert mgr.latest_step() == 5

    (tmp_path / "LATEST").write_text("4\n")  # the latest is 4 now (e.g. a rollback): keep it too
    assert mgr.keep_last(1) == []
    assert mgr.committed_steps() == [4, 5]
    with pytest.raises(ValueError):
        mgr.keep_last(0)


# -- defaults from the environment ------------------------------------------------------------------------------------


def test_defaults_come_from_the_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GRYVIA_CHECKPOINT_DIR", str(tmp_path / "env-dir"))
    monkeypatch.setenv("GRYVIA_CHECKPOINT_REQUEST_FILE", str(tmp_path / "req"))
    monkeypatch.setenv("GRYVIA_CHECKPOINT_INTERVAL", "7")
    monkeypatch.setenv("GRYVIA_API_URL", "http://gryvia.example/")
    monkeypatch.setenv("GRYVIA_JOB_TOKEN", "tok")
    monkeypatch.setenv("GRYVIA_JOB_NAME", "my job")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    mgr = CheckpointManager()
    assert (mgr.directory, mgr.request_file) == (tmp_path / "env-dir", tmp_path / "req")
    assert (mgr.rank, mgr.world_size, mgr.interval) == (1, 4, 7)
    assert mgr.report_url == "http://gryvia.example/api/v1/jobs/my%20job/checkpoints/"
    monkeypatch.delenv("GRYVIA_CHECKPOINT_DIR")
    with pytest.raises(ValueError, match="GRYVIA_CHECKPOINT_DIR"):
        CheckpointManager()
    with pytest.raises(ValueError, match="rank 4"):
        CheckpointManager(tmp_path, rank=4, world_size=4)
    monkeypatch.setenv("GRYVIA_RESUME_IF_PRESENT", "false")
    assert not ck.resume_enabled()


# -- no Django ----------------------------------------------------------------------------------------------------


def test_gryvia_trainer_imports_neither_django_nor_torch() -> None:
    code = (
        "import sys, gryvia_trainer, gryvia_trainer.checkpoint, gryvia_trainer.request_checkpoint\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'rest_framework', 'apps', 'torch'))\n"
        "print('loaded:', bad)\n"
    )
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        env=subprocess_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "loaded: []" in done.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line]
    assert "gryvia_trainer.checkpoint" in imported
    assert not [m for m in imported if m.split(".")[0] in ("django", "apps", "torch")]
