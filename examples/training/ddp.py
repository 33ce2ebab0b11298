"""Distributed data-parallel training on CPU (gloo): `python3 -m examples.training.ddp [--steps N] [--fail-at-step K]`.

Each rank trains the shared linear model on its own shard of synthetic data; DDP averages the gradients. The
process group comes from the environment Gryvia (or torchrun) sets: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE.

Checkpoints go through gryvia_trainer.CheckpointManager into GRYVIA_CHECKPOINT_DIR every
GRYVIA_CHECKPOINT_INTERVAL steps (default 5), on SIGUSR1 and on the preStop hook's request file, and once more at
the end. At start the job resumes from the latest committed step when there is one (unless
GRYVIA_RESUME_IF_PRESENT=false).

`--fail-at-step K` (or GRYVIA_EXAMPLE_FAIL_AT_STEP=K) makes rank `--fail-rank` (or GRYVIA_EXAMPLE_FAIL_RANK; default
the last rank) exit 1 at step K, on the first attempt only: a marker file in the checkpoint directory records that
the failure happened, so the retried attempt resumes and finishes.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path

from gryvia_trainer import CheckpointManager
from gryvia_trainer.checkpoint import resume_enabled

from . import TRAIN_SEED, decode_state, env_int, make_data, make_model


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python3 -m examples.training.ddp", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40, help="total optimizer steps (default 40)")
    parser.add_argument("--fail-at-step", type=int, default=env_int("GRYVIA_EXAMPLE_FAIL_AT_STEP"))
    parser.add_argument("--fail-rank", type=int, default=env_int("GRYVIA_EXAMPLE_FAIL_RANK"))
    parser.add_argument("--checkpoint-dir", default=os.environ.get("GRYVIA_CHECKPOINT_DIR") or "checkpoints")
    parser.add_argument("--interval", type=int, default=env_int("GRYVIA_CHECKPOINT_INTERVAL", 5))
    parser.add_argument("--keep", type=int, default=3, help="committed checkpoints to keep")
    parser.add_argument("--samples", type=int, default=512, help="training rows per rank")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--step-sleep", type=float, default=0.05, help="seconds to pause after each step")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    if os.environ["WORLD_SIZE"] == "1":  # a lone process needs no launcher
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    dist.init_process_group("gloo", timeout=timedelta(seconds=env_int("GRYVIA_EXAMPLE_DIST_TIMEOUT", 300)))
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank} of {world} joined the gloo process group", flush=True)

    manager = CheckpointManager(args.checkpoint_dir, interval=args.interval)
    manager.install_signal_handler()
    fail_rank = world - 1 if args.fail_rank is None else args.fail_rank
    fail_marker = Path(args.checkpoint_dir) / f".example-failure-injected-rank-{rank}"
    fail_at = args.fail_at_step if rank == fail_rank and not fail_marker.exists() else None

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.5)

    # Rank 0 picks the step to resume from and every rank loads its shard of that step.
    chosen = torch.tensor([-1], dtype=torch.int64)
    if rank == 0 and resume_enabled():
        chosen[0] = -1 if (latest := manager.latest_step()) is None else latest
    dist.broadcast(chosen, src=0)
    start = int(chosen.item())
    if start >= 0:
        state = decode_state(manager.load(start))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        print(f"rank {rank} resumed from step {start}", flush=True)
    else:
        start = 0
        print(f"rank {rank} starting from step 0", flush=True)

    ddp_model = torch.nn.parallel.DistributedDataParallel(model)
    x, y = make_data(args.samples, TRAIN_SEED + rank)
    loss_fn = torch.nn.MSELoss()

    def save(step: int) -> None:
        state = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
        manager.save(step, lambda fh: torch.save(state, fh))
        manager.keep_last(args.keep)
        if rank == 0:
            print(f"rank {rank} checkpoint step {step} committed", flush=True)

    last_saved = start
    for step in range(start + 1, args.steps + 1):
        if fail_at is not None and step == fail_at:
            fail_marker.parent.mkdir(parents=True, exist_ok=True)
            fail_marker.write_text(f"{step}\n")
            print(f"rank {rank} failing at step {step} (injected failure)", flush=True)
            os._exit(1)
        batch = torch.Generator().manual_seed(TRAIN_SEED * 100_003 + rank * 10_007 + step)
        index = torch.randint(0, args.samples, (args.batch_size,), generator=batch)
        optimizer.zero_grad()
        loss = loss_fn(ddp_model(x[index]), y[index])
        loss.backward()
        optimizer.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
        manager.report_progress(step)
        if manager.should_checkpoint(step):
            save(step)
            last_saved = step
        if args.step_sleep > 0:
            time.sleep(args.step_sleep)
    if last_saved < args.steps:
        save(args.steps)
    manager.wait_for_reports(timeout=5)
    dist.destroy_process_group()
    print(f"rank {rank} done step {args.steps}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
