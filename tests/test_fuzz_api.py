"""schemathesis over the whole /api/v1/ schema, against a live server on loopback: no operation answers a 5xx
(a 503 only where the operation documents it).

Every operation gets `EXAMPLES` cases per generation mode (data that fits the schema, and data that does not), from a
fixed seed (`derandomize`), each sent twice where the path names objects: once with generated identifiers, once
with those of a real object of its kind (tests/tenant_kinds.py), so bodies and queries also reach code past the
lookup. The credential is a platform admin key: it reaches every operation, including the platform's own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

from apps.core.api.throttling import CredentialRateThrottle
from tests.factories import make_key, make_tenant
from tests.tenant_kinds import make_every_kind, owner_of, placeholders

pytestmark = [pytest.mark.fuzz, pytest.mark.django_db(transaction=True)]

EXAMPLES = 5  # per operation, generation mode and kind of identifier: the whole run stays within CI's budget
WRITES = {"POST", "PUT", "PATCH", "DELETE"}
# Query parameters held fixed, by operation. A followed log streams until its job ends, and these jobs never start:
# the request would wait forever (following is tested in tests/jobs/test_local_e2e.py).
FIXED_QUERY = {"GET /api/v1/jobs/{name}/logs/": {"follow": "false"}}


@dataclass
class Run:
    """What the fuzzing sent and what came back."""

    sent: int = 0
    statuses: dict[str, set[int]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    skipped_own: int = 0


def _settings():
    return settings(
        max_examples=EXAMPLES,
        derandomize=True,  # the fixed seed: the same cases on every run
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure is reported as it was found
        suppress_health_check=list(HealthCheck),
    )


def _fuzz(operation, strategy, run: Run, *, session, base_url: str, auth: dict[str, str], own: set[str]) -> None:
    label = f"{operation.method.upper()} {operation.path}"

    @given(case=strategy)
    @_settings()
    def send(case) -> None:
        # The fuzzing key must outlive the run: its own key and tenant are never written to. Revoking the requesting
        # key is refused without ?self=true, but `self` is in the schema and the fuzzer sends it, and a platform key
        # could delete or suspend its own tenant.
        if case.method.upper() in WRITES and own & {str(v) for v in case.path_parameters.values()}:
            run.skipped_own += 1
            return
        response = case.call(base_url=base_url, session=session, headers=auth, timeout=60)
        run.sent += 1
        run.statuses.setdefault(label, set()).add(response.status_code)
        documented = str(response.status_code) in operation.definition.raw.get("responses", {})
        if response.status_code >= 500 and not (response.status_code == 503 and documented):
            run.errors.append(f"{label} -> {response.status_code}: {case.as_curl_command(headers=auth)}")

    send()


def test_no_operation_answers_a_server_error(live_server, monkeypatch, caplog):
    # A rate above anything this run sends: the throttle has its own tests, and a 429 here would hide the rest.
    monkeypatch.setitem(CredentialRateThrottle.THROTTLE_RATES, "credential", "1000000/min")  # GRYVIA_API_RATE
    tenant = make_tenant("fuzz")
    key = make_key(tenant, ["admin"], platform=True, name="fuzz")
    own = {tenant.slug, key.split("_")[1]}
    auth = {"Authorization": f"Bearer {key}"}

    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/v1/schema/")
    operations = [result.ok() for result in schema.get_all_operations()]
    # Objects of every kind in another tenant, for the cases that address real ones.
    owned = make_every_kind(make_tenant("fuzzed"), [op.path for op in operations])
    # Deletes last, so the other operations still find the objects.
    operations.sort(key=lambda op: (op.method.upper() == "DELETE", op.path))

    run = Run()
    with requests.Session() as session:
        for operation in operations:
            owner = owner_of(operation.path, owned) if placeholders(operation.path) else None
            query = FIXED_QUERY.get(f"{operation.method.upper()} {operation.path}")
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                strategies = [operation.as_strategy(generation_mode=mode, query=query)]
                if owner is not None:
                    real = dict(zip(_names(operation.path), owner.values, strict=False))
                    strategies.append(operation.as_strategy(generation_mode=mode, path_parameters=real, query=query))
                for strategy in strategies:
                    _fuzz(operation, strategy, run, session=session, base_url=live_server.url, auth=auth, own=own)

    logged = [r for r in caplog.records if r.name == "django.request" and r.levelno >= logging.ERROR]
    tracebacks = [logging.Formatter().format(r) for r in logged[:3]]
    assert run.errors == [], "\n".join(run.errors + tracebacks)
    # The run reached every operation, and the key stayed valid throughout (a 401 would mean it lost it).
    assert set(run.statuses) == {f"{op.method.upper()} {op.path}" for op in operations}
    assert not any(401 in codes for codes in run.statuses.values()), run.statuses
    assert run.sent >= len(operations) * EXAMPLES


def _names(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{") and part.endswith("}")]
