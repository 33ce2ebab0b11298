"""gryvia_trainer: checkpoint requests (the interval, the request file, SIGUSR1, the preStop hook) and reports to
the control plane (over a loopback HTTP server). No database, no torch."""

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

from gryvia_trainer import checkpoint as ck

from .checkpoint_env import manager, subprocess_env

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
