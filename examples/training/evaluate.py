"""An evaluation job: `python3 -m examples.training.evaluate [--checkpoint-dir DIR] [--output metrics.json]`.

Scores the latest committed checkpoint in `--checkpoint-dir` (default GRYVIA_CHECKPOINT_DIR), or a freshly
initialised model when there is none, by its mean squared error on held-out synthetic data. Prints
`eval mse 0.0123` and writes the metrics as JSON (default `metrics.json` in the working directory).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import EVAL_SEED, load_model, make_data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m examples.training.evaluate", description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint-dir", default=os.environ.get("GRYVIA_CHECKPOINT_DIR") or None)
    parser.add_argument("--samples", type=int, default=1000, help="held-out rows")
    parser.add_argument("--output", default="metrics.json")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    model, step = load_model(args.checkpoint_dir)
    if step is not None:
        print(f"evaluating checkpoint step {step} from {args.checkpoint_dir}", flush=True)
    elif args.checkpoint_dir:
        print(f"no committed checkpoint in {args.checkpoint_dir}; evaluating a freshly initialised model", flush=True)
    else:
        print("no checkpoint directory; evaluating a freshly initialised model", flush=True)
    x, y = make_data(args.samples, EVAL_SEED)
    with torch.no_grad():
        mse = torch.nn.functional.mse_loss(model(x), y).item()
    print(f"eval mse {mse:.4f}", flush=True)
    metrics = {"mse": mse, "samples": args.samples, "checkpoint_step": step, "checkpoint_dir": args.checkpoint_dir}
    output = Path(args.output)
    output.write_text(json.dumps(metrics, indent=2) + "\n")
    print(f"wrote {output}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
