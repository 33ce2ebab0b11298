"""Small typed readers for environment variables, and the data directory with its generated secrets.

Settings are chosen by environment only: the same code runs the embedded and the production profile.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
import string
from pathlib import Path
from typing import NoReturn

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent.parent


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from exc


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {raw!r}")


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]


def data_dir() -> Path:
    path = Path(env_str("GRYVIA_DATA_DIR", str(BASE_DIR / "var"))).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def is_weak_secret(value: str, *, min_length: int = 50, min_unique: int = 5, fernet_key_ok: bool = False) -> bool:
    """Django's own rule for SECRET_KEY (security.W009), applied to every server secret. With `fernet_key_ok`, a
    `Fernet.generate_key()` value (32 random bytes, url-safe base64: 44 characters, 256 bits) also passes."""
    if value.startswith("django-insecure-") or len(set(value)) < min_unique:
        return True
    return len(value) < min_length and not (fernet_key_ok and is_fernet_key(value))


def is_fernet_key(value: str) -> bool:
    try:
        return len(value) == 44 and len(base64.urlsafe_b64decode(value.encode())) == 32
    except (binascii.Error, ValueError):
        return False


def refuse_to_start(message: str) -> NoReturn:
    """Stop a process whose configuration cannot work, with one line on stderr (exit status 1), not a traceback:
    settings are read before anything else, so this reaches `manage.py`, uvicorn and Celery alike."""
    raise SystemExit(f"Gryvia cannot start: {message}")


def secret_from_env_or_file(env_name: str, file_name: str, *, production: bool, fernet_key_ok: bool = False) -> str:
    """Read a server secret from the environment, or generate it once into the data dir (mode 0600).

    In production the secret must come from the environment and must be strong: generating one per pod would give
    each replica a different key.
    """
    value = env_str(env_name)
    if value:
        if production and is_weak_secret(value, fernet_key_ok=fernet_key_ok):
            accepted = " (or a Fernet.generate_key() value)" if fernet_key_ok else ""
            refuse_to_start(
                f"{env_name} is too weak for production: use at least 50 characters with at least 5 distinct "
                f"ones{accepted}"
            )
        return value
    if production:
        refuse_to_start(f"{env_name} must be set in production (GRYVIA_ENV=production)")
    path = data_dir() / file_name
    if path.exists():
        return path.read_text().strip()
    alphabet = string.ascii_letters + string.digits
    return write_once(path, "".join(secrets.choice(alphabet) for _ in range(64)) + "\n").strip()


def write_once(path: Path, content: str) -> str:
    """Create `path` (mode 0600) with `content` unless it exists, and return what it holds. Processes that start
    together on a new data dir (`make worker` and `make beat`) all get the one that was written first, whole: it
    appears by a hard link of a complete file, never half-written."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(content)
    try:
        os.link(tmp, path)
    except FileExistsError:
        content = path.read_text()
    finally:
        tmp.unlink()
    return content
