"""`gryvia jobs ...` and error handling against the stand-in API."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import yaml

from .conftest import KEY, Run, job, page
from .standin import Answer, Recorded, StandIn, error

REPO = Path(__file__).resolve().parents[2]
JOBS = "/api/v1/jobs/"

MULTI_DOC = """\
# two jobs
apiVersion: gryvia.io/v1alpha1
kind: GryviaAIJob
metadata:
  name: train-a
spec:
  type: training
  image: ghcr.io/acme/train:1
  gpus: 8
---
apiVersion: gryvia.io/v1alpha1
kind: GryviaAIJob
metadata:
  name: train-b
spec:
  type: training
  image: ghcr.io/acme/train:1
---
"""


def _created(request: Recorded) -> Answer:
    """201 with a job named after the submitted manifest (YAML or JSON)."""
    data = yaml.safe_load(request.body)
    return Answer(201, json=job(data["metadata"]["name"]))


def _args(standin: StandIn, *rest: str) -> list[str]:
    return ["--url", standin.url, "--api-key", KEY, *rest]


def test_submit_multi_document_yaml_posts_each_document_as_yaml(standin: StandIn, cli: Run, tmp_path: Path):
    manifest = tmp_path / "jobs.yaml"
    manifest.write_text(MULTI_DOC)
    standin.add("POST", JOBS, _created)
    result = cli(*_args(standin, "--tenant", "alpha", "jobs", "submit", "-f", str(manifest)))
    assert result.code == 0, result.err
    posts = standin.seen("POST", JOBS)
    assert len(posts) == 2
    for post, name in zip(posts, ("train-a", "train-b"), strict=True):
        assert post.headers["content-type"] == "application/yaml"
        assert post.headers["authorization"] == f"Bearer {KEY}"
        assert post.headers["x-gryvia-tenant"] == "alpha"
        assert yaml.safe_load(post.body)["metadata"]["name"] == name
        assert b"---" not in post.body
    assert posts[0].body.decode().startswith("apiVersion: gryvia.io/v1alpha1\nkind: GryviaAIJob")
    assert "job/train-a submitted (tenant alpha)" in result.out
    assert "job/train-b submitted" in result.out
    assert KEY not in result.out + result.err


def test_submit_json_file_and_stdin(standin: StandIn, cli: Run, tmp_path: Path):
    data = {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob", "metadata": {"name": "j1"}, "spec": {}}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(data))
    standin.add("POST", JOBS, _created)
    result = cli(*_args(standin, "jobs", "submit", "-f", str(path), "-o", "json"))
    assert result.code == 0, result.err
    (post,) = standin.seen("POST", JOBS)
    assert post.headers["content-type"] == "application/json"
    assert post.json() == data
    assert "x-gryvia-tenant" not in post.headers
    assert json.loads(result.out)["metadata"]["name"] == "j1"

    result = cli(*_args(standin, "jobs", "submit", "-f", "-"), stdin=MULTI_DOC.split("---")[0])
    assert result.code == 0, result.err
    assert standin.seen("POST", JOBS)[-1].headers["content-type"] == "application/yaml"


def test_submit_rejects_other_kinds_before_sending(standin: StandIn, cli: Run, tmp_path: Path):
    path = tmp_path / "x.yaml"
    path.write_text("kind: Deployment\nmetadata: {name: x}\n")
    result = cli(*_args(standin, "jobs", "submit", "-f", str(path)))
    assert result.code == 1
    assert "is not GryviaAIJob" in result.err
    assert standin.requests == []


def test_list_table_json_yaml_and_filters(standin: StandIn, cli: Run):
    running = job("train-a", "Running", currentNodes=2, readyNodes=2, gpusAllocated=16)
    queued = job("serve-b", "Queued", type="inference", reason="QuotaExceeded", queuePosition=3, queueLength=7)
    standin.add("GET", JOBS, Answer(json=page([running, queued])))
    result = cli(*_args(standin, "jobs", "list", "--phase", "running", "--type", "training"))
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split() == ["NAME", "TYPE", "PHASE", "QUEUE", "POSITION", "NODES", "GPUS", "AGE", "REASON"]
    assert lines[1].split()[:7] == ["train-a", "training", "Running", "default", "-", "2/2", "16"]
    assert lines[2].split()[:7] == ["serve-b", "inference", "Queued", "default", "3/7", "0/1", "0"]
    assert lines[2].split()[-1] == "QuotaExceeded"
    assert standin.requests[0].query == {"phase": "Running", "type": "training"}

    as_json = cli(*_args(standin, "jobs", "list", "-o", "json"))
    assert json.loads(as_json.out) == [running, queued]
    as_yaml = cli(*_args(standin, "jobs", "list", "-o", "yaml"))
    assert yaml.safe_load(as_yaml.out) == [running, queued]


def test_list_all_follows_pages(standin: StandIn, cli: Run):
    first = page([job("a")], next=f"{standin.url}{JOBS}?limit=1&offset=1", count=2)
    standin.add("GET", JOBS, Answer(json=first), Answer(json=page([job("b")], count=2)))
    result = cli(*_args(standin, "jobs", "list", "--all", "--limit", "1", "-o", "json"))
    assert result.code == 0, result.err
    assert [j["metadata"]["name"] for j in json.loads(result.out)] == ["a", "b"]
    assert [r.query.get("offset") for r in standin.requests] == [None, "1"]


def test_list_without_all_says_there_is_more(standin: StandIn, cli: Run):
    standin.add("GET", JOBS, Answer(json=page([job("a")], next=f"{standin.url}{JOBS}?offset=1", count=7)))
    result = cli(*_args(standin, "jobs", "list"))
    assert result.code == 0
    assert "showing 1 of 7 jobs; use --all" in result.err


def test_get_summary_and_json(standin: StandIn, cli: Run):
    condition = {
        "type": "Ready",
        "status": "True",
        "reason": "AllNodesReady",
        "message": "2/2 nodes ready",
        "lastTransitionTime": "2024-05-01T12:01:00Z",
    }
    obj = job(
        "train-a",
        "Running",
        currentNodes=2,
        readyNodes=2,
        gpusAllocated=16,
        lastCheckpointStep=1200,
        endpoint="http://train-a.alpha.svc:8000",
        conditions=[condition],
        reason="Started",
        message="all\x1b[31m nodes up",
    )
    standin.add("GET", f"{JOBS}train-a/", Answer(json=obj))
    result = cli(*_args(standin, "jobs", "get", "train-a"))
    assert result.code == 0, result.err
    text = result.out
    assert "Phase:" in text and "Running" in text
    assert re.search(r"^Checkpoint step: +1200$", text, re.M)
    assert "http://train-a.alpha.svc:8000" in text
    assert "AllNodesReady" in text and "2/2 nodes ready" in text
    assert "\x1b" not in text  # control characters from the server never reach the terminal
    assert json.loads(cli(*_args(standin, "jobs", "get", "train-a", "-o", "json")).out) == obj


def test_logs_follow_prints_lines_as_they_arrive(standin: StandIn, cli: Run):
    lines = [f"[0] step {i}\n" for i in range(4)]
    stream = Answer(chunks=lines, delay=0.25)
    standin.add("GET", f"{JOBS}train-a/logs/", stream)
    result = cli(*_args(standin, "jobs", "logs", "train-a", "-f", "--index", "0", "--tail", "10"))
    assert result.code == 0, result.err
    assert result.out == "".join(lines)
    assert standin.requests[0].query == {"index": "0", "tail": "10", "follow": "1"}
    assert standin.requests[0].headers["accept"] == "text/plain"
    first_written = next(t for t, text in result.stdout.writes if "step 0" in text)
    assert first_written < stream.sent_at[-1] - 0.3  # printed while the server was still streaming


def test_logs_ctrl_c_exits_130_quietly(standin: StandIn, config_path: Path):
    standin.add("GET", f"{JOBS}train-a/logs/", Answer(chunks=[f"[0] line {i}\n" for i in range(100)], delay=0.1))
    env = {**os.environ, "GRYVIA_URL": standin.url, "GRYVIA_API_KEY": KEY, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gryvia_cli", "jobs", "logs", "train-a", "--follow"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As a terminal's Ctrl-C finds it, even when the tests run in a background job (where SIGINT is ignored,
        # and the ignoring would be inherited).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "[0] line 0\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert err == ""


def test_events(standin: StandIn, cli: Run):
    events = [{"type": "Normal", "reason": "Scheduled", "message": "placed on 2 nodes", "time": "2024-05-01T12:00:05Z"}]
    standin.add("GET", f"{JOBS}train-a/events/", Answer(json=page(events)))
    result = cli(*_args(standin, "jobs", "events", "train-a"))
    assert result.code == 0, result.err
    assert result.out.splitlines()[0].split() == ["AGE", "TYPE", "REASON", "MESSAGE"]
    assert "Scheduled" in result.out and "placed on 2 nodes" in result.out


def test_cancel_resize_delete(standin: StandIn, cli: Run):
    standin.add("POST", f"{JOBS}train-a/cancel/", Answer(202, json=job("train-a", "Running")))
    standin.add("POST", f"{JOBS}train-a/resize/", Answer(json=job("train-a", "Running", currentNodes=3)))
    standin.add("DELETE", f"{JOBS}train-a/", Answer(204))
    assert cli(*_args(standin, "jobs", "cancel", "train-a")).code == 0
    resized = cli(*_args(standin, "jobs", "resize", "train-a", "--nodes", "3"))
    assert resized.code == 0 and "resized to 3 nodes" in resized.out
    deleted = cli(*_args(standin, "jobs", "delete", "train-a", "--yes"))
    assert deleted.code == 0 and "job/train-a deleted" in deleted.out
    methods = [(r.method, r.path) for r in standin.requests]
    assert methods == [
        ("POST", f"{JOBS}train-a/cancel/"),
        ("POST", f"{JOBS}train-a/resize/"),
        ("DELETE", f"{JOBS}train-a/"),
    ]
    assert standin.requests[1].json() == {"nodes": 3}
    assert standin.requests[1].headers["content-type"] == "application/json"


def test_resize_conflict_shows_the_message(standin: StandIn, cli: Run):
    standin.add("POST", f"{JOBS}train-a/resize/", error(409, "job train-a is not elastic"))
    result = cli(*_args(standin, "jobs", "resize", "train-a", "--nodes", "2"))
    assert result.code == 1
    assert result.err == "error: job train-a is not elastic\n"


def test_delete_needs_yes_without_a_terminal_and_asks_on_one(standin: StandIn, cli: Run):
    standin.add("DELETE", f"{JOBS}train-a/", Answer(204))
    refused = cli(*_args(standin, "jobs", "delete", "train-a"))
    assert refused.code == 2 and "--yes" in refused.err
    assert standin.requests == []
    declined = cli(*_args(standin, "jobs", "delete", "train-a"), stdin="n\n", stdin_tty=True)
    assert declined.code == 1 and "[y/N]" in declined.err
    assert standin.requests == []
    accepted = cli(*_args(standin, "jobs", "delete", "train-a"), stdin="y\n", stdin_tty=True)
    assert accepted.code == 0
    assert [(r.method, r.path) for r in standin.requests] == [("DELETE", f"{JOBS}train-a/")]


def test_submit_wait_polls_until_succeeded(standin: StandIn, cli: Run, tmp_path: Path):
    (tmp_path / "j.yaml").write_text(MULTI_DOC.split("---")[0])
    standin.add("POST", JOBS, Answer(201, json=job("train-a")))
    standin.add(
        "GET",
        f"{JOBS}train-a/",
        Answer(json=job("train-a", "Queued", reason="WaitingForQuota")),
        Answer(json=job("train-a", "Running", currentNodes=1, readyNodes=1)),
        Answer(json=job("train-a", "Running", currentNodes=1, readyNodes=1)),
        Answer(json=job("train-a", "Succeeded")),
    )
    result = cli(*_args(standin, "jobs", "submit", "-f", str(tmp_path / "j.yaml"), "--wait", "--interval", "0.01"))
    assert result.code == 0, result.err
    assert len(standin.seen("GET")) == 4
    lines = result.err.splitlines()
    assert [line.split(" [")[0] for line in lines] == [
        "train-a: Pending",
        "train-a: Queued",
        "train-a: Running",
        "train-a: Succeeded",
    ]  # one plain line per transition when stderr is not a terminal
    assert "WaitingForQuota" in lines[1] and "1/1 nodes ready" in lines[2]


def test_submit_wait_failed_exits_1_and_tty_uses_one_line(standin: StandIn, cli: Run, tmp_path: Path):
    (tmp_path / "j.yaml").write_text(MULTI_DOC.split("---")[0])
    standin.add("POST", JOBS, Answer(201, json=job("train-a")))
    failed = job("train-a", "Failed", reason="BackoffLimitExceeded", message="node 0 exited 1")
    standin.add("GET", f"{JOBS}train-a/", Answer(json=job("train-a", "Running")), Answer(json=failed))
    argv = _args(standin, "jobs", "submit", "-f", str(tmp_path / "j.yaml"), "--wait", "--interval", "0.01")
    result = cli(*argv, stderr_tty=True)
    assert result.code == 1
    progress, outcome = result.err.split("\n")[0], result.err.split("\n")[1]
    assert progress.count("\r\x1b[K") == 3 and "train-a: Failed" in progress
    assert outcome == "job train-a Failed: BackoffLimitExceeded: node 0 exited 1"


def test_submit_wait_inference_is_done_when_running(standin: StandIn, cli: Run, tmp_path: Path):
    (tmp_path / "j.yaml").write_text(MULTI_DOC.split("---")[0])
    serving = job("serve", "Running", type="inference", endpoint="http://serve.alpha.svc")
    standin.add("POST", JOBS, Answer(201, json=job("serve", type="inference")))
    standin.add("GET", f"{JOBS}serve/", Answer(json=serving), Answer(json=job("serve", "Failed")))
    result = cli(*_args(standin, "jobs", "submit", "-f", str(tmp_path / "j.yaml"), "--wait", "--interval", "0.01"))
    assert result.code == 0, result.err
    assert len(standin.seen("GET")) == 1
    assert "serving at http://serve.alpha.svc" in result.err


def test_submit_follow_streams_logs_then_reports(standin: StandIn, cli: Run, tmp_path: Path):
    (tmp_path / "j.yaml").write_text(MULTI_DOC.split("---")[0])
    standin.add("POST", JOBS, Answer(201, json=job("train-a")))
    standin.add(
        "GET",
        f"{JOBS}train-a/",
        Answer(json=job("train-a", "Running")),
        Answer(json=job("train-a", "Succeeded")),
    )
    standin.add("GET", f"{JOBS}train-a/logs/", Answer(chunks=["[0] hello\n", "[0] done\n"], delay=0.01))
    result = cli(*_args(standin, "jobs", "submit", "-f", str(tmp_path / "j.yaml"), "-F", "--interval", "0.01"))
    assert result.code == 0, result.err
    assert result.out.endswith("[0] hello\n[0] done\n")
    assert standin.seen("GET", f"{JOBS}train-a/logs/")[0].query == {"follow": "1"}


def test_cancel_wait_until_stopped(standin: StandIn, cli: Run):
    standin.add("POST", f"{JOBS}train-a/cancel/", Answer(202, json=job("train-a", "Running")))
    standin.add(
        "GET", f"{JOBS}train-a/", Answer(json=job("train-a", "Running")), Answer(json=job("train-a", "Cancelled"))
    )
    result = cli(*_args(standin, "jobs", "cancel", "train-a", "--wait", "--interval", "0.01"))
    assert result.code == 0, result.err
    assert result.out.splitlines() == ["job/train-a cancel requested (phase Running)", "job/train-a Cancelled"]


def test_error_envelope_exits_1_with_message_and_fields(standin: StandIn, cli: Run, tmp_path: Path):
    (tmp_path / "j.yaml").write_text(MULTI_DOC.split("---")[0])
    fields = {"spec": {"gpus": ["Ensure this value is less than or equal to 64."]}, "metadata.name": ["taken"]}
    standin.add("POST", JOBS, error(400, "spec.gpus: Ensure this value is less than or equal to 64.", fields))
    result = cli(*_args(standin, "jobs", "submit", "-f", str(tmp_path / "j.yaml")))
    assert result.code == 1
    assert result.err.splitlines() == [
        "error: spec.gpus: Ensure this value is less than or equal to 64.",
        "  metadata.name: taken",
    ]

    standin.add("GET", f"{JOBS}nope/", error(404, "No job named nope."))
    missing = cli(*_args(standin, "jobs", "get", "nope"))
    assert (missing.code, missing.err) == (1, "error: No job named nope.\n")


def test_unauthenticated_gets_a_hint(standin: StandIn, cli: Run):
    standin.add("GET", JOBS, error(401, "Authentication credentials were not provided."))
    result = cli("--url", standin.url, "jobs", "list")
    assert result.code == 1
    assert "Authentication credentials were not provided." in result.err
    assert "gryvia login" in result.err
    assert "authorization" not in standin.requests[0].headers


def test_rate_limited_request_is_retried(standin: StandIn, cli: Run):
    standin.add("GET", JOBS, Answer(429, json={"error": {"message": "slow down"}}, headers={"Retry-After": "0"}))
    standin.routes[("GET", JOBS)].append(Answer(json=page([])))
    result = cli(*_args(standin, "jobs", "list"))
    assert result.code == 0, result.err
    assert len(standin.requests) == 2


def test_connection_refused_names_the_url(cli: Run):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = cli("--url", f"http://127.0.0.1:{port}", "--api-key", KEY, "jobs", "list")
    assert result.code == 1
    assert result.err.startswith(f"error: cannot connect to Gryvia at http://127.0.0.1:{port}: connection refused")


def test_usage_errors_exit_2(cli: Run):
    assert cli("jobs").code == 2
    assert cli("jobs", "resize", "x", "--nodes", "0").code == 2
    assert cli("jobs", "list", "--phase", "Sleeping").code == 2
    assert cli("--url", "ftp://x", "jobs", "list").code == 2


def test_module_runs_without_django():
    code = (
        "import sys, gryvia_cli.main;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'apps', 'rest_framework'));"
        "print(bad)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    version = subprocess.run(
        [sys.executable, "-m", "gryvia_cli", "--version"], cwd=REPO, capture_output=True, text=True
    )
    assert version.returncode == 0 and version.stdout.startswith("gryvia ")


def test_multi_document_submit_goes_on_after_a_rejected_document(standin: StandIn, cli: Run, tmp_path: Path):
    manifest = tmp_path / "jobs.yaml"
    manifest.write_text(MULTI_DOC)
    standin.add("POST", JOBS, error(400, "metadata.name: a job named train-a exists"), _created)
    result = cli(*_args(standin, "jobs", "submit", "-f", str(manifest)))
    assert result.code == 1
    assert f"error: {manifest}, document 1 (train-a): metadata.name: a job named train-a exists" in result.err
    assert "job/train-b submitted" in result.out
    assert len(standin.seen("POST", JOBS)) == 2


def test_an_answer_that_is_not_json_is_a_clear_error(standin: StandIn, cli: Run):
    standin.add("GET", JOBS, Answer(text="<html>hello</html>", content_type="text/html"))
    result = cli(*_args(standin, "jobs", "list"))
    assert result.code == 1
    assert "not JSON" in result.err and "Traceback" not in result.err
