"""Reading GryviaAIJob manifests: YAML (several documents per file allowed) or JSON (an object or a list).

Each manifest keeps the body to send: a YAML document goes as its own text (`application/yaml`), so the
server sees what the user wrote; JSON goes as JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from .errors import CliError

KIND = "GryviaAIJob"
YAML_TYPE = "application/yaml"
JSON_TYPE = "application/json"


@dataclass
class Manifest:
    """One document to submit, with where it came from."""

    source: str
    index: int
    data: dict[str, Any]
    body: bytes
    content_type: str

    @property
    def name(self) -> str:
        meta = self.data.get("metadata")
        return str(meta.get("name") or "") if isinstance(meta, dict) else ""

    @property
    def label(self) -> str:
        """`job.yaml` or `job.yaml, document 2`, plus the job's name when it has one."""
        where = self.source if self.index == 0 else f"{self.source}, document {self.index}"
        return f"{where} ({self.name})" if self.name else where


def read_sources(paths: list[str], stdin: TextIO) -> list[Manifest]:
    """Every manifest in every `-f` argument (`-` is stdin), checked to be GryviaAIJob mappings."""
    manifests: list[Manifest] = []
    for path in paths:
        if path == "-":
            text, source = stdin.read(), "<stdin>"
        else:
            try:
                text, source = Path(path).read_text(encoding="utf-8"), path
            except OSError as exc:
                raise CliError(f"cannot read {path}: {exc.strerror or exc}") from exc
            except UnicodeDecodeError as exc:
                raise CliError(f"cannot read {path}: not UTF-8 text") from exc
        manifests += parse(text, source)
    if not manifests:
        raise CliError(f"no manifests in {', '.join(paths)}")
    return manifests


def parse(text: str, source: str) -> list[Manifest]:
    """The manifests in one file's text."""
    stripped = text.lstrip()
    if source.endswith(".json") or stripped.startswith(("{", "[")):
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError as exc:
            if source.endswith(".json"):
                raise CliError(f"{source}: invalid JSON: {exc}") from exc
        else:
            return _from_json(loaded, source)
    return _from_yaml(text, source)


def _check(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise CliError(f"{where}: a manifest must be a mapping, not {type(data).__name__}")
    kind = data.get("kind")
    if kind is not None and kind != KIND:
        raise CliError(f"{where}: kind {kind!r} is not {KIND}")
    return data


def _from_json(loaded: Any, source: str) -> list[Manifest]:
    items = loaded if isinstance(loaded, list) else [loaded]
    out = []
    for number, item in enumerate(items, start=1):
        index = number if isinstance(loaded, list) else 0
        where = f"{source}, item {number}" if index else source
        data = _check(item, where)
        out.append(Manifest(source, index, data, json.dumps(data).encode("utf-8"), JSON_TYPE))
    return out


def _from_yaml(text: str, source: str) -> list[Manifest]:
    documents: list[tuple[Any, str]] = []
    loader = yaml.SafeLoader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            data = loader.construct_document(node)
            if data is not None:
                documents.append((data, text[node.start_mark.index : node.end_mark.index]))
    except yaml.YAMLError as exc:
        raise CliError(f"{source}: invalid YAML: {exc}") from exc
    finally:
        loader.dispose()
    out = []
    for number, (data, piece) in enumerate(documents, start=1):
        index = number if len(documents) > 1 else 0
        _check(data, f"{source}, document {number}" if index else source)
        body = piece if _reparses_to(piece, data) else yaml.safe_dump(data, sort_keys=False)
        out.append(Manifest(source, index, data, body.encode("utf-8"), YAML_TYPE))
    return out


def _reparses_to(piece: str, data: Any) -> bool:
    """Whether a document's slice of the file stands alone (it may not, e.g. when the whole file is indented)."""
    try:
        return yaml.safe_load(piece) == data
    except yaml.YAMLError:
        return False
