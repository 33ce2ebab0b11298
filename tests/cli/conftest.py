"""Fixtures for the CLI tests: an isolated config and environment, the stand-in API, an in-process runner."""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gryvia_cli.main import main

from .standin import StandIn

KEY = "gvk_test_secret_key_1234567890"


class Stream(io.StringIO):
    """A captured standard stream that can pretend to be a terminal and records when each write happened."""

    def __init__(self, initial: str = "", *, tty: bool = False) -> None:
        super().__init__(initial)
        self.tty = tty
        self.writes: list[tuple[float, str]] = []

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> int:
        self.writes.append((time.monotonic(), text))
        return super().write(text)


@dataclass
class Result:
    code: int
    out: str
    err: str
    stdout: Stream
    stderr: Stream


Run = Callable[..., Result]


@pytest.fixture(autouse=True)
def config_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Each test has its own config file and none of the caller's GRYVIA_* or proxy settings."""
    path = tmp_path / "gryvia" / "config.json"
    monkeypatch.setenv("GRYVIA_CONFIG", str(path))
    for name in ("GRYVIA_URL", "GRYVIA_API_KEY", "GRYVIA_TENANT"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return path


@pytest.fixture
def standin() -> Iterator[StandIn]:
    server = StandIn().start()
    yield server
    server.stop()


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Run:
    """`cli(*argv, stdin="", stdin_tty=False, stderr_tty=False)` runs `gryvia` in-process."""

    def run(*argv: str, stdin: str = "", stdin_tty: bool = False, stderr_tty: bool = False) -> Result:
        out, err, inp = Stream(), Stream(tty=stderr_tty), Stream(stdin, tty=stdin_tty)
        with monkeypatch.context() as m:
            m.setattr(sys, "stdout", out)
            m.setattr(sys, "stderr", err)
            m.setattr(sys, "stdin", inp)
            code = main(list(argv))
        return Result(code, out.getvalue(), err.getvalue(), out, err)

    return run


def job(name: str, phase: str = "Pending", *, type: str = "training", **status: Any) -> dict[str, Any]:
    """A job object as the API answers it."""
    return {
        "apiVersion": "gryvia.io/v1alpha1",
        "kind": "GryviaAIJob",
        "metadata": {
            "name": name,
            "tenant": "alpha",
            "uid": f"uid-{name}",
            "generation": 1,
            "creationTimestamp": "2024-05-01T12:00:00Z",
        },
        "spec": {"type": type, "image": "ghcr.io/acme/train:1", "gpus": 8},
        "status": {
            "phase": phase,
            "reason": "",
            "message": "",
            "conditions": [],
            "attempts": 1,
            "restarts": {"0": 0},
            "currentNodes": 0,
            "readyNodes": 0,
            "gpusAllocated": 0,
            "lastCheckpointStep": None,
            "endpoint": "",
            "observedGeneration": 1,
            **status,
        },
    }


def page(results: list[Any], *, next: str | None = None, count: int | None = None) -> dict[str, Any]:
    return {"count": len(results) if count is None else count, "next": next, "previous": None, "results": results}
