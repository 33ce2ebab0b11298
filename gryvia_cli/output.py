"""Rendering answers: aligned tables for people, JSON and YAML for programs."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

import yaml

FORMATS = ("table", "json", "yaml")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(value: Any) -> str:
    """A cell or message safe to put on a terminal: no control characters (escape sequences from the server)."""
    if value is None:
        return "-"
    text = str(value).replace("\r\n", "\n").replace("\n", " ").replace("\t", " ")
    return _CONTROL.sub("?", text)


def emit(data: Any, fmt: str, stream: TextIO) -> None:
    """Write `data` as JSON or YAML (`table` callers render themselves)."""
    if fmt == "json":
        stream.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    elif fmt == "yaml":
        stream.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True))
    else:  # pragma: no cover - a programming error
        raise ValueError(f"unknown format {fmt!r}")
    stream.flush()


def emit_many(items: Sequence[Any], fmt: str, stream: TextIO) -> None:
    """One object alone, several as a JSON list or a stream of YAML documents."""
    if len(items) == 1:
        emit(items[0], fmt, stream)
    elif fmt == "yaml":
        stream.write(yaml.safe_dump_all(items, sort_keys=False, default_flow_style=False, allow_unicode=True))
        stream.flush()
    else:
        emit(list(items), fmt, stream)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, max_width: int = 80) -> str:
    """Columns padded to their widest cell, three spaces apart; the last column is not padded."""
    cells = [[clean(c) for c in row] for row in rows]
    for row in cells:
        row[-1] = row[-1] if len(row[-1]) <= max_width else row[-1][: max_width - 3] + "..."
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    lines = []
    for row in [list(headers), *cells]:
        padded = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])] + [row[-1]]
        lines.append("   ".join(padded).rstrip())
    return "\n".join(lines) + "\n"


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 timestamp from the API (`Z` or an offset), or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def duration(seconds: float) -> str:
    """`42s`, `3m05s`, `2h07m`, `3d4h`."""
    seconds = max(int(seconds), 0)
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h"


def age(value: Any, now: datetime | None = None) -> str:
    """kubectl-style age of a timestamp: `45s`, `12m`, `5h`, `3d`."""
    when = parse_time(value)
    if when is None:
        return "-"
    seconds = max(int(((now or datetime.now(UTC)) - when).total_seconds()), 0)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 2 * 3600:
        return f"{seconds // 60}m"
    if seconds < 2 * 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def when(value: Any, now: datetime | None = None) -> str:
    """`2024-05-01 12:00:03 UTC (5m ago)`, or `-`."""
    parsed = parse_time(value)
    if parsed is None:
        return "-"
    return f"{parsed.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC ({age(value, now)} ago)"


# -- jobs ------------------------------------------------------------------------------------------------

JOB_COLUMNS = ("NAME", "TYPE", "PHASE", "QUEUE", "POSITION", "NODES", "GPUS", "AGE", "REASON")


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _index_order(item: tuple[Any, Any]) -> tuple[int, str]:
    key = str(item[0])
    return (int(key), "") if key.isdigit() else (1 << 30, key)


def job_nodes(job: dict[str, Any]) -> str:
    """`ready/wanted`: ready nodes out of the nodes now in effect (or the spec's count before it runs)."""
    status, spec = job.get("status") or {}, job.get("spec") or {}
    distributed = spec.get("distributed") or {}
    if distributed.get("enabled"):
        planned = (distributed.get("elastic") or {}).get("desiredNodes") or distributed.get("nodes")
    else:
        planned = None
    wanted = status.get("currentNodes") or planned or 1
    return f"{status.get('readyNodes') or 0}/{wanted}"


def job_row(job: dict[str, Any], now: datetime | None = None) -> list[Any]:
    status = job.get("status") or {}
    return [
        _get(job, "metadata", "name"),
        _get(job, "spec", "type"),
        status.get("phase"),
        status.get("queueName") or _get(job, "spec", "queueName") or "default",
        f"{status['queuePosition']}/{status.get('queueLength')}" if status.get("queuePosition") else "-",
        job_nodes(job),
        status.get("gpusAllocated") if status.get("gpusAllocated") is not None else 0,
        age(_get(job, "metadata", "creationTimestamp"), now),
        status.get("reason") or "",
    ]


def jobs_table(jobs: Sequence[dict[str, Any]], now: datetime | None = None) -> str:
    return table(JOB_COLUMNS, [job_row(job, now) for job in jobs])


def job_summary(job: dict[str, Any], now: datetime | None = None) -> str:
    """What `jobs get` shows a person: identity, spec essentials, status, conditions."""
    meta, spec, status = job.get("metadata") or {}, job.get("spec") or {}, job.get("status") or {}
    distributed = spec.get("distributed") or {}
    elastic = distributed.get("elastic") or {}
    nodes = f"{status.get('readyNodes') or 0} ready of {job_nodes(job).split('/')[1]}"
    if elastic:
        nodes += f" (elastic: min {elastic.get('minNodes')}, desired {elastic.get('desiredNodes') or '-'}"
        nodes += f", max {distributed.get('nodes')})"
    restarts = status.get("restarts") or {}
    checkpoint = status.get("lastCheckpointStep")
    fields: list[tuple[str, Any]] = [
        ("Name", meta.get("name")),
        ("Tenant", meta.get("tenant")),
        ("UID", meta.get("uid")),
        ("Type", spec.get("type")),
        ("Image", spec.get("image")),
        ("Created", when(meta.get("creationTimestamp"), now)),
        ("Phase", status.get("phase")),
        ("Reason", status.get("reason") or "-"),
        ("Message", status.get("message") or "-"),
        ("Started", when(status.get("startTime"), now)),
        ("Completed", when(status.get("completionTime"), now)),
        ("Attempts", status.get("attempts")),
        ("Nodes", nodes),
        ("GPUs", status.get("gpusAllocated") if status.get("gpusAllocated") is not None else 0),
        ("Restarts", " ".join(f"{k}:{v}" for k, v in sorted(restarts.items(), key=_index_order)) or "-"),
        ("Checkpoint step", checkpoint if checkpoint is not None else "-"),
        ("Endpoint", status.get("endpoint") or "-"),
        ("Generation", f"{meta.get('generation')} (observed {status.get('observedGeneration')})"),
    ]
    width = max(len(label) for label, _ in fields) + 2
    lines = [f"{label + ':':<{width}}{clean(value)}" for label, value in fields]
    conditions = status.get("conditions") or []
    lines.append("Conditions:" if conditions else "Conditions:" + " " * (width - 11) + "-")
    if conditions:
        rows = [
            [
                c.get("type"),
                c.get("status"),
                c.get("reason") or "",
                age(c.get("lastTransitionTime"), now),
                c.get("message"),
            ]
            for c in conditions
        ]
        block = table(("TYPE", "STATUS", "REASON", "AGE", "MESSAGE"), rows)
        lines += ["  " + line for line in block.splitlines()]
    return "\n".join(lines) + "\n"


def events_table(events: Sequence[dict[str, Any]], now: datetime | None = None) -> str:
    rows = [[age(e.get("time"), now), e.get("type"), e.get("reason"), e.get("message")] for e in events]
    return table(("AGE", "TYPE", "REASON", "MESSAGE"), rows, max_width=200)


def tenants_table(tenants: Sequence[dict[str, Any]]) -> str:
    rows = [
        [t.get("slug"), t.get("display_name") or "", t.get("namespace"), _get(t, "status", "phase")] for t in tenants
    ]
    return table(("TENANT", "DISPLAY NAME", "NAMESPACE", "PHASE"), rows)
