"""Routing: weights, replicas that refuse connections, aliases with fallbacks, own before shared, key allowlists,
and credentials that stay encrypted."""

from __future__ import annotations

import io
import shutil
import subprocess

import httpx
import openai
import pytest
from django.core.management import call_command
from django.db import connection

from apps.llm import services as llm_services
from apps.llm.models import InferenceService, ServicePhase
from benchmarks.upstream import Upstream
from benchmarks.upstream_replies import ANY_MODEL
from tests.factories import ACTOR, make_key

from .gateway_env import external, free_port, metered

HELLO = [{"role": "user", "content": "Hello, gateway."}]
SECRET = "sk-upstream-do-not-leak-4f1c9a"


def _ready(service: InferenceService, endpoints: list[str]) -> None:
    """What the reconciler records once a managed service's replicas are ready."""
    InferenceService.objects.filter(pk=service.pk).update(
        status_phase=ServicePhase.READY,
        status_ready_replicas=len(endpoints),
        status_endpoint=endpoints[0],
        status_endpoints=endpoints,
    )
    from apps.llm import routing

    routing.routes_changed()


def test_two_upstreams_weighted_three_to_one_share_400_requests(acme, acme_key, gateway):
    with Upstream(name="a", model_ids=(ANY_MODEL,)) as a, Upstream(name="b", model_ids=(ANY_MODEL,)) as b:
        external(acme, "gpt-a", a.url, model_name="gpt", weight=300)
        external(acme, "gpt-b", b.url, model_name="gpt", weight=100)
        body = {"model": "gpt", "messages": HELLO, "max_tokens": 1}
        with httpx.Client(base_url=gateway.url, headers={"authorization": f"Bearer {acme_key}"}) as http:
            statuses = [http.post("/chat/completions", json=body).status_code for _ in range(400)]
        assert statuses == [200] * 400
        share_a, share_b = len(a.requests), len(b.requests)
    assert share_a + share_b == 400
    assert 270 <= share_a <= 330 and 70 <= share_b <= 130  # 300 and 100, within ±10 %
    rows = metered(400)
    assert {r.service for r in rows} == {"gpt-a", "gpt-b"}


def test_a_replica_refusing_connections_still_gives_a_200_metered_once(acme, llm, upstream):
    service = llm_services.inference_service_create(
        actor=ACTOR, tenant=acme, name="llama", runtime="vllm", model="meta-llama/Llama-3.1-8B-Instruct"
    )
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    _ready(service, [dead, upstream.url])
    for _ in range(6):  # the replicas take turns: half of these try the dead one first
        reply = llm.chat.completions.create(model="llama", messages=HELLO, max_tokens=2)
        assert reply.usage.completion_tokens == 2
    assert len(upstream.requests) == 6
    rows = metered(6)
    assert len(rows) == 6 and all(r.status == 200 and r.output_tokens == 2 for r in rows)
    assert len({r.request_id for r in rows}) == 6


def test_an_alias_falls_back_to_its_next_target(acme, llm, upstream):
    with Upstream(name="primary", model_ids=(ANY_MODEL,), fail_status=503) as primary:
        external(acme, "primary", primary.url)
        external(acme, "backup", upstream.url)
        dead = external(acme, "dead", f"http://127.0.0.1:{free_port()}/v1")
        llm_services.model_alias_create(actor=ACTOR, tenant=acme, name="smart", targets=["dead", "primary", "backup"])
        reply = llm.chat.completions.create(model="smart", messages=HELLO, max_tokens=2)
        assert reply.choices[0].message.content
        assert len(primary.requests) == 1 and len(upstream.requests) == 1  # dead refused, primary 503, backup served
    assert "smart" in [m.id for m in llm.models.list()]
    (row,) = metered(1)
    assert (row.model, row.service, row.status) == ("smart", "backup", 200)
    assert dead.name == "dead"


def test_a_tenants_own_model_shadows_a_shared_one(acme, llm, upstream):
    with Upstream(name="shared", model_ids=(ANY_MODEL,)) as shared:
        external(None, "gpt-shared", shared.url, model_name="gpt")
        assert llm.chat.completions.create(model="gpt", messages=HELLO).id
        assert len(shared.requests) == 1
        external(acme, "gpt", upstream.url)
        assert llm.chat.completions.create(model="gpt", messages=HELLO).id
        assert len(shared.requests) == 1 and len(upstream.requests) == 1


def test_a_model_outside_the_keys_allowlist_is_404(acme, gateway, upstream):
    external(acme, "gpt", upstream.url)
    external(acme, "other", upstream.url)
    key = make_key(acme, ["llm:invoke"], allowed_models=["gpt"])
    with openai.OpenAI(base_url=gateway.url, api_key=key, max_retries=0) as llm:
        assert [m.id for m in llm.models.list()] == ["gpt"]
        assert llm.chat.completions.create(model="gpt", messages=HELLO).id
        with pytest.raises(openai.NotFoundError) as caught:
            llm.chat.completions.create(model="other", messages=HELLO)
    assert caught.value.body["code"] == "model_not_found"
    assert len(upstream.requests) == 1


def test_the_upstream_credential_is_not_in_a_database_dump(acme, llm, upstream):
    external(acme, "gpt", upstream.url, credential=SECRET)
    llm.chat.completions.create(model="gpt", messages=HELLO)
    assert upstream.requests[0].headers["authorization"] == f"Bearer {SECRET}"  # it works...
    metered(1)
    out = io.StringIO()
    call_command("dumpdata", stdout=out)
    dump = out.getvalue()
    assert "gpt" in dump and SECRET not in dump  # ...and is stored only encrypted
    if connection.vendor == "postgresql" and shutil.which("pg_dump"):
        settings_dict = connection.settings_dict
        raw = subprocess.run(
            ["pg_dump", "-h", settings_dict["HOST"], "-U", settings_dict["USER"], settings_dict["NAME"]],
            capture_output=True,
            check=True,
        ).stdout
        assert b"credential_encrypted" in raw and SECRET.encode() not in raw
    elif connection.vendor == "sqlite":
        with open(settings_dict_name(), "rb") as db_file:
            assert SECRET.encode() not in db_file.read()


def settings_dict_name() -> str:
    return str(connection.settings_dict["NAME"])
