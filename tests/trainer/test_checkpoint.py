"""gryvia_trainer: atomic sharded commits, resume, pruning, checkpoint requests (file, SIGUSR1, the preStop hook) and
reports to the control plane. No database, no torch: the file barrier stands in for torch.distributed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gryvia_trainer import CheckpointError, CheckpointManager, NoCheckpointError
from gryvia_trainer import checkpoint as ck

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


def temp_files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.name.startswith(ck.TMP_PREFIX)]


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRYVIA_", "DJANGO_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(extra)
    return env


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


# -- checkpoint requests ----------------------------------------------------------------------------------------


def test_interval(tmp_path: Path) -> None:
    mgr = manager(tmp_path, interval=5)
    assert [s for s in range(0, 16) if mgr.should_checkpoint(s)] == [5, 10, 15]
    assert not any(manager(tmp_path, interval=0).should_checkpoint(s) for s in range(1, 20))


def test_request_file_triggers_a_checkpoint_and_is_acknowledged(tmp_path: Path) -> None:
    request = tmp_path / "ckpt" / ".checkpoint-request"
    mgr = manager(tmp_path / "ckpt", interval=100, request_file=request)
    assert not mgr.should_checkpoint(7)
    request.parent.mkdir(parents=True)
    request.write_text("please")
    assert mgr.should_checkpoint(7)
    mgr.save(7, b"seven")
    assert not request.exists()
    assert ck.ack_path(request) == tmp_path / "ckpt" / ".checkpoint-request.ack"
    assert ck.ack_path(request).read_text() == "7\n"
    assert not mgr.should_checkpoint(8)


def test_a_served_request_file_is_not_served_twice_by_other_ranks(tmp_path: Path) -> None:
    """A rank that already checkpointed for a request ignores that same file until rank 0 removes it."""
    request = tmp_path / ".checkpoint-request"
    request.write_text("please")
    rank1 = manager(tmp_path, rank=1, world_size=2, request_file=request)
    assert rank1.should_checkpoint(3)
    rank1._served_request = rank1._request_signature()  # what save() records before its barrier
    rank1._pending_request = False
    assert not rank1.should_checkpoint(4)
    request.unlink()
    ck.atomic_write(request, b"again")  # a new request (another pod's preStop hook)
    assert rank1.should_checkpoint(5)


@pytest.fixture
def restore_sigusr1():
    previous = signal.getsignal(signal.SIGUSR1)
    yield
    signal.signal(signal.SIGUSR1, previous)


def test_sigusr1_requests_a_checkpoint(tmp_path: Path, restore_sigusr1) -> None:
    request = tmp_path / ".checkpoint-request"
    mgr = manager(tmp_path, interval=100, request_file=request)
    assert mgr.install_signal_handler()
    assert not mgr.should_checkpoint(1)
    os.kill(os.getpid(), signal.SIGUSR1)
    deadline = time.monotonic() + 5
    while not mgr.checkpoint_requested and time.monotonic() < deadline:
        time.sleep(0.01)
    assert mgr.should_checkpoint(2)
    assert mgr.should_checkpoint(2)  # still pending until a save serves it
    mgr.save(2, b"two")
    assert ck.ack_path(request).read_text() == "2\n"
    assert not mgr.should_checkpoint(3)


def test_signal_handler_is_only_installed_from_the_main_thread(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    installed: list[bool] = []
    thread = threading.Thread(target=lambda: installed.append(mgr.install_signal_handler()))
    thread.start()
    thread.join()
    assert installed == [False]


def test_prestop_hook_waits_for_the_acknowledgement(tmp_path: Path) -> None:
    """`python3 -m gryvia_trainer.request_checkpoint` writes the request; the training loop checkpoints; the hook
    sees the ack and exits 0."""
    directory = tmp_path / "ckpt"
    env = subprocess_env(GRYVIA_CHECKPOINT_DIR=str(directory))
    hook = subprocess.Popen(
        [sys.executable, "-m", "gryvia_trainer.request_checkpoint", "--timeout", "30"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    mgr = manager(directory, interval=1000)  # the request file is <GRYVIA_CHECKPOINT_DIR>/.checkpoint-request
    assert ck.request_file_from_env({"GRYVIA_CHECKPOINT_DIR": str(directory)}) == mgr.request_file
    step, deadline = 0, time.monotonic() + 30
    while time.monotonic() < deadline:
        step += 1
        if mgr.should_checkpoint(step):
            mgr.save(step, b"state")
            break
        time.sleep(0.02)
    out, _ = hook.communicate(timeout=30)
    assert hook.returncode == 0, out
    assert f"checkpoint committed at step {step}" in out
    assert mgr.latest_step() == step
    assert not (directory / ".checkpoint-request").exists()


def test_prestop_hook_gives_up_after_its_timeout(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    directory.mkdir()
    (directory / ".checkpoint-request.ack").write_text("3\n")  # an old request's ack does not count
    request = tmp_path / "custom-request"
    for env, expected in [
        (subprocess_env(GRYVIA_CHECKPOINT_DIR=str(directory)), "no acknowledgement within 0.3s"),
        (subprocess_env(GRYVIA_CHECKPOINT_REQUEST_FILE=str(request)), "no acknowledgement within 0.3s"),
        (subprocess_env(), "nothing to do"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "gryvia_trainer.request_checkpoint", "--timeout", "0.3"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        assert expected in done.stdout
    assert (directory / ".checkpoint-request").exists()
    assert request.exists()


# -- reports ----------------------------------------------------------------------------------------------------


class Recorder:
    """A loopback HTTP server that records POSTs and answers with the queued statuses (then 201)."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.requests: list[dict] = []
        self.statuses = list(statuses or [])
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                recorder.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                status = recorder.statuses.pop(0) if recorder.statuses else 201
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> Recorder:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fast_retries(monkeypatch):
    monkeypatch.setattr(ck, "REPORT_BACKOFF_S", 0.01)


