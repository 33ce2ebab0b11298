"""An inference server: `python3 -m examples.training.serve [--port P] [--checkpoint-dir DIR]`.

Listens on 0.0.0.0:$PORT (default 8000) with the standard library's ThreadingHTTPServer:

    GET  /healthz                          200 {"status": "ok", "checkpoint_step": S or null}
    POST /predict {"x": [f1, ..., f8]}     200 {"y": [y]}
    POST /predict {"x": [[...], [...]]}    200 {"y": [y1, y2]}

The model is the latest committed checkpoint in `--checkpoint-dir` (default GRYVIA_CHECKPOINT_DIR) when there is
one, else the fixed initial weights. Every request is logged to stderr; SIGTERM (or Ctrl-C) stops it cleanly.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import FEATURES, load_model

MAX_BODY = 1 << 20


class Predictor:
    def __init__(self, model: Any, step: int | None) -> None:
        self.model = model
        self.step = step
        self._lock = threading.Lock()

    def predict(self, rows: list[list[float]]) -> list[float]:
        import torch

        with self._lock, torch.no_grad():
            return self.model(torch.tensor(rows, dtype=torch.float32)).squeeze(1).tolist()


def _rows(x: Any) -> list[list[float]]:
    """One row of FEATURES numbers, or a list of such rows; ValueError otherwise."""

    def is_number(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool)

    if isinstance(x, list) and x and all(is_number(v) for v in x):
        x = [x]
    if not isinstance(x, list) or not x:
        raise ValueError(f'"x" must be a list of {FEATURES} numbers or a non-empty list of such lists')
    for row in x:
        if not (isinstance(row, list) and len(row) == FEATURES and all(is_number(v) for v in row)):
            raise ValueError(f'each row of "x" must be {FEATURES} numbers')
    return [[float(v) for v in row] for row in x]


def make_handler(predictor: Predictor) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "gryvia-example-serve/0.1"
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.split("?", 1)[0] == "/healthz":
                self._send(200, {"status": "ok", "checkpoint_step": predictor.step})
            else:
                self._send(404, {"error": f"no route {self.path}"})

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.split("?", 1)[0] != "/predict":
                self._send(404, {"error": f"no route {self.path}"})
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if not 0 < length <= MAX_BODY:
                self.close_connection = True
                self._send(400 if length <= 0 else 413, {"error": "send a JSON body of at most 1 MiB"})
                return
            try:
                payload = json.loads(self.rfile.read(length))
                if not isinstance(payload, dict):
                    raise ValueError("the body must be a JSON object")
                rows = _rows(payload.get("x"))
            except ValueError as exc:  # json.JSONDecodeError is a ValueError
                self._send(400, {"error": str(exc)})
                return
            self._send(200, {"y": predictor.predict(rows)})

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
            print(f"serve: {self.address_string()} {format % args}", file=sys.stderr, flush=True)

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m examples.training.serve", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT") or 8000))
    parser.add_argument("--checkpoint-dir", default=os.environ.get("GRYVIA_CHECKPOINT_DIR") or None)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    model, step = load_model(args.checkpoint_dir)
    model.eval()
    server = ThreadingHTTPServer((args.host, args.port), make_handler(Predictor(model, step)))
    server.daemon_threads = True

    def stop(signum: int, _frame: Any) -> None:
        print(f"serve: {signal.Signals(signum).name} received, stopping", file=sys.stderr, flush=True)
        threading.Thread(target=server.shutdown, daemon=True).start()  # shutdown() from this thread would deadlock

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    source = f"checkpoint step {step} from {args.checkpoint_dir}" if step is not None else "fixed initial weights"
    print(f"serving on http://{args.host}:{server.server_address[1]} ({source})", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    print("serve: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
