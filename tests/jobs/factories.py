"""Job specs and jobs for tests."""

from __future__ import annotations

import copy
import itertools

from apps.jobs import services
from tests.factories import ACTOR

_seq = itertools.count(1)

HELLO_YAML = """\
apiVersion: gryvia.io/v1alpha1
kind: GryviaAIJob
metadata:
  name: hello
spec:
  type: training
  image: python:3.11-slim
  gpus: 0
  timeout: "10m"
  distributed: {enabled: true, nodes: 2, backend: gloo}
  command: ["python3", "-c", "import os; print('rank', os.environ['RANK'], 'world', os.environ['WORLD_SIZE'])"]
"""

HELLO_SPEC = {
    "type": "training",
    "image": "python:3.11-slim",
    "gpus": 0,
    "timeout": "10m",
    "distributed": {"enabled": True, "nodes": 2, "backend": "gloo"},
    "command": ["python3", "-c", "import os; print('rank', os.environ['RANK'], 'world', os.environ['WORLD_SIZE'])"],
}


def spec(**overrides) -> dict:
    out = copy.deepcopy(HELLO_SPEC)
    out.update(overrides)
    return out


def make_job(tenant, name: str | None = None, **overrides):
    return services.job_create(actor=ACTOR, tenant=tenant, name=name or f"job{next(_seq)}", spec=spec(**overrides))
