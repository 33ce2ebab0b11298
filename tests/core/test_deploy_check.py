"""Production passes its own deploy check, and a missing production secret is one clear line (issue 28, item 1)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

from cryptography.fernet import Fernet

from tests.core.test_settings import _pem

ROOT = Path(__file__).resolve().parents[2]


def _manage(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GRYVIA_", "SECRET_KEY"))}
    base.update({"GRYVIA_DATA_DIR": str(tmp_path), "GRYVIA_ENV": "production", **env})
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=base, capture_output=True, text=True, timeout=120
    )


def _secrets(**override: str) -> dict[str, str]:
    return {
        "SECRET_KEY": secrets.token_urlsafe(48),
        "GRYVIA_API_KEY_PEPPER": secrets.token_urlsafe(48),
        "GRYVIA_ENCRYPTION_KEY": secrets.token_urlsafe(48),
        "GRYVIA_OIDC_RSA_PRIVATE_KEY": _pem(),
        **override,
    }


def test_production_passes_check_deploy_with_no_warning(tmp_path):
    result = _manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING", **_secrets())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout, result.stdout + result.stderr


def test_hsts_ssl_redirect_and_the_proxy_header_come_from_the_environment(tmp_path):
    show = "from django.conf import settings as s; print(s.SECURE_HSTS_SECONDS, s.SECURE_SSL_REDIRECT, " + (
        "s.SECURE_PROXY_SSL_HEADER)"
    )
    env = _secrets(GRYVIA_HSTS_SECONDS="600", GRYVIA_SSL_REDIRECT="1", GRYVIA_TRUST_X_FORWARDED_PROTO="1")
    result = _manage(tmp_path, "shell", "--no-imports", "-c", show, **env)
    assert result.stdout.split() == ["600", "True", "('HTTP_X_FORWARDED_PROTO',", "'https')"], result.stderr[-2000:]


def test_a_missing_production_secret_is_one_line_not_a_traceback(tmp_path):
    result = _manage(tmp_path, "check", **_secrets(SECRET_KEY=""))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "Gryvia cannot start: SECRET_KEY must be set in production (GRYVIA_ENV=production)"
    ]


def test_a_fernet_key_is_accepted_as_the_encryption_key_and_a_short_random_string_is_not(tmp_path):
    fernet = _manage(tmp_path, "check", **_secrets(GRYVIA_ENCRYPTION_KEY=Fernet.generate_key().decode()))
    assert fernet.returncode == 0, fernet.stderr[-2000:]
    short = _manage(tmp_path, "check", **_secrets(GRYVIA_ENCRYPTION_KEY=secrets.token_urlsafe(30)))
    assert short.returncode == 1 and "GRYVIA_ENCRYPTION_KEY is too weak" in short.stderr
