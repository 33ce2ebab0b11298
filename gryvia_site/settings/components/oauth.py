"""django-oauth-toolkit: Gryvia as an OAuth2/OIDC provider for its CLI and third-party apps."""

import os

from ..env import env_int, env_str, refuse_to_start, write_once
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
        refuse_to_start("GRYVIA_OIDC_RSA_PRIVATE_KEY must be set in production (GRYVIA_ENV=production)")
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


# The grants Gryvia serves: authorization code (PKCE S256 required), the device flow, client credentials, and the
# refresh of what they issued. The validator (apps.tenants.oauth) refuses every other grant and response type, and
# discovery advertises exactly these.
GRYVIA_OAUTH_GRANT_TYPES = [
    "authorization_code",
    "urn:ietf:params:oauth:grant-type:device_code",
    "client_credentials",
    "refresh_token",
]

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
    # `http` stays for RFC 8252 loopback redirects of native clients (the gryvia CLI listens on 127.0.0.1): the
    # validator refuses an http redirect to any other host. Hence oauth2_provider.W008 is silenced in core.py.
    "ALLOWED_REDIRECT_URI_SCHEMES": ["http", "https"],
    # RFC 8628 device authorization: `gryvia login` on a machine without a browser.
    "OAUTH_DEVICE_VERIFICATION_URI": f"{GRYVIA_PUBLIC_URL}/o/device/",
    # RFC 9700 (OAuth 2.0 Security BCP), enforced rather than warned about: no implicit or password grant, PKCE S256
    # only, no access token in a query string, the RFC 9207 `iss` in authorization responses, access and refresh
    # tokens stored as SHA-256 digests only (a read of the database yields no usable token), and a replayed refresh
    # token revokes its whole family. The config gates turn a regression of these settings into an error.
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
    "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,
    "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    "COMPLIANT_BCP_RFC9700_REFRESH_TOKEN": True,
    "COMPLIANT_BCP_RFC9700_REDIRECT_URI_MATCHING": True,
    "COMPLIANT_BCP_RFC9700_PKCE_REQUIRED": True,
    # Discovery (RFC 8414 and OpenID) names only what is served.
    "OAUTH2_RESPONSE_TYPES_SUPPORTED": ["code"],
    "OIDC_RESPONSE_TYPES_SUPPORTED": ["code"],
    "OAUTH2_GRANT_TYPES_SUPPORTED": GRYVIA_OAUTH_GRANT_TYPES,
}
OAUTH2_PROVIDER_ACCESS_TOKEN_MODEL = "oauth2_provider.AccessToken"
