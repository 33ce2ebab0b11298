"""Where the CLI finds its server and credentials: flags, then environment, then the config file.

With none of these naming a server, a `make run` serving on this machine is found from the file it writes into its
data dir (`$GRYVIA_DATA_DIR/server.json`, else `var/server.json` here or in the checkout the CLI runs from), so the
CLI reaches it on whatever GRYVIA_PORT it serves; else http://127.0.0.1:8000.

The config file (`--config`, `$GRYVIA_CONFIG`, default `~/.config/gryvia/config.json`) is JSON, written
atomically with mode 0600:

    {"url": "https://gryvia.example.com", "api_key": "..."}          # after `gryvia login --api-key`
    {"url": "...", "oauth": {"access_token": ..., "refresh_token": ..., "expires_at": ..., "client_id": ...}}

Saved credentials belong to the saved `url`: when another URL is chosen (`--url`, `$GRYVIA_URL`) they are not
sent there.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .errors import ConfigError, UsageError

DEFAULT_URL = "http://127.0.0.1:8000"
ENV_URL = "GRYVIA_URL"
ENV_API_KEY = "GRYVIA_API_KEY"
ENV_TENANT = "GRYVIA_TENANT"
ENV_CONFIG = "GRYVIA_CONFIG"
ENV_DATA_DIR = "GRYVIA_DATA_DIR"
SERVER_FILE = "server.json"  # written by `manage.py serve` (apps/core/management/commands/serve.py)
CHECKOUT = Path(__file__).resolve().parent.parent  # the source tree, when installed from one (`make install`)


def default_config_path(env: Mapping[str, str] = os.environ) -> Path:
    """`$GRYVIA_CONFIG`, else `$XDG_CONFIG_HOME/gryvia/config.json`, else `~/.config/gryvia/config.json`."""
    if env.get(ENV_CONFIG):
        return Path(env[ENV_CONFIG]).expanduser()
    base = env.get("XDG_CONFIG_HOME")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".config"
    return root / "gryvia" / "config.json"


def local_server_url(env: Mapping[str, str] = os.environ) -> str | None:
    """The URL of the server running on this data dir, as it wrote it; None when none is running.

    The data dir is found as `make run` finds it: `$GRYVIA_DATA_DIR`, else `var/` (here, then in the checkout).
    A file left by a server that died (its pid gone) is ignored.
    """
    if env.get(ENV_DATA_DIR):
        candidates = [Path(env[ENV_DATA_DIR]).expanduser()]
    else:
        candidates = [Path("var"), CHECKOUT / "var"]
    for directory in candidates:
        try:
            data = json.loads((directory / SERVER_FILE).read_text(encoding="utf-8"))
            url, pid = data["url"], int(data["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(url, str) and _alive(pid):
            return url
    return None


def _alive(pid: int) -> bool:
    if pid <= 0:  # 0 and negative numbers name process groups, not a server
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except PermissionError:  # another user's process: alive
        return True
    except (OSError, OverflowError):
        return False
    return True


def normalize_url(url: str) -> str:
    """`HTTP://Host:8000/` -> `http://host:8000`; anything but an http(s) URL with a host is a usage error."""
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise UsageError(f"{url!r} is not a server URL such as https://gryvia.example.com")
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path.rstrip('/')}"


class ConfigFile:
    """The JSON config file: read leniently, written atomically with mode 0600."""

    def __init__(self, path: Path, data: dict[str, Any] | None = None) -> None:
        self.path = path
        self.data: dict[str, Any] = data or {}

    @classmethod
    def load(cls, path: Path) -> ConfigFile:
        """The file's contents; an absent file is an empty config."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(path)
        except OSError as exc:
            raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from exc
        try:
            data = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as exc:
            raise ConfigError(f"config {path} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"config {path} must hold a JSON object")
        if os.name == "posix" and path.stat().st_mode & 0o077 and ("api_key" in data or "oauth" in data):
            print(f"warning: {path} holds credentials but others can read it; run: chmod 600 {path}", file=sys.stderr)
        return cls(path, data)

    def reload(self) -> ConfigFile:
        return ConfigFile.load(self.path)

    @property
    def url(self) -> str | None:
        value = self.data.get("url")
        return value if isinstance(value, str) and value else None

    @property
    def api_key(self) -> str | None:
        value = self.data.get("api_key")
        return value if isinstance(value, str) and value else None

    @property
    def oauth(self) -> dict[str, Any] | None:
        value = self.data.get("oauth")
        return value if isinstance(value, dict) and value.get("access_token") else None

    @property
    def tenant(self) -> str | None:
        value = self.data.get("tenant")
        return value if isinstance(value, str) and value else None

    def set_credentials(
        self, url: str, *, api_key: str | None = None, oauth: dict[str, Any] | None = None, tenant: str | None = None
    ) -> None:
        """Replace whatever credential was saved with this one, for this URL."""
        self.data.pop("api_key", None)
        self.data.pop("oauth", None)
        self.data["url"] = url
        if api_key:
            self.data["api_key"] = api_key
        if oauth:
            self.data["oauth"] = oauth
        if tenant:
            self.data["tenant"] = tenant

    def clear_credentials(self) -> bool:
        """Forget the saved credential; True when there was one."""
        had = "api_key" in self.data or "oauth" in self.data
        self.data.pop("api_key", None)
        self.data.pop("oauth", None)
        return had

    def save(self) -> None:
        """Write atomically: a 0600 temporary file in the same directory, then rename over the old one."""
        directory = self.path.parent
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".config-", suffix=".tmp", dir=directory)  # created 0600
        except OSError as exc:
            raise ConfigError(f"cannot write config {self.path}: {exc.strerror or exc}") from exc
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(self.data, fh, indent=2, sort_keys=True)
                fh.write("\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except OSError as exc:
            Path(tmp).unlink(missing_ok=True)
            raise ConfigError(f"cannot write config {self.path}: {exc.strerror or exc}") from exc


@dataclass
class Settings:
    """What one invocation uses: the server, the tenant and the credential, with where each came from."""

    url: str
    config: ConfigFile
    tenant: str | None = None
    api_key: str | None = None
    oauth: dict[str, Any] | None = None
    credential_source: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def has_credential(self) -> bool:
        return bool(self.api_key or self.oauth)

    def describe_credential(self) -> str:
        """Words for the credential in use, never the secret itself."""
        if self.api_key:
            return f"an API key (from {self.credential_source})"
        if self.oauth:
            return "an OAuth sign-in (from the config file)"
        return "no credential"


def resolve(
    *,
    url: str | None = None,
    api_key: str | None = None,
    tenant: str | None = None,
    config_path: str | None = None,
    env: Mapping[str, str] = os.environ,
) -> Settings:
    """Flags beat environment variables, which beat the config file, which beats a local server's own file."""
    path = Path(config_path).expanduser() if config_path else default_config_path(env)
    config = ConfigFile.load(path)
    chosen = url or env.get(ENV_URL) or config.url or local_server_url(env) or DEFAULT_URL
    settings = Settings(url=normalize_url(chosen), config=config)
    settings.tenant = tenant or env.get(ENV_TENANT) or None
    same_server = config.url is not None and normalize_url(config.url) == settings.url
    if settings.tenant is None and same_server:
        settings.tenant = config.tenant
    if api_key:
        settings.api_key, settings.credential_source = api_key, "--api-key"
    elif env.get(ENV_API_KEY):
        settings.api_key, settings.credential_source = env[ENV_API_KEY], ENV_API_KEY
    elif same_server and config.api_key:
        settings.api_key, settings.credential_source = config.api_key, "config"
    elif same_server and config.oauth:
        settings.oauth, settings.credential_source = config.oauth, "config"
    elif config.api_key or config.oauth:
        settings.notes.append(f"the saved credential is for {config.url}, not {settings.url}")
    return settings
