"""The CLI finds the server `make run` started, on whatever port (issue 27, items 4 and 11).

`manage.py serve` writes its URL into the data dir; the CLI reads it when no flag, variable or saved login names a
server. The README's first commands, run as they are written, work against a server on a port that is not 8000.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from gryvia_cli.config import DEFAULT_URL, ConfigFile, resolve
from tests.jobs.restarts import PYTHON, free_port, kill_session, start, stop, wait_for

ROOT = Path(__file__).resolve().parents[2]
EMBEDDED = not os.environ.get("DATABASE_URL")


def _server_file(data: Path, url: str, pid: int) -> None:
    data.mkdir(parents=True, exist_ok=True)
    (data / "server.json").write_text(json.dumps({"url": url, "pid": pid}))


def test_the_url_comes_from_flags_then_env_then_login_then_the_running_server(tmp_path, config_path):
    data = tmp_path / "data"
    _server_file(data, "http://127.0.0.1:8765", os.getpid())  # a live pid: this process
    env = {"GRYVIA_DATA_DIR": str(data), "GRYVIA_CONFIG": str(config_path)}
    assert resolve(env=env).url == "http://127.0.0.1:8765"
    assert resolve(env={**env, "GRYVIA_URL": "http://127.0.0.1:9001"}).url == "http://127.0.0.1:9001"
    assert resolve(url="http://127.0.0.1:9002", env=env).url == "http://127.0.0.1:9002"
    saved = ConfigFile(config_path)
    saved.set_credentials("http://127.0.0.1:9003", api_key="gry_x_y")
    saved.save()
    assert resolve(env=env).url == "http://127.0.0.1:9003"  # a logged-in context wins over the local server


def test_without_gryvia_data_dir_the_cli_looks_in_var_as_make_run_writes_it(tmp_path, config_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the checkout, where `make run` keeps var/ when GRYVIA_DATA_DIR is unset
    _server_file(tmp_path / "var", "http://127.0.0.1:8765", os.getpid())
    assert resolve(env={"GRYVIA_CONFIG": str(config_path)}).url == "http://127.0.0.1:8765"


def test_a_server_file_left_by_a_dead_server_or_another_data_dir_is_not_used(tmp_path, config_path):
    data = tmp_path / "data"
    dead = subprocess.Popen(["true"])
    dead.wait()
    _server_file(data, "http://127.0.0.1:8765", dead.pid)
    env = {"GRYVIA_DATA_DIR": str(data), "GRYVIA_CONFIG": str(config_path)}
    assert resolve(env=env).url == DEFAULT_URL
    _server_file(data, "http://127.0.0.1:8765", os.getpid())
    assert resolve(env={**env, "GRYVIA_DATA_DIR": str(tmp_path / "other")}).url == DEFAULT_URL
    (data / "server.json").write_text("{not json")
    assert resolve(env=env).url == DEFAULT_URL


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _readme_first_commands() -> str:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return next(b for b in blocks if "gryvia login" in b and "whoami" in b)


@pytest.mark.skipif(
    not EMBEDDED,
    reason="the embedded profile's own test (its server runs on SQLite whatever the suite's profile): run once",
)
def test_the_readme_commands_work_unchanged_against_make_run_on_another_port(tmp_path):
    data, port = tmp_path / "var", free_port()
    # The suite's own GRYVIA_* settings stay out: the README's reader has only the data dir.
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("GRYVIA_") and k not in ("DATABASE_URL", "REDIS_URL")
    }
    env["GRYVIA_DATA_DIR"] = str(data)
    server_env = {**env, "GRYVIA_PORT": str(port)}
    # What `make run` does, on a port of its own.
    for step in (["migrate", "--noinput"], ["bootstrap"]):
        subprocess.run([PYTHON, "manage.py", *step], cwd=ROOT, env=server_env, check=True, capture_output=True)
    log = tmp_path / "serve.log"
    server = start([PYTHON, "manage.py", "serve"], env=server_env, log=log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("the server's URL", lambda: (data / "server.json").exists() and url in log.read_text(), log=log)
        assert json.loads((data / "server.json").read_text()) == {"url": url, "pid": server.pid}
        # Another terminal: the data dir named, but no port, URL or key.
        shell = {**env, "GRYVIA_CONFIG": str(tmp_path / "cli.json")}
        wait_for("the server", lambda: _answers(f"{url}/healthz"), log=log)
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", _readme_first_commands()],
            cwd=ROOT,
            env=shell,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"Logged in to {url}" in done.stdout and re.search(r"^demo\b", done.stdout, re.M), done.stdout
        stop(server, signal.SIGTERM)
        assert not (data / "server.json").exists()  # a stopped server is not advertised
    finally:
        kill_session(server)
