"""The examples in examples/training run for real: DDP with two gloo processes on CPU (checkpoints, a requested
checkpoint through the preStop hook, recovery after a rank fails), evaluation, and the inference server over HTTP.
The manifests validate as GryviaAIJobs. No database."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "training"
LOSS = re.compile(r"^rank (\d+) step (\d+) loss ([0-9.]+)$", re.M)
# A hang guard, not a speed check: torch start-up alone can take a minute on a loaded 2-core machine.
TIMEOUT_S = 180

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="needs torch: pip install -e '.[examples]'"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def example_env(**extra: str) -> dict[str, str]:
    """The surrounding environment without Gryvia's or Django's variables, the repository importable."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GRYVIA_", "DJANGO_", "PET_")) and k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")
    }
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


class Ranks:
    """`python -m examples.training.ddp` as WORLD_SIZE real processes, as Gryvia's pods would run it."""

    def __init__(self, workdir: Path, checkpoint_dir: Path, args: list[str], *, world: int = 2, tag: str = "run"):
        port = str(free_port())
        self.logs = [workdir / f"{tag}-rank{r}.log" for r in range(world)]
        self.procs = []
        for rank in range(world):
            env = example_env(
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
                RANK=str(rank),
                WORLD_SIZE=str(world),
                GRYVIA_CHECKPOINT_DIR=str(checkpoint_dir),
                GRYVIA_EXAMPLE_DIST_TIMEOUT="60",
            )
            with open(self.logs[rank], "wb") as log:
                self.procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "examples.training.ddp", *args],
                        env=env,
                        cwd=workdir,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )

    def log(self, rank: int) -> str:
        return self.logs[rank].read_text(errors="replace")

    def wait(self, timeout: float = TIMEOUT_S) -> list[int]:
        deadline = time.monotonic() + timeout
        try:
            return [p.wait(max(0.1, deadline - time.monotonic())) for p in self.procs]
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"ddp ranks did not finish in {timeout}s:\n{self.log(0)[-3000:]}\n{self.log(1)[-3000:]}")

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def losses(log: str, rank: int = 0) -> list[tuple[int, float]]:
    return [(int(s), float(v)) for r, s, v in LOSS.findall(log) if int(r) == rank]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Ranks]:
    """One two-rank run of 20 steps, checkpointing every 5 (shared by the training, eval and serve tests)."""
    workdir = tmp_path_factory.mktemp("ddp")
    ranks = Ranks(workdir, workdir / "checkpoints", ["--steps", "20", "--interval", "5", "--step-sleep", "0.02"])
    codes = ranks.wait()
    assert codes == [0, 0], ranks.log(0)[-3000:] + ranks.log(1)[-3000:]
    return workdir / "checkpoints", ranks


@pytest.mark.slow
@needs_torch
def test_ddp_trains_on_two_processes_and_commits_checkpoints(trained) -> None:
    checkpoint_dir, ranks = trained
    for rank in (0, 1):
        log = ranks.log(rank)
        assert f"rank {rank} starting from step 0" in log
        assert f"rank {rank} done step 20" in log
        series = losses(log, rank)
        assert [s for s, _ in series] == list(range(1, 21))
        first, last = [v for _, v in series[:3]], [v for _, v in series[-3:]]
        assert sum(last) / 3 < 0.1 * sum(first) / 3, series  # the loss comes down by an order of magnitude
    assert "committed checkpoint step 20" in ranks.log(0)
    assert (checkpoint_dir / "LATEST").read_text().strip() == "20"
    steps = sorted(p.name for p in checkpoint_dir.glob("step-*"))
    assert steps == ["step-00000010", "step-00000015", "step-00000020"]  # --keep 3
    for step in steps:
        names = sorted(p.name for p in (checkpoint_dir / step).iterdir())
        assert names == ["COMMITTED", "rank-0.pt", "rank-1.pt"]


