"""The errors the CLI reports: each maps to an exit status and a one-line `error: ...` on stderr."""

from __future__ import annotations

from typing import Any

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A failure to report as `error: <message>` (exit 1)."""

    exit_code = EXIT_ERROR


class UsageError(CliError):
    """The command line cannot be acted on (exit 2)."""

    exit_code = EXIT_USAGE


class ConfigError(CliError):
    """The config file cannot be read or written."""


class ConnectionFailed(CliError):
    """The server could not be reached (refused, DNS, TLS, timeout)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(
            f"cannot connect to Gryvia at {url}: {reason} (is it running? choose the server with --url or GRYVIA_URL)"
        )
        self.url = url
        self.reason = reason


class ApiError(CliError):
    """An error answer from the API, from its `{"error": {"type", "message", "fields"}}` envelope."""

    def __init__(
        self, status: int, message: str, *, type: str | None = None, fields: dict[str, Any] | None = None
    ) -> None:
        self.status = status
        self.type = type
        self.message = message
        self.fields = fields or {}
        self.hint = ""
        super().__init__(message)

    def __str__(self) -> str:
        lines = [self.message]
        # The API already names the fields in `message`; list only the field errors it left out.
        lines += [f"  {item}" for item in flatten_fields(self.fields) if item not in self.message]
        if self.hint:
            lines.append(self.hint)
        return "\n".join(lines)


def flatten_fields(detail: Any, prefix: str = "") -> list[str]:
    """`{"spec": {"gpus": ["too many"]}}` -> `["spec.gpus: too many"]`."""
    if isinstance(detail, dict):
        out: list[str] = []
        for key, value in detail.items():
            out += flatten_fields(value, f"{prefix}.{key}" if prefix else str(key))
        return out
    if isinstance(detail, list):
        out = []
        for index, value in enumerate(detail):
            nested = isinstance(value, dict | list)
            out += flatten_fields(value, f"{prefix}[{index}]" if nested else prefix)
        return out
    if not prefix or prefix == "non_field_errors":
        return [str(detail)]
    return [f"{prefix}: {detail}"]
