"""What a command handler gets: the resolved settings, the standard streams and a lazily built API client."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TextIO

from .client import Client, OAuthTokens
from .config import Settings
from .output import clean


@dataclass
class Context:
    """One invocation's settings and streams; `client()` builds the API client on first use."""

    settings: Settings
    stdout: TextIO
    stderr: TextIO
    stdin: TextIO
    _main: Client | None = None
    _clients: list[Client] = field(default_factory=list)

    def client(self) -> Client:
        """The client for the chosen server, credential and tenant (one per invocation)."""
        if self._main is None:
            self._main = self.make_client(api_key=self.settings.api_key, oauth=self._oauth())
        return self._main

    def make_client(self, *, api_key: str | None = None, oauth: OAuthTokens | None = None, **kw: Any) -> Client:
        """Another client for this server (e.g. to try a credential before saving it); closed with the context."""
        client = Client(self.settings.url, api_key=api_key, oauth=oauth, tenant=self.settings.tenant, **kw)
        self._clients.append(client)
        return client

    def _oauth(self) -> OAuthTokens | None:
        if self.settings.api_key or not self.settings.oauth:
            return None
        config = self.settings.config

        def save(tokens: dict[str, Any]) -> None:
            fresh = config.reload()
            fresh.data["oauth"] = tokens
            fresh.save()

        def reload() -> dict[str, Any] | None:
            fresh = config.reload()
            return fresh.oauth if fresh.url == config.url else None

        return OAuthTokens(self.settings.oauth, save=save, reload=reload)

    def say(self, text: str) -> None:
        """A line for the person on stdout."""
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def warn(self, text: str) -> None:
        """A line on stderr (progress, notes, per-item errors)."""
        self.stderr.write(clean(text) + "\n")
        self.stderr.flush()

    def close(self) -> None:
        for client in self._clients:
            client.close()
        self._clients.clear()
        self._main = None