@pytest.mark.slow
@needs_torch
def test_ddp_recovers_from_a_failed_rank(tmp_path: Path) -> None:
    """Rank 1 dies at step 12 on the first attempt; the platform restarts the group; the retry resumes from the
    last committed step (10) and finishes."""
    checkpoint_dir = tmp_path / "checkpoints"
    args = ["--steps", "16", "--interval", "5", "--fail-at-step", "12", "--fail-rank", "1", "--step-sleep", "0.02"]
    first = Ranks(tmp_path, checkpoint_dir, args, tag="attempt1")
    try:
        assert first.procs[1].wait(TIMEOUT_S) == 1
    finally:
        first.kill()  # rank 0 is stuck in (or failing out of) a collective: the group restarts as a whole
    assert "rank 1 failing at step 12" in first.log(1)
    assert "rank 0 done" not in first.log(0)
    assert (checkpoint_dir / "LATEST").read_text().strip() == "10"

    second = Ranks(tmp_path, checkpoint_dir, args, tag="attempt2")
    assert second.wait() == [0, 0], second.log(0)[-3000:] + second.log(1)[-3000:]
    for rank in (0, 1):
        log = second.log(rank)
        resumed = re.search(rf"^rank {rank} resumed from step (\d+)$", log, re.M)
        assert resumed and int(resumed.group(1)) == 10, log[-2000:]
        assert "failing" not in log
        assert [s for s, _ in losses(log, rank)] == list(range(11, 17))
        assert f"rank {rank} done step 16" in log
    assert losses(second.log(0))[0][1] < losses(first.log(0))[0][1]  # it continued from trained weights
    assert (checkpoint_dir / "LATEST").read_text().strip() == "16"


