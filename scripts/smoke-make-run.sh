#!/usr/bin/env bash
# `make run` on an empty data dir: /healthz answers, the admin login page renders, and Ctrl-C (SIGINT to the
# foreground process group, as a terminal sends it) and SIGTERM (as a process manager sends it, to make alone)
# each leave no process behind.
set -euo pipefail
cd "$(dirname "$0")/.."
port=${SMOKE_PORT:-8765}
fail() { echo "smoke-make-run: FAIL: $*" >&2; exit 1; }

one_run() {
  local signal=$1 target=$2 data
  data=$(mktemp -d)
  env -u DATABASE_URL -u REDIS_URL GRYVIA_DATA_DIR="$data" GRYVIA_PORT=$port \
    setsid make --no-print-directory run >"$data/run.log" 2>&1 &
  local leader=$!
  for _ in $(seq 1 120); do
    curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
    sleep 0.5
  done
  curl -fsS "http://127.0.0.1:$port/healthz" | grep -q '"ok"' || { cat "$data/run.log"; fail "healthz"; }
  curl -fsS "http://127.0.0.1:$port/admin/login/" | grep -q 'id="id_password"' || fail "admin login page"
  curl -fsS "http://127.0.0.1:$port/static/admin/css/base.css" | grep -q "body" || fail "admin stylesheet"
  grep -q "demo API key" "$data/run.log" || fail "first-start credentials not printed"
  [ "$(stat -c %a "$data/demo-credentials.json")" = 600 ] || fail "credentials file mode"
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
  echo "smoke-make-run: SIG$signal to $target: healthz 200, admin login 200, no process left"
  rm -rf "$data"
}

one_run INT group
one_run TERM make
