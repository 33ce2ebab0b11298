"""apps.core.prepared: a fixed read compiled once per connection, its rows exactly the QuerySet's (both databases)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import Count, F, Window
from django.db.models.fields.json import KT
from django.db.models.functions import RowNumber
from django.test.utils import CaptureQueriesContext

from apps.core.prepared import PreparedRead
from apps.jobs import admission_inputs
from apps.jobs.models import Job
from tests.factories import make_tenant
from tests.jobs.factories import make_job

pytestmark = pytest.mark.django_db


def _query():
    return (
        Job.all_tenants.filter(finalized=False)
        .annotate(rank=Window(RowNumber(), partition_by=[F("tenant_id")], order_by=F("pk").asc()))
        .annotate(n=Window(Count("id"), partition_by=[F("tenant_id")]))
        .values_list("uid", "name", "spec", "created_at", "rank", "n")
        .annotate(ttl=KT("spec__ttlSecondsAfterFinished"))
        .order_by("pk")
    )


def test_rows_are_the_querysets_rows_and_the_query_is_built_once():
    tenant = make_tenant()
    make_job(tenant, ttlSecondsAfterFinished=30)
    builds = []

    def build():
        builds.append(1)
        return _query()

    read = PreparedRead(build)
    assert read.rows() == list(_query())
    make_job(tenant)  # a later call runs the statement again: it sees rows written since
    with CaptureQueriesContext(connection) as queries:
        rows = read.rows()
    assert rows == list(_query())
    assert len(rows) == 2
    assert isinstance(rows[0][2], dict) and rows[0][-1] in (30, "30")  # JSON decoded as the ORM decodes it
    assert rows[0][3].tzinfo is not None
    assert len(builds) == 1
    assert len(queries) == 1  # through Django's execute path: query logs and execute wrappers see it


def test_an_empty_table_gives_no_rows():
    assert PreparedRead(_query).rows() == []


def test_only_values_list_querysets_are_taken():
    with pytest.raises(TypeError, match="values_list"):
        PreparedRead(lambda: Job.all_tenants.all()).rows()
    with pytest.raises(TypeError, match="values_list"):
        PreparedRead(lambda: Job.all_tenants.values_list("pk", flat=True)).rows()


def test_the_admission_reads_match_their_querysets():
    tenant = make_tenant()
    for _ in range(3):
        make_job(tenant)
    heads = admission_inputs.waiting_heads(2)
    expected = list(admission_inputs._waiting_heads_query(2))
    assert [d.job_id for d in heads.demands] == [row[0] for row in expected]
    assert len(heads.demands) == 2 and heads.counts == {(tenant.pk, "default"): 3}
    assert [row.pk for row in admission_inputs.active()] == [row[1] for row in admission_inputs._active_query()]
