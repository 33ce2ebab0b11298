"""django-oauth-toolkit: Gryvia as an OAuth2/OIDC provider for its CLI and third-party apps."""

import os

from ..env import env_int, env_str, write_once
from .core import DATA_DIR, GRYVIA_PORT, PRODUCTION

# Where people reach Gryvia: used in links handed to them (the device flow's verification address).
GRYVIA_PUBLIC_URL = env_str("GRYVIA_PUBLIC_URL", f"http://127.0.0.1:{GRYVIA_PORT}").rstrip("/")
# Where job pods reach the control plane (checkpoint reports): in a cluster, its Service address.
GRYVIA_INTERNAL_API_URL = env_str("GRYVIA_INTERNAL_API_URL", GRYVIA_PUBLIC_URL).rstrip("/")


def _oidc_private_key() -> str:
    value = os.environ.get("GRYVIA_OIDC_RSA_PRIVATE_KEY", "")
    if value:
        return value
    if PRODUCTION:  # one key for every replica, managed as a secret
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured("GRYVIA_OIDC_RSA_PRIVATE_KEY must be set in production (GRYVIA_ENV=production)")
    path = DATA_DIR / "oidc_rsa_key.pem"
    if path.exists():
        return path.read_text()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return write_once(path, pem)


OAUTH2_PROVIDER = {
    "PKCE_REQUIRED": True,
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": _oidc_private_key(),
    "OAUTH2_VALIDATOR_CLASS": "apps.tenants.oauth.GryviaOAuth2Validator",
    "SCOPES": {
        "openid": "OpenID Connect",
        "read": "Read your tenants' objects",
        "write": "Change your tenants' objects, as your role allows",
    },
    "DEFAULT_SCOPES": ["read", "write"],
    "ACCESS_TOKEN_EXPIRE_SECONDS": env_int("GRYVIA_OAUTH_TOKEN_SECONDS", 3600),
    "ALLOWED_REDIRECT_URI_SCHEMES": ["http", "https"],
    # RFC 8628 device authorization: `gryvia login` on a machine without a browser.
    "OAUTH_DEVICE_VERIFICATION_URI": f"{GRYVIA_PUBLIC_URL}/o/device/",
}
OAUTH2_PROVIDER_ACCESS_TOKEN_MODEL = "oauth2_provider.AccessToken"
