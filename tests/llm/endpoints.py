"""Contract registrations for /api/v1/inference-services/ and /api/v1/model-aliases/ (addressed by name).

Only tenant-owned objects are made here: shared ones (tenant null) are visible to every tenant by design, and
tests/llm/test_api.py covers them. /api/v1/usage/llm/ is a report with no objects of its own (no detail path, no
writes), and the OpenAI-compatible /v1/ gateway authenticates and answers in OpenAI's shapes: both are outside
this contract (tests/llm/test_usage_api.py, tests/llm/test_gateway_*.py).
"""

import itertools

from apps.llm import services
from apps.llm.models import InferenceService, ModelAlias
from tests.api_contract import Endpoint, register
from tests.factories import ACTOR

_seq = itertools.count(1)
_EXTERNAL = {"runtime": "external", "model": "gpt-4o-mini", "url": "https://api.example.com/v1"}


def make_inference_service(tenant) -> str:
    return services.inference_service_create(actor=ACTOR, tenant=tenant, name=f"svc{next(_seq)}", **_EXTERNAL).name


def make_model_alias(tenant) -> str:
    return services.model_alias_create(actor=ACTOR, tenant=tenant, name=f"alias{next(_seq)}", targets=["gpt"]).name


register(
    Endpoint(
        name="inference-services",
        model=InferenceService,
        list_path=lambda t: "/api/v1/inference-services/",
        detail_path=lambda t, i: f"/api/v1/inference-services/{i}/",
        make=make_inference_service,
        read_scope="models:read",
        write_scope="models:write",
        create_payload=lambda t: {"name": f"new{next(_seq)}", **_EXTERNAL},
        update_payload={"weight": 3},
        deletes=True,
        read_only_scopes=["models:read"],
        id_field=("name",),
    )
)

register(
    Endpoint(
        name="model-aliases",
        model=ModelAlias,
        list_path=lambda t: "/api/v1/model-aliases/",
        detail_path=lambda t, i: f"/api/v1/model-aliases/{i}/",
        make=make_model_alias,
        read_scope="models:read",
        write_scope="models:write",
        create_payload=lambda t: {"name": f"new-alias{next(_seq)}", "targets": ["gpt", "llama"]},
        update_payload={"targets": ["llama"]},
        deletes=True,
        read_only_scopes=["models:read"],
        id_field=("name",),
    )
)