@pytest.mark.slow
@needs_torch
def test_ddp_checkpoints_when_the_prestop_hook_asks(tmp_path: Path) -> None:
    """No periodic checkpoints; the preStop hook's request makes both ranks checkpoint at the same next step and
    the hook sees rank 0's acknowledgement; then SIGUSR1 to rank 1 alone makes both checkpoint again."""
    checkpoint_dir = tmp_path / "checkpoints"
    ranks = Ranks(tmp_path, checkpoint_dir, ["--steps", "40", "--interval", "0", "--step-sleep", "0.05"])
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not losses(ranks.log(0)) and time.monotonic() < deadline:
            assert all(p.poll() is None for p in ranks.procs), ranks.log(0)[-3000:]
            time.sleep(0.1)
        hook = subprocess.run(
            [sys.executable, "-m", "gryvia_trainer.request_checkpoint", "--timeout", "30"],
            env=example_env(GRYVIA_CHECKPOINT_DIR=str(checkpoint_dir)),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        assert hook.returncode == 0, hook.stderr
        match = re.search(r"checkpoint committed at step (\d+)", hook.stdout)
        assert match, hook.stdout + ranks.log(0)[-3000:]
        step = int(match.group(1))
        assert 0 < step < 40
        ranks.procs[1].send_signal(signal.SIGUSR1)  # one rank's signal: the ranks agree and both checkpoint
        assert ranks.wait() == [0, 0]
    finally:
        ranks.kill()
    log = ranks.log(0)
    committed = [int(s) for s in re.findall(r"^rank 0 checkpoint step (\d+) committed$", log, re.M)]
    assert committed[0] == step and committed[-1] == 40 and len(committed) == 3, committed
    assert not (checkpoint_dir / ".checkpoint-request").exists()
    for saved in committed:
        assert (checkpoint_dir / f"step-{saved:08d}" / "rank-1.pt").exists()
        assert (checkpoint_dir / f"step-{saved:08d}" / "COMMITTED").exists()


@pytest.mark.slow
@needs_torch
def test_evaluate_scores_the_latest_checkpoint_and_writes_metrics(trained, tmp_path: Path) -> None:
    checkpoint_dir, _ = trained
    runs = {}
    for name, args in [("trained", ["--checkpoint-dir", str(checkpoint_dir)]), ("fresh", [])]:
        workdir = tmp_path / name
        workdir.mkdir()
        done = subprocess.run(
            [sys.executable, "-m", "examples.training.evaluate", *args],
            env=example_env(),
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        assert done.returncode == 0, done.stderr
        printed = re.search(r"^eval mse ([0-9.]+)$", done.stdout, re.M)
        assert printed, done.stdout
        metrics = json.loads((workdir / "metrics.json").read_text())
        assert abs(metrics["mse"] - float(printed.group(1))) < 1e-3
        runs[name] = metrics
    assert runs["trained"]["checkpoint_step"] == 20
    assert runs["fresh"]["checkpoint_step"] is None
    assert runs["trained"]["mse"] < 0.05 < runs["fresh"]["mse"]


def _http(url: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.slow
@needs_torch
def test_serve_answers_healthz_and_predict_and_stops_on_sigterm(trained, tmp_path: Path) -> None:
    checkpoint_dir, _ = trained
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "examples.training.serve"],
            env=example_env(PORT=str(port), GRYVIA_CHECKPOINT_DIR=str(checkpoint_dir)),
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            assert server.poll() is None, log.read_text()
            try:
                status, health = _http(f"{base}/healthz")
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
        assert (status, health) == (200, {"status": "ok", "checkpoint_step": 20})

        unit = [[1.0 if i == j else 0.0 for i in range(8)] for j in range(8)]
        status, answer = _http(f"{base}/predict", {"x": unit})
        assert status == 200 and len(answer["y"]) == 8
        bias = 0.3  # the trained model is close to y = x . w + 0.3
        expected = [0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 1.0]
        assert all(abs(y - (w + bias)) < 0.15 for y, w in zip(answer["y"], expected, strict=True)), answer
        status, single = _http(f"{base}/predict", {"x": unit[2]})
        assert status == 200 and single["y"] == [answer["y"][2]]
        status, error = _http(f"{base}/predict", {"x": [1.0, 2.0]})
        assert status == 400 and "8 numbers" in error["error"]

        server.send_signal(signal.SIGTERM)
        assert server.wait(15) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(10)
    text = log.read_text()
    assert "GET /healthz" in text and "POST /predict" in text
    assert "serve: stopped" in text


# -- manifests -----------------------------------------------------------------------------------------------------


def load_manifest(name: str) -> dict:
    return yaml.safe_load((EXAMPLES / name).read_text())


@pytest.mark.parametrize(
    ("filename", "job_type"),
    [
        ("hello.yaml", "training"),
        ("ddp.yaml", "training"),
        ("eval.yaml", "evaluation"),
        ("inference.yaml", "inference"),
    ],
)
def test_manifests_are_valid_jobs(filename: str, job_type: str) -> None:
    from apps.jobs import choices as C
    from apps.jobs.spec import normalize_spec

    manifest = load_manifest(filename)
    assert manifest["apiVersion"] == C.API_VERSION and manifest["kind"] == C.KIND
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", manifest["metadata"]["name"])
    spec = normalize_spec(manifest["spec"])
    assert spec["type"] == job_type
    assert spec["gpus"] == 0


def test_ddp_manifest_wires_the_checkpoint_contract_to_the_example() -> None:
    from apps.jobs import manifests
    from apps.jobs.spec import JobSpec, normalize_spec

    manifest = load_manifest("ddp.yaml")
    spec = JobSpec.of(normalize_spec(manifest["spec"]))
    job = manifests.workload(spec, name="ddp", namespace="t-alpha", uid="u1", tenant="alpha", api_url="http://gv")
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["GRYVIA_CHECKPOINT_DIR"] == "/data/checkpoints"
    assert env["GRYVIA_CHECKPOINT_INTERVAL"] == "5"
    assert env["WORLD_SIZE"] == "2" and "RANK" in env
    assert container["command"] == ["python3", "-m", "examples.training.ddp", "--steps", "40"]
    prestop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert prestop == ["python3", "-m", "gryvia_trainer.request_checkpoint", "--timeout", "25"]  # grace 30 - 5
    assert job["spec"]["backoffLimit"] == 2
    assert (REPO / "gryvia_trainer" / "request_checkpoint.py").exists()


def test_hello_manifest_is_the_documented_one() -> None:
    assert load_manifest("hello.yaml") == {
        "apiVersion": "gryvia.io/v1alpha1",
        "kind": "GryviaAIJob",
        "metadata": {"name": "hello"},
        "spec": {
            "type": "training",
            "image": "python:3.11-slim",
            "gpus": 0,
            "timeout": "10m",
            "distributed": {"enabled": True, "nodes": 2, "backend": "gloo"},
            "command": [
                "python3",
                "-c",
                "import os; print('rank', os.environ['RANK'], 'world', os.environ['WORLD_SIZE'])",
            ],
        },
    }
