"""`make bench-admission-pair BASE=<rev>`: the admission benchmark of two versions of the code at the same time.

On a shared VM the same code's CPU per admission moves by tens of per cent between runs minutes apart (the host's
other tenants; docs/queueing.md, "Reading the CPU figure on a shared machine"), more than most changes are worth.
Runs of the base and of this checkout side by side see the same host, and while both run neither vCPU idles (a
process waiting on PostgreSQL otherwise pays for waking the other one), so their ratio is what the change did.

The base is checked out with `git worktree add --detach` into a temporary directory and run with this checkout's
virtual environment (`python -m` puts the worktree first on `sys.path`), so the two differ only in their code.
Each pair starts both runs at once, each on its own PostgreSQL database (`GRYVIA_BENCH_DB`: the `--db-name` prefix,
or `GRYVIA_BENCH_PAIR_DB`'s, then `_base` and `_new`), and prints their `cpu_ms_per_admission` and the ratio per
size; the two runs swap their start order from one pair to the next.

    python -m benchmarks.pair --base HEAD~1                     # 15,000 jobs, 2 pairs
    python -m benchmarks.pair --base 8d7c37f --sizes 1500 --pairs 3
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_LINE = re.compile(r"^jobs=(\d+) .*\bcpu_ms_per_admission=([0-9.]+)", re.M)


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def _start(cwd: Path, db: str, args: argparse.Namespace, log: Path) -> subprocess.Popen[str]:
    """One benchmark run; its stdout (a few lines) comes back through a pipe, its progress goes to `log` (a file, so
    that neither run can block on a full pipe while the other is waited for)."""
    env = {**os.environ, "GRYVIA_BENCH_DB": db}
    command = [sys.executable, "-m", "benchmarks.admission", "--sizes", args.sizes, "--db", args.db]
    command += ["--time-limit-s", "580"]
    with log.open("w") as err:
        return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=err, text=True)


def _figures(name: str, process: subprocess.Popen[str], log: Path) -> dict[int, float]:
    out, _ = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"the {name} run failed ({process.returncode}):\n{log.read_text()[-3000:]}")
    return {int(size): float(cpu) for size, cpu in _LINE.findall(out)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the revision to compare this checkout with")
    parser.add_argument("--sizes", default="15000", help="comma-separated job counts (benchmarks.admission)")
    parser.add_argument("--pairs", type=int, default=2, help="how many pairs of runs")
    parser.add_argument("--db", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument(
        "--db-name",
        default=os.environ.get("GRYVIA_BENCH_PAIR_DB", "gryvia_bench_pair"),
        help="prefix of the two runs' databases (_base, _new), so that two pairs can share a server",
    )
    args = parser.parse_args(argv)
    if args.pairs < 1:
        raise SystemExit("--pairs: at least 1")
    try:
        base = _git("rev-parse", "--verify", f"{args.base}^{{commit}}")
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"--base: {args.base!r} is not a revision of this repository ({exc.stderr.strip()})") from exc
    dirty = " with uncommitted changes" if _git("status", "--porcelain", "--untracked-files=no") else ""
    print(f"# base {base[:12]} against this checkout ({_git('rev-parse', '--short=12', 'HEAD')}{dirty})", flush=True)
    ratios: dict[int, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="gryvia-pair-") as scratch:
        tree = Path(scratch) / "base"
        _git("worktree", "add", "--detach", "--quiet", str(tree), base)
        try:
            for number in range(1, args.pairs + 1):
                sides = [("base", tree, f"{args.db_name}_base"), ("new", ROOT, f"{args.db_name}_new")]
                if number % 2 == 0:
                    sides.reverse()  # neither side always starts first
                logs = {name: Path(scratch) / f"{name}.log" for name, _cwd, _db in sides}
                running = {name: _start(cwd, db, args, logs[name]) for name, cwd, db in sides}
                try:
                    got = {name: _figures(name, process, logs[name]) for name, process in running.items()}
                finally:  # one run failed: the other is not left running
                    for process in running.values():
                        if process.poll() is None:
                            process.kill()
                            process.wait()
                for size in sorted(got["base"]):
                    old, new = got["base"][size], got["new"].get(size)
                    if new is None:
                        continue
                    ratios.setdefault(size, []).append(new / old)
                    print(
                        f"pair={number} jobs={size} cpu_ms_per_admission base={old:.2f} new={new:.2f} "
                        f"ratio={new / old:.3f}",
                        flush=True,
                    )
        finally:
            _git("worktree", "remove", "--force", str(tree))
    for size, values in sorted(ratios.items()):
        print(f"jobs={size} pairs={len(values)} ratio_new_over_base_mean={statistics.fmean(values):.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
