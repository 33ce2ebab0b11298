"""`gryvia models …`: against the stand-in server, and a round trip against the real app (live server)."""

from __future__ import annotations

import json

import pytest

from tests.factories import make_key, make_tenant

from .conftest import Run, page
from .standin import Answer, StandIn, error
from .test_cli import _args

SERVICES = "/api/v1/inference-services/"
GPT = {
    "name": "gpt",
    "tenant": "alpha",
    "shared": False,
    "runtime": "external",
    "model_name": "gpt",
    "replicas": 1,
    "has_credential": True,
    "status": {"phase": "Ready", "message": "", "ready_replicas": 0, "endpoint": "", "observed_generation": 1},
}
TINY = {
    **GPT,
    "name": "tiny-chat",
    "tenant": None,
    "shared": True,
    "runtime": "llamacpp",
    "model_name": "tiny-chat",
    "replicas": 2,
    "status": {**GPT["status"], "ready_replicas": 1, "phase": "Degraded"},
}
MANIFEST = """\
apiVersion: gryvia.io/v1alpha1
kind: GryviaInferenceService
metadata:
  name: gpt
spec:
  runtime: external
  model: gpt-4o-mini
  url: https://api.example.com/v1
---
apiVersion: gryvia.io/v1alpha1
kind: GryviaModelAlias
metadata:
  name: fast
spec:
  targets: [gpt, tiny-chat]
"""


def test_list_shows_owner_runtime_phase_and_ready_replicas(standin: StandIn, cli: Run):
    standin.add("GET", SERVICES, Answer(json=page([GPT, TINY])))
    result = cli(*_args(standin, "models", "list"))
    assert result.code == 0, result.err
    header, gpt, tiny = result.out.splitlines()
    assert header.split() == ["NAME", "MODEL", "RUNTIME", "TENANT", "PHASE", "READY"]
    assert gpt.split() == ["gpt", "gpt", "external", "alpha", "Ready", "-"]
    assert tiny.split() == ["tiny-chat", "tiny-chat", "llamacpp", "(shared)", "Degraded", "1/2"]


def test_apply_creates_what_is_missing_and_patches_what_exists(standin: StandIn, cli: Run, tmp_path, monkeypatch):
    path = tmp_path / "models.yaml"
    path.write_text(MANIFEST)
    monkeypatch.setenv("UPSTREAM_KEY", "sk-from-env")
    standin.add("GET", f"{SERVICES}gpt/", Answer(json=GPT))
    standin.add("PATCH", f"{SERVICES}gpt/", Answer(json=GPT))
    standin.add("GET", "/api/v1/model-aliases/fast/", error(404, "model alias 'fast' not found"))
    standin.add("POST", "/api/v1/model-aliases/", Answer(status=201, json={"name": "fast", "targets": []}))
    result = cli(*_args(standin, "models", "apply", "-f", str(path), "--credential-env", "UPSTREAM_KEY"))
    assert result.code == 0, result.err
    assert result.out.splitlines() == ["inferenceservice/gpt configured", "modelalias/fast created"]
    patch = standin.seen("PATCH")[0].json()
    assert patch["metadata"] == {} and patch["spec"]["credential"] == "sk-from-env"
    assert standin.seen("POST")[0].json()["metadata"] == {"name": "fast"}
    assert "sk-from-env" not in result.out + result.err


def test_apply_refuses_other_kinds_and_a_missing_env(standin: StandIn, cli: Run, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("apiVersion: gryvia.io/v1alpha1\nkind: GryviaAIJob\nmetadata: {name: x}\n")
    result = cli(*_args(standin, "models", "apply", "-f", str(path)))
    assert result.code == 1 and "GryviaInferenceService" in result.err
    path.write_text(MANIFEST)
    result = cli(*_args(standin, "models", "apply", "-f", str(path), "--credential-env", "NOT_SET_ANYWHERE"))
    assert result.code == 2 and "NOT_SET_ANYWHERE" in result.err and not standin.requests


def test_delete_needs_yes_without_a_terminal(standin: StandIn, cli: Run):
    result = cli(*_args(standin, "models", "delete", "gpt"))
    assert result.code == 2 and not standin.requests
    standin.add("DELETE", f"{SERVICES}gpt/", Answer(status=204))
    result = cli(*_args(standin, "models", "delete", "gpt", "--yes"))
    assert result.code == 0 and result.out == "inferenceservice/gpt deleted\n"


def test_aliases_create_posts_targets_in_order(standin: StandIn, cli: Run):
    standin.add("POST", "/api/v1/model-aliases/", Answer(status=201, json={"name": "fast"}))
    result = cli(*_args(standin, "models", "aliases", "create", "fast", "--target", "b", "--target", "a", "--shared"))
    assert result.code == 0, result.err
    assert standin.seen("POST")[0].json() == {"name": "fast", "targets": ["b", "a"], "shared": True}


@pytest.mark.django_db(transaction=True)
def test_round_trip_against_the_real_app(live_server, cli: Run, tmp_path):
    from apps.llm.models import InferenceService, ModelAlias

    tenant = make_tenant("cli-models")
    key = make_key(tenant, ["models:write"])
    base = ["--url", live_server.url, "--api-key", key]
    path = tmp_path / "models.yaml"
    path.write_text(MANIFEST)
    created = cli(*base, "models", "apply", "-f", str(path))
    assert created.code == 0, created.err
    assert created.out.splitlines() == ["inferenceservice/gpt created", "modelalias/fast created"]

    path.write_text(MANIFEST.replace("gpt-4o-mini", "gpt-4o").replace("[gpt, tiny-chat]", "[tiny-chat]"))
    again = cli(*base, "models", "apply", "-f", str(path), "-o", "json")
    assert again.code == 0, again.err
    service, alias = json.loads(again.out)
    assert service["model"] == "gpt-4o" and service["generation"] == 2 and alias["targets"] == ["tiny-chat"]

    listed = cli(*base, "models", "list", "-o", "json")
    assert [s["name"] for s in json.loads(listed.out)] == ["gpt"]
    got = cli(*base, "models", "get", "gpt")
    assert got.code == 0 and got.out.splitlines()[1].split()[:4] == ["gpt", "gpt", "external", "cli-models"]
    aliases = cli(*base, "models", "aliases", "list")
    assert aliases.out.splitlines()[1].split() == ["fast", "tiny-chat", "cli-models"]

    bad = cli(*base, "models", "aliases", "create", "loop", "--target", "loop")
    assert bad.code == 1 and "itself" in bad.err
    assert cli(*base, "models", "aliases", "delete", "fast", "--yes").code == 0
    assert cli(*base, "models", "delete", "gpt", "--yes").code == 0
    assert not InferenceService.objects.exists() and not ModelAlias.objects.exists()
    missing = cli(*base, "models", "get", "gpt")
    assert missing.code == 1 and "not found" in missing.err