def test_report_posts_step_with_the_job_token(tmp_path: Path) -> None:
    with Recorder() as server:
        mgr = manager(tmp_path, api_url=server.url + "/", job_token="gjt_secret", job_name="ddp")
        assert mgr.report(12, committed=True)
        mgr.save(15, b"state")  # rank 0 reports its commits
        assert mgr.report_progress(16, block=True)
        assert not mgr.report_progress(17, block=True)  # at most once every 10 s
    assert [json.loads(r["body"]) for r in server.requests] == [
        {"step": 12, "committed": True},
        {"step": 15, "committed": True},
        {"step": 16, "committed": False},
    ]
    first = server.requests[0]
    assert first["path"] == "/api/v1/jobs/ddp/checkpoints/"
    assert first["headers"]["Authorization"] == "Bearer gjt_secret"
    assert first["headers"]["Content-Type"] == "application/json"


def test_report_progress_runs_in_the_background_on_rank_0_only(tmp_path: Path) -> None:
    with Recorder() as server:
        kwargs = {"api_url": server.url, "job_token": "t", "job_name": "ddp"}
        assert not manager(tmp_path, rank=1, world_size=2, **kwargs).report_progress(3)
        mgr = manager(tmp_path, **kwargs)
        assert mgr.report_progress(3)
        mgr.wait_for_reports(timeout=10)
    assert [json.loads(r["body"]) for r in server.requests] == [{"step": 3, "committed": False}]


def test_report_retries_server_errors_but_not_client_errors(tmp_path: Path, fast_retries) -> None:
    with Recorder(statuses=[503, 500]) as server:
        assert manager(tmp_path, api_url=server.url, job_token="t", job_name="j").report(1, committed=True)
    assert len(server.requests) == 3
    with Recorder(statuses=[401]) as server:
        assert not manager(tmp_path, api_url=server.url, job_token="t", job_name="j").report(1, committed=True)
    assert len(server.requests) == 1


def test_report_never_raises_when_the_control_plane_is_down(tmp_path: Path, fast_retries, capsys) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the block ends: nothing listens there
    mgr = manager(tmp_path, api_url=f"http://127.0.0.1:{port}", job_token="t", job_name="ddp")
    assert mgr.report(4, committed=True) is False
    mgr.save(5, b"state")  # the commit stands even though the report failed
    assert mgr.latest_step() == 5
    assert "could not report step 4" in capsys.readouterr().err
    assert not manager(tmp_path, api_url="", job_token="t", job_name="ddp").report(1, committed=True)
    assert not manager(tmp_path, api_url="http://x", job_token="", job_name="ddp").report(1, committed=True)


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
