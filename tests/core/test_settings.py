"""Settings come from the environment; production refuses missing or weak secrets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STRONG = "s3cr3t-" + "x" * 20 + "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _check(tmp_path, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GRYVIA_", "SECRET_KEY", "DATABASE_URL"))}
    base.update({"GRYVIA_DATA_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "gryvia_site.settings.base", **env})
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; print(settings.DEBUG)",
        ],
        cwd=ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _pem() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "SECRET_KEY must be set in production"),
        ({"SECRET_KEY": "short"}, "SECRET_KEY is too weak"),
        ({"SECRET_KEY": STRONG}, "GRYVIA_API_KEY_PEPPER must be set"),
        ({"SECRET_KEY": STRONG, "GRYVIA_API_KEY_PEPPER": "a" * 60}, "GRYVIA_API_KEY_PEPPER is too weak"),
        ({"SECRET_KEY": STRONG, "GRYVIA_API_KEY_PEPPER": STRONG}, "GRYVIA_ENCRYPTION_KEY must be set"),
        (
            {"SECRET_KEY": STRONG, "GRYVIA_API_KEY_PEPPER": STRONG, "GRYVIA_ENCRYPTION_KEY": STRONG[1:]},
            "GRYVIA_OIDC_RSA_PRIVATE_KEY must be set",
        ),
    ],
)
def test_production_refuses_missing_or_weak_secrets(tmp_path, env, message):
    result = _check(tmp_path, GRYVIA_ENV="production", **env)
    assert result.returncode != 0 and message in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "secret_key").exists()


def test_production_starts_with_strong_secrets_and_debug_off(tmp_path):
    result = _check(
        tmp_path,
        GRYVIA_ENV="production",
        SECRET_KEY=STRONG,
        GRYVIA_API_KEY_PEPPER=STRONG[::-1],
        GRYVIA_ENCRYPTION_KEY=STRONG[1:],
        GRYVIA_OIDC_RSA_PRIVATE_KEY=_pem(),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "False"


def test_development_generates_secrets_once_with_mode_0600(tmp_path):
    assert _check(tmp_path).returncode == 0
    first = (tmp_path / "secret_key").read_text()
    assert _check(tmp_path).returncode == 0
    assert (tmp_path / "secret_key").read_text() == first
    for name in ("secret_key", "api_key_pepper", "oidc_rsa_key.pem"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o600


def test_an_unknown_backend_is_refused(tmp_path):
    result = _check(tmp_path, GRYVIA_BACKEND="nomad")
    assert result.returncode != 0 and "GRYVIA_BACKEND must be 'local' or 'kubernetes'" in result.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS": "worker-a,Worker_B"}, "not valid: 'Worker_B'"),
        ({"GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS": "worker-a,worker-a"}, "names worker-a more than once"),
        ({"GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS": ",".join(f"w{i}" for i in range(11))}, "takes at most 10"),
        ({"GRYVIA_KUEUE_NAMESPACE": "kueue system"}, "GRYVIA_KUEUE_NAMESPACE must be a namespace name"),
    ],
    ids=["not-a-dns-label", "twice", "too-many", "namespace"],
)
def test_bad_multikueue_settings_are_refused_at_startup(tmp_path, env, message):
    result = _check(tmp_path, GRYVIA_ADMISSION="kueue", **env)
    assert result.returncode != 0 and message in result.stderr, result.stderr[-2000:]


def test_multikueue_needs_kueue_admission(tmp_path):
    result = _check(tmp_path, GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS="worker-a")
    assert result.returncode != 0 and "MultiKueue needs GRYVIA_ADMISSION=kueue" in result.stderr
    ok = _check(tmp_path, GRYVIA_ADMISSION="kueue", GRYVIA_KUEUE_MULTIKUEUE_CLUSTERS=" worker-a, worker-b ")
    assert ok.returncode == 0, ok.stderr[-2000:]
