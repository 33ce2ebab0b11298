"""The processes a benchmark starts, and the CPU time and memory of a whole process tree from procfs (Linux).

`Processes` starts each server in its own session with its output in a log file, waits until it answers HTTP, and
stops every one (SIGTERM to its process group, then SIGKILL).

A tree is a root pid and every live process whose ppid chain leads to it. Its CPU is the sum over those processes of
utime + stime (all of a process's threads) and cutime + cstime (children that exited and were waited for), so a
worker that a server started and reaped still counts. Not counted: a descendant re-parented away from the tree
(its parent exited first, so init or a subreaper adopted it), and one that exits between two reads of a sample.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    """A TCP port free on loopback now (another process could still take it before the server binds it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class SetupError(Exception):
    """Something could not be installed or started; the message says why and where its log is."""


class Processes:
    """Everything a benchmark starts, each in its own session so that Ctrl-C reaches only the benchmark."""

    def __init__(self, *, cwd: Path, log_dir: Path) -> None:
        self.cwd, self.log_dir = cwd, log_dir
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def _log(self, name: str):
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return open(self.log_dir / f"{name}.log", "wb")

    def start(self, name: str, argv: list, *, env: dict, pipe_in: bool = False, pipe_out: bool = False):
        """A running process (text pipes when asked); stderr, and stdout unless piped, go to `<name>.log`."""
        with self._log(name) as log:
            proc = subprocess.Popen(
                [str(a) for a in argv],
                cwd=self.cwd,
                env=env,
                stdin=subprocess.PIPE if pipe_in else subprocess.DEVNULL,
                stdout=subprocess.PIPE if pipe_out else log,
                stderr=log,
                text=True,
                start_new_session=True,
            )
        self.procs.append((name, proc))
        return proc

    def run(self, name: str, argv: list, *, env: dict) -> subprocess.CompletedProcess:
        """Run to the end, output to `<name>.log`."""
        with self._log(name) as out:
            return subprocess.run([str(a) for a in argv], cwd=self.cwd, env=env, stdout=out, stderr=subprocess.STDOUT)

    def log_text(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def tail(self, name: str, lines: int = 15) -> str:
        text = self.log_text(name).splitlines()[-lines:]
        return f"last lines of {self.log_dir / name}.log:\n  " + "\n  ".join(text)

    def wait_http(self, name: str, proc: subprocess.Popen, url: str, timeout_s: float) -> float:
        """Seconds until GET url answers 200; SetupError when the process exits first or the time is up."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never an HTTP proxy
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if proc.poll() is not None:
                raise SetupError(f"{name} exited with status {proc.returncode} before answering; {self.tail(name)}")
            with contextlib.suppress(OSError), opener.open(url, timeout=2) as reply:
                if reply.status == 200:
                    return time.monotonic() - started
            time.sleep(0.25)
        raise SetupError(f"{name} did not answer {url} within {timeout_s:.0f} s; {self.tail(name)}")

    def stop_all(self) -> list[tuple[str, str]]:
        """Stop them, last started first; returns (name, what it had left on its stdout pipe)."""
        left = []
        for name, proc in reversed(self.procs):
            for sig, wait_s in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(wait_s)
                    break
            if proc.stdout is not None:
                left.append((name, proc.stdout.read().strip()))
        self.procs.clear()
        return left


def _read_all() -> dict[int, tuple[int, int, int]]:
    """pid -> (ppid, CPU ticks of the process and its reaped children, resident pages) for every process."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                data = stat.read()
        except OSError:  # it exited meanwhile
            continue
        # The command name is in parentheses and may contain spaces and ")": split after the last one.
        fields = data[data.rindex(b")") + 2 :].split()
        ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime, stime, cutime, cstime (fields 14-17)
        table[int(name)] = (int(fields[1]), ticks, int(fields[21]))  # ppid (field 4), rss in pages (field 24)
    return table


def tree_pids(root: int, table: dict[int, tuple[int, int, int]] | None = None) -> list[int]:
    """The root (when alive) and its live descendants."""
    table = _read_all() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (ppid, _ticks, _rss) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, pending = [], [root] if root in table else []
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending.extend(children.get(pid, ()))
    return found


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) used so far by the tree under `root`, reaped children included."""
    table = _read_all()
    return sum(table[pid][1] for pid in tree_pids(root, table)) / CLK_TCK


def tree_rss_mb(root: int) -> float:
    """Resident memory of the tree's live processes, in MiB (shared pages counted once per process)."""
    table = _read_all()
    return sum(table[pid][2] for pid in tree_pids(root, table)) * PAGE_SIZE / 2**20
