"""External usage events (idempotent batches, durably stored), the grouped usage report (JSON and CSV), token usage
from the gateway's roll-ups, and tenant isolation."""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal

import pytest

from apps.billing import services
from apps.billing.models import LedgerEntry, UsageRecord
from apps.billing.services import ledger
from apps.llm.models import InferenceService, LlmUsageHourly
from tests.factories import client_for, make_key

from .conftest import T0, make_sku

pytestmark = pytest.mark.django_db
EVENTS = "/api/v1/usage/events/"


def _event(n: int, **kw) -> dict:
    return {"id": f"evt-{n}", "gpu_type": "H100", "gpus": 2, "start": "2026-09-03T10:00:00Z",
            "end": "2026-09-03T11:30:00Z", "job": "train", "queue": "team-a", **kw}  # fmt: skip


def test_a_batch_is_stored_once_and_resending_changes_nothing(clean_ledger, tenant_a, client_a, h100):
    first = client_a.post(EVENTS, {"events": [_event(1), _event(2), _event(1)]}, format="json")
    assert first.status_code == 200, first.content
    assert first.json() == {"accepted": 3, "new": 2, "duplicates": 1}
    record = UsageRecord.all_tenants.get(event_id="evt-1")
    assert (record.kind, record.final, record.gpu_hours, record.cost) == ("external", True, Decimal(3), Decimal("7.5"))
    again = client_a.post(EVENTS, {"events": [_event(1, gpus=8), _event(2)]}, format="json")
    assert again.json() == {"accepted": 2, "new": 0, "duplicates": 2}
    assert UsageRecord.all_tenants.count() == 2 and LedgerEntry.all_tenants.count() == 2
    assert UsageRecord.all_tenants.get(event_id="evt-1").gpus == 2
    assert ledger.verify(tenant_id=tenant_a.pk, tenant_slug="alpha").valid


def test_event_ids_are_per_tenant(clean_ledger, client_a, client_b, h100):
    assert client_a.post(EVENTS, {"events": [_event(1)]}, format="json").json()["new"] == 1
    assert client_b.post(EVENTS, {"events": [_event(1)]}, format="json").json()["new"] == 1


def test_a_bad_event_refuses_the_batch_naming_it(clean_ledger, client_a, h100):
    cases = [
        ({"id": ""}, "events[1].id"),
        ({"end": "2026-09-03T09:00:00Z"}, "events[1].end"),
        ({"start": "yesterday"}, "events[1].start"),
        ({"gpus": -1}, "events[1].gpus"),
        ({"sku": "nope"}, "events[1].sku"),
        ({"color": "red"}, "events[1].color"),
    ]
    for change, field in cases:
        response = client_a.post(EVENTS, {"events": [_event(1), _event(2, **change)]}, format="json")
        assert response.status_code == 400, change
        assert field in response.json()["error"]["fields"], response.json()
    assert UsageRecord.all_tenants.count() == 0
    assert client_a.post(EVENTS, {"events": []}, format="json").status_code == 400


def test_posting_events_needs_billing_write(tenant_a, h100):
    reader = client_for(make_key(tenant_a, ["billing:read"]))
    assert reader.post(EVENTS, {"events": [_event(1)]}, format="json").status_code == 403


def _seed(tenant_a, tenant_b):
    services.usage_events_ingest(tenant=tenant_a, events=[_event(1), _event(2, job="eval", queue="team-b")])
    services.usage_events_ingest(
        tenant=tenant_a, events=[_event(3, start="2026-09-04T10:00:00Z", end="2026-09-04T11:00:00Z")]
    )
    services.usage_events_ingest(tenant=tenant_b, events=[_event(1)])


def test_the_report_groups_and_each_tenant_sees_only_its_own(
    clean_ledger, tenant_a, tenant_b, client_a, client_b, h100
):
    _seed(tenant_a, tenant_b)
    window = "start=2026-09-01&end=2026-09-30"
    body = client_a.get(f"/api/v1/usage/?{window}&group_by=day,job").json()
    rows = [(r["day"], r["job"], r["records"], r["gpu_hours"], r["cost"]) for r in body["results"]]
    assert rows == [
        ("2026-09-03", "eval", 1, "3.000000", "7.500000"),
        ("2026-09-03", "train", 1, "3.000000", "7.500000"),
        ("2026-09-04", "train", 1, "2.000000", "5.000000"),
    ]
    assert body["totals"] == [
        {"records": 3, "open": 0, "gpu_hours": "8.000000", "input_tokens": 0, "output_tokens": 0,
         "cost": "20.000000", "currency": "USD"}
    ]  # fmt: skip
    by_queue = client_a.get(f"/api/v1/usage/?{window}&group_by=tenant,queue,sku").json()["results"]
    assert [(r["tenant"], r["queue"], r["sku"], r["records"]) for r in by_queue] == [
        ("alpha", "team-a", "h100", 2),
        ("alpha", "team-b", "h100", 1),
    ]
    assert client_b.get(f"/api/v1/usage/?{window}&group_by=tenant").json()["results"][0]["records"] == 1
    assert client_b.get(f"/api/v1/usage/?{window}&tenant=alpha").json()["results"] == []
    assert client_a.get(f"/api/v1/usage/?{window}&group_by=color").status_code == 400


