#!/usr/bin/env bash
# `GRYVIA_PORT=8765 make run` on an empty data dir: /healthz answers, the admin login page renders, the README's
# commands work as written (no URL or key given: the CLI finds the server from the data dir), and Ctrl-C (SIGINT to
# the foreground process group, as a terminal sends it) and SIGTERM (as a process manager sends it, to make alone)
# each leave no process behind.
set -euo pipefail
cd "$(dirname "$0")/.."
port=${SMOKE_PORT:-8765}
leader=""
fail() { echo "smoke-make-run: FAIL: $*" >&2; exit 1; }
# Whatever happens, nothing this script started outlives it.
# (errexit applies inside the trap too: a failing `kill` there, when the group is already gone, would turn a
# passing run into exit 1, so every command in it must succeed.)
trap 'if [ -n "$leader" ]; then kill -TERM -- -"$leader" 2>/dev/null || true; fi' EXIT

gryvia=.venv/bin/gryvia

# The README's ```bash block that holds $1, as written.
readme_block() {
  python3 - "$1" <<'PY'
import re, sys
blocks = re.findall(r"```bash\n(.*?)```", open("README.md").read(), re.S)
print(next(b for b in blocks if sys.argv[1] in b))
PY
}

# The README's "Run a job" commands as written: hello and the DDP example reach Succeeded; logs stream; the DDP
# loss goes down.
jobs_run() {
  local data=$1
  bash -euo pipefail -c "$(readme_block 'hello.yaml --wait')" >"$data/readme-jobs.log" 2>&1 \
    || { tail -40 "$data/readme-jobs.log"; fail "the README's Run a job commands"; }
  grep -qx '\[0\] rank 0 world 2' "$data/readme-jobs.log" && grep -qx '\[1\] rank 1 world 2' "$data/readme-jobs.log" \
    || { cat "$data/readme-jobs.log"; fail "hello logs lack the ranks"; }
  $gryvia jobs logs hello -f >"$data/hello.log" || fail "hello logs -f"
  grep -qx '\[0\] rank 0 world 2' "$data/hello.log" || { cat "$data/hello.log"; fail "hello logs -f lack the ranks"; }
  python3 - "$data/readme-jobs.log" <<'PY' || fail "ddp loss did not go down"
import re, sys
text = open(sys.argv[1]).read()
losses = [float(x) for x in re.findall(r"\[0\] rank 0 step \d+ loss ([0-9.]+)", text)]
assert "rank 1 done step 40" in text and len(losses) > 10 and losses[-1] < losses[0] / 2, losses
print(f"smoke-make-run: ddp loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} logged steps")
PY
  echo "smoke-make-run: hello and ddp Succeeded; logs -f streamed both ranks"
}

# A job still running when Gryvia stops must not outlive it.
long_job() {
  local data=$1
  cat >"$data/long.yaml" <<YAML
apiVersion: gryvia.io/v1alpha1
kind: GryviaAIJob
metadata: {name: long}
spec:
  type: training
  image: python:3.11-slim
  command: ["python3", "-c", "import os, time; open('$data/long.pid', 'w').write(str(os.getpid())); time.sleep(600)"]
YAML
  $gryvia jobs submit -f "$data/long.yaml" >/dev/null || fail "long job"
  for _ in $(seq 1 60); do [ -s "$data/long.pid" ] && break; sleep 0.5; done
  [ -s "$data/long.pid" ] || fail "long job did not start"
}

one_run() {
  local signal=$1 target=$2 data
  data=$(mktemp -d)
  env -u DATABASE_URL -u REDIS_URL GRYVIA_DATA_DIR="$data" GRYVIA_PORT=$port \
    setsid make --no-print-directory run >"$data/run.log" 2>&1 &
  leader=$!
  # `make run` may reinstall first (pip on a busy 2-core machine takes minutes): wait while it lives, up to 5 min.
  for _ in $(seq 1 600); do
    curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
    kill -0 "$leader" 2>/dev/null || break
    sleep 0.5
  done
  # Whole bodies first: `curl | grep -q` fails under pipefail when grep stops reading early.
  body=$(curl -fsS "http://127.0.0.1:$port/healthz") || { cat "$data/run.log"; fail "healthz"; }
  grep -q '"ok"' <<<"$body" || fail "healthz body"
  body=$(curl -fsS "http://127.0.0.1:$port/admin/login/") || fail "admin login page"
  grep -q 'id="id_password"' <<<"$body" || fail "admin login form"
  body=$(curl -fsS "http://127.0.0.1:$port/static/admin/css/base.css") || fail "admin stylesheet"
  grep -q "body" <<<"$body" || fail "admin stylesheet body"
  grep -q "demo API key" "$data/run.log" || fail "first-start credentials not printed"
  [ "$(stat -c %a "$data/demo-credentials.json")" = 600 ] || fail "credentials file mode"
  grep -q "Gryvia serves on http://127.0.0.1:$port" "$data/run.log" || fail "make run did not print its URL"
  # Another terminal, as the README has it: the data dir named, no URL, key or port.
  export GRYVIA_DATA_DIR="$data" GRYVIA_CONFIG="$data/cli.json"
  unset GRYVIA_URL GRYVIA_API_KEY GRYVIA_PORT
  bash -euo pipefail -c "$(readme_block 'whoami')" >"$data/readme.log" 2>&1 \
    || { cat "$data/readme.log"; fail "the README's first commands"; }
  grep -q "Logged in to http://127.0.0.1:$port" "$data/readme.log" && grep -q '^demo ' "$data/readme.log" \
    || { cat "$data/readme.log"; fail "the README's login did not reach port $port"; }
  if [ "$signal" = INT ]; then jobs_run "$data"; else long_job "$data"; fi
  if [ "$target" = group ]; then kill -"$signal" -- -"$leader"; else kill -"$signal" "$leader"; fi
  for _ in $(seq 1 40); do
    pgrep -g "$leader" >/dev/null 2>&1 || break
    sleep 0.25
  done
  if pgrep -g "$leader" >/dev/null 2>&1; then
    ps -o pid,pgid,cmd -g "$leader" || true
    fail "processes left after SIG$signal"
  fi
  if curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then fail "port $port still served"; fi
  if [ -s "$data/long.pid" ] && kill -0 "$(cat "$data/long.pid")" 2>/dev/null; then fail "a job process outlived Gryvia"; fi
  leader=""
  echo "smoke-make-run: SIG$signal to $target: healthz 200, admin login 200, no process left"
  rm -rf "$data"
}

one_run INT group
one_run TERM make
