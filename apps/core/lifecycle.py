"""What the apps add to the process's lifecycle: `manage.py bootstrap`'s steps and actions, what `manage.py serve`
does when it stops, and /readyz's checks.

Core owns these registries; each app fills them in its AppConfig.ready(), so core's commands and probes run the
apps' parts without importing them (docs/architecture.md, Registries).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

__all__ = [
    "BootstrapAction",
    "BootstrapStep",
    "NotReady",
    "bootstrap_actions",
    "bootstrap_steps",
    "readiness_checks",
    "register_bootstrap_action",
    "register_bootstrap_step",
    "register_readiness_check",
    "register_serve_stop",
    "serve_stop_hooks",
]


@dataclass(frozen=True)
class BootstrapStep:
    """Part of every `manage.py bootstrap` run (idempotent), run in `order`; it writes what it did to `out`."""

    name: str
    run: Callable[[TextIO], None]
    order: int


@dataclass(frozen=True)
class BootstrapAction:
    """A `manage.py bootstrap --<name>` flag that does this one thing instead of the steps."""

    name: str
    run: Callable[[TextIO], None]
    help_text: str


@dataclass(frozen=True)
class NotReady:
    """What a readiness check found not ready: the problem line, and the items listed under `key` in /readyz."""

    problem: str
    key: str
    items: list[dict[str, Any]] = field(default_factory=list)


_bootstrap_steps: dict[str, BootstrapStep] = {}
_bootstrap_actions: dict[str, BootstrapAction] = {}
_serve_stop_hooks: dict[str, Callable[[], None]] = {}
_readiness_checks: dict[str, Callable[[], NotReady | None]] = {}


def register_bootstrap_step(name: str, run: Callable[[TextIO], None], *, order: int) -> None:
    """Run `run(out)` in every `manage.py bootstrap`, after the steps of lower `order`."""
    _bootstrap_steps[name] = BootstrapStep(name=name, run=run, order=order)


def bootstrap_steps() -> list[BootstrapStep]:
    return sorted(_bootstrap_steps.values(), key=lambda step: (step.order, step.name))


def register_bootstrap_action(name: str, run: Callable[[TextIO], None], *, help_text: str) -> None:
    """`manage.py bootstrap --<name>` runs `run(out)` alone (the actions exclude each other)."""
    _bootstrap_actions[name] = BootstrapAction(name=name, run=run, help_text=help_text)


def bootstrap_actions() -> list[BootstrapAction]:
    return list(_bootstrap_actions.values())


def register_serve_stop(name: str, hook: Callable[[], None]) -> None:
    """Call `hook()` when `manage.py serve` stops, after the server and the ticker (in registration order)."""
    _serve_stop_hooks[name] = hook


def serve_stop_hooks() -> list[Callable[[], None]]:
    return list(_serve_stop_hooks.values())


def register_readiness_check(name: str, check: Callable[[], NotReady | None]) -> None:
    """/readyz asks `check()` once the database answers; what it returns makes the server not ready (503)."""
    _readiness_checks[name] = check


def readiness_checks() -> list[Callable[[], NotReady | None]]:
    return list(_readiness_checks.values())