def test_csv_export(clean_ledger, tenant_a, tenant_b, client_a, h100):
    _seed(tenant_a, tenant_b)
    response = client_a.get("/api/v1/usage/?start=2026-09-01&end=2026-09-30&group_by=job&format=csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [(r["job"], r["records"], r["cost"]) for r in rows] == [
        ("eval", "1", "7.500000"),
        ("train", "2", "12.500000"),
    ]
    assert list(rows[0]) == ["job", "records", "open", "gpu_hours", "input_tokens", "output_tokens", "cost", "currency"]


def test_records_are_listed_and_another_tenants_is_404(clean_ledger, tenant_a, tenant_b, client_a, client_b, h100):
    _seed(tenant_a, tenant_b)
    mine = client_a.get("/api/v1/usage/records/").json()["results"]
    assert len(mine) == 3 and {r["tenant"] for r in mine} == {"alpha"}
    uid = mine[0]["uid"]
    assert client_a.get(f"/api/v1/usage/records/{uid}/").json()["uid"] == uid
    assert client_b.get(f"/api/v1/usage/records/{uid}/").status_code == 404


def test_token_usage_comes_from_the_gateways_closed_hours(clean_ledger, tenant_a, tenant_b):
    InferenceService.objects.create(
        tenant=None, name="chat", runtime="external", model="m", model_name="chat",
        price_input_per_1m=Decimal("0.5"), price_output_per_1m=Decimal("1.5"),
    )  # fmt: skip
    InferenceService.objects.create(
        tenant=tenant_b, name="chat-b", runtime="external", model="m", model_name="chat",
        price_input_per_1m=Decimal("1"), price_output_per_1m=Decimal("1"),
    )  # fmt: skip
    for tenant, key in ((tenant_a, "k1"), (tenant_a, "k2"), (tenant_b, "k3")):
        LlmUsageHourly.objects.create(
            tenant=tenant, key_id=key, model="chat", hour=T0, input_tokens=1_000_000, output_tokens=2_000_000
        )
    LlmUsageHourly.objects.create(tenant=tenant_a, key_id="k1", model="chat", hour=T0 + dt.timedelta(hours=1))
    assert services.usage_tokens_collect(now=T0 + dt.timedelta(hours=1, minutes=5)) == 0  # the hour is not closed
    assert services.usage_tokens_collect(now=T0 + dt.timedelta(hours=1, minutes=11)) == 2
    assert services.usage_tokens_collect(now=T0 + dt.timedelta(hours=1, minutes=12)) == 0  # idempotent
    a = UsageRecord.all_tenants.get(tenant=tenant_a)
    assert (a.kind, a.job_name, a.input_tokens, a.output_tokens) == ("tokens", "llm:chat", 2_000_000, 4_000_000)
    assert a.cost == Decimal("7.000000") and a.final  # 2M x 0.5 + 4M x 1.5, the shared service's prices
    assert UsageRecord.all_tenants.get(tenant=tenant_b).cost == Decimal("3.000000")  # its own service's prices
    assert LedgerEntry.all_tenants.get(tenant=tenant_a).job == "llm:chat"


def test_an_event_naming_a_sku_is_priced_by_it(clean_ledger, tenant_a):
    make_sku("h100-spot", rate="1.25")
    services.usage_events_ingest(tenant=tenant_a, events=[_event(1, gpu_type="", sku="h100-spot")])
    assert UsageRecord.all_tenants.get().cost == Decimal("3.750000")


@pytest.mark.postgres
def test_a_key_inserted_by_someone_else_meanwhile_falls_back_to_on_conflict(clean_ledger, tenant_a, h100, monkeypatch):
    from apps.billing.services import metering

    services.usage_events_ingest(tenant=tenant_a, events=[_event(1)])
    monkeypatch.setattr(metering, "_stored_event_ids", lambda *a: set())  # as if evt-1 arrived after the lookup
    result = services.usage_events_ingest(tenant=tenant_a, events=[_event(1), _event(2)])
    assert (result.new, result.duplicates) == (1, 1)
    assert UsageRecord.all_tenants.count() == 2 and LedgerEntry.all_tenants.count() == 2
    assert ledger.verify(tenant_id=tenant_a.pk, tenant_slug="alpha").valid
