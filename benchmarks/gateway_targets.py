"""`make bench-gateway`'s targets: the stand-in upstream (`benchmarks.upstream`, its own process), LiteLLM's proxy
(installed once into var/bench/litellm-venv from PyPI) and Gryvia in its production profile (PostgreSQL database
gryvia_bench_gw, Redis db 13, `manage.py serve`), each started on a free loopback port; and the environment every
process this benchmark starts gets.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import secrets
import select
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .procstat import Processes, SetupError, free_port

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "var" / "bench"
LITELLM_VENV = BENCH_DIR / "litellm-venv"
MODEL = "fake-gpt"
UPSTREAM_KEY = "sk-standin"
PG_SERVER = "postgres://postgres@127.0.0.1:5432"
GRYVIA_DB = "gryvia_bench_gw"
GRYVIA_REDIS = "redis://127.0.0.1:6379/13"
# Not inherited by what this starts: another profile's settings, a proxy that would take loopback traffic elsewhere.
_DROPPED_ENV = re.compile(
    r"^(DATABASE_URL|REDIS_URL|DJANGO_.*|GRYVIA_.*|LITELLM_.*|VIRTUAL_ENV|PYTHONPATH|.*_PROXY)$", re.I
)


@dataclass
class Target:
    name: str
    url: str  # the OpenAI base URL, …/v1
    key: str
    pid: int  # root of the process tree whose CPU is measured


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def stop_all(procs: Processes) -> None:
    for name, left in procs.stop_all():
        if name == "upstream":  # its last line has its request count and its CPU seconds
            log(f"{name}: {left}")


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not _DROPPED_ENV.match(k)}
    return env | {"NO_PROXY": "127.0.0.1,localhost", "PYTHONUNBUFFERED": "1"} | extra


def start_upstream(procs: Processes) -> str:
    """The stand-in on a port it picks; returns its /v1 URL."""
    argv = [sys.executable, "-m", "benchmarks.upstream", "--port", "0", "--models", MODEL]
    proc = procs.start("upstream", argv, env=child_env(), pipe_out=True)
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    if not (match := re.search(r"listening on (\S+)", line)):
        raise SetupError(f"the stand-in upstream did not start ({line.strip()!r}); {procs.tail('upstream')}")
    return match.group(1)


def ensure_litellm(procs: Processes) -> str:
    """LiteLLM's proxy in its own venv, installed from PyPI unless a working one is there; returns how it went."""
    python = LITELLM_VENV / "bin" / "python"
    code = "import importlib.metadata as m, litellm.proxy.proxy_cli; print(m.version('litellm'))"
    probe = functools.partial(
        subprocess.run, [str(python), "-c", code], capture_output=True, text=True, env=child_env()
    )
    if python.exists():
        found = probe()
        if found.returncode == 0:
            return f"litellm {found.stdout.strip()} (reused {LITELLM_VENV.relative_to(ROOT)})"
        log(f"litellm: {LITELLM_VENV} does not import ({found.stderr.strip()[-200:]}); reinstalling")
        shutil.rmtree(LITELLM_VENV)
    log("litellm: pip install 'litellm[proxy]' into a new venv (about a minute)")
    started = time.monotonic()
    LITELLM_VENV.parent.mkdir(parents=True, exist_ok=True)
    install = [python, "-m", "pip", "install", "--disable-pip-version-check", "litellm[proxy]"]
    if (
        subprocess.run([sys.executable, "-m", "venv", LITELLM_VENV]).returncode
        or procs.run("litellm-install", install, env=child_env()).returncode
    ):
        shutil.rmtree(LITELLM_VENV, ignore_errors=True)
        raise SetupError(f"installing litellm[proxy] from PyPI failed; {procs.tail('litellm-install')}")
    elapsed = time.monotonic() - started
    if (found := probe()).returncode:
        raise SetupError(f"litellm installed but does not import: {found.stderr.strip()[-500:]}")
    return f"litellm {found.stdout.strip()} (installed in {elapsed:.0f} s)"


def start_litellm(procs: Processes, upstream_url: str, workdir: Path) -> tuple[Target, str]:
    key = "sk-" + secrets.token_hex(24)  # LiteLLM refuses publicly known master keys such as sk-1234
    config = workdir / "litellm.yaml"
    config.write_text(
        f"model_list:\n  - model_name: {MODEL}\n    litellm_params:\n      model: openai/{MODEL}\n"
        f"      api_base: {upstream_url}\n      api_key: {UPSTREAM_KEY}\n"
        "general_settings:\n  master_key: os.environ/LITELLM_MASTER_KEY\n"
        "litellm_settings:\n  telemetry: false\n"
    )
    port = free_port()
    env = child_env(LITELLM_MASTER_KEY=key, LITELLM_LOCAL_MODEL_COST_MAP="True")
    argv = [LITELLM_VENV / "bin" / "litellm", "--config", config, "--host", "127.0.0.1", "--port", port]
    proc = procs.start("litellm", argv, env=env)
    took = procs.wait_http("litellm", proc, f"http://127.0.0.1:{port}/health/liveliness", 300)
    return Target("litellm", f"http://127.0.0.1:{port}/v1", key, proc.pid), f"up in {took:.0f} s"


def _pg_admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql)


def start_gryvia(procs: Processes, upstream_url: str, workdir: Path, cleanup: contextlib.ExitStack):
    """Gryvia's production profile against the stand-in, as the gateway's bench contract (benchmarks/README.md)."""
    import redis

    python = ROOT / ".venv" / "bin" / "python"
    data_dir = workdir / "gryvia-data"
    data_dir.mkdir()
    env = child_env(
        DJANGO_SETTINGS_MODULE="gryvia_site.settings.base",
        DATABASE_URL=f"{PG_SERVER}/{GRYVIA_DB}",
        REDIS_URL=GRYVIA_REDIS,
        GRYVIA_DATA_DIR=str(data_dir),
        GRYVIA_ENV="development",
        GRYVIA_DEBUG="0",
    )
    try:
        _pg_admin(f'DROP DATABASE IF EXISTS "{GRYVIA_DB}" WITH (FORCE)')
        _pg_admin(f'CREATE DATABASE "{GRYVIA_DB}"')
        cleanup.callback(_pg_admin, f'DROP DATABASE IF EXISTS "{GRYVIA_DB}" WITH (FORCE)')
        store = redis.Redis.from_url(GRYVIA_REDIS, socket_connect_timeout=5)
        store.flushdb()
        cleanup.callback(store.flushdb)
        cleanup.callback(stop_all, procs)  # LIFO: the servers stop before the database is dropped
    except Exception as exc:  # noqa: BLE001 - any driver error means the same thing here
        raise SetupError(f"gryvia needs PostgreSQL on 127.0.0.1:5432 and Redis on :6379: {exc}") from exc
    if procs.run("gryvia-migrate", [python, "manage.py", "migrate", "--noinput"], env=env).returncode:
        raise SetupError(f"gryvia: migrate failed; {procs.tail('gryvia-migrate')}")
    setup = [python, "manage.py", "llm_bench_setup", "--upstream-url", upstream_url, "--model", MODEL]
    if procs.run("gryvia-setup", setup + ["--upstream-key", UPSTREAM_KEY], env=env).returncode:
        text = procs.log_text("gryvia-setup")
        if "Unknown command" in text:
            raise SetupError("gryvia: `manage.py llm_bench_setup` does not exist yet; run --targets direct,litellm")
        raise SetupError(f"gryvia: llm_bench_setup failed; {procs.tail('gryvia-setup')}")
    keys = re.findall(r"^key=(\S+)$", procs.log_text("gryvia-setup"), re.M)
    if not keys:
        raise SetupError(f"gryvia: llm_bench_setup printed no `key=...` line; {procs.tail('gryvia-setup')}")
    port = free_port()
    proc = procs.start("gryvia", [python, "manage.py", "serve", "--host", "127.0.0.1", "--port", port], env=env)
    took = procs.wait_http("gryvia", proc, f"http://127.0.0.1:{port}/healthz", 120)
    return Target("gryvia", f"http://127.0.0.1:{port}/v1", keys[-1], proc.pid), f"up in {took:.0f} s"
