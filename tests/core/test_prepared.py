"""apps.core.db.prepared: a fixed read compiled once per connection, its rows exactly the QuerySet's."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import Count, F, Window
from django.db.models.fields.json import KT
from django.db.models.functions import RowNumber
from django.test.utils import CaptureQueriesContext

from apps.core.db.prepared import Arg, PreparedRead, int_array_literal, reuse_built
from apps.jobs.admission import inputs as admission_inputs
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
    assert sorted(d.job_id for d in heads.demands) == sorted(row[0] for row in expected)
    assert len(heads.demands) == 2 and heads.counts == {(tenant.pk, "default"): 3}
    assert [row.pk for row in admission_inputs.active()] == [row[1] for row in admission_inputs._active_query()]


def test_any_of_takes_a_list_as_one_parameter_in_any_queryset():
    tenant = make_tenant()
    jobs = [make_job(tenant) for _ in range(3)]
    pks = [jobs[0].pk, jobs[2].pk]
    assert sorted(Job.all_tenants.filter(pk__any_of=pks).values_list("pk", flat=True)) == pks
    assert list(Job.all_tenants.filter(pk__any_of=[])) == []
    uids = [jobs[1].uid]
    assert list(Job.all_tenants.filter(uid__any_of=uids).values_list("pk", flat=True)) == [jobs[1].pk]
    assert list(Job.all_tenants.filter(tenant_id__any_of={tenant.pk}).values_list("pk", flat=True).order_by("pk")) == [
        j.pk for j in jobs
    ]
    sql, params = Job.all_tenants.filter(pk__any_of=list(range(500))).query.sql_with_params()
    assert len(params) == 1  # not one placeholder per value
    with pytest.raises(TypeError, match="any_of takes a list"):
        Job.all_tenants.filter(pk__any_of=5)


def test_arguments_are_given_at_each_call_and_checked():
    from apps.core.db.prepared import Arg, model_fields

    tenant = make_tenant()
    jobs = [make_job(tenant) for _ in range(3)]
    read = PreparedRead(
        lambda: Job.all_tenants.filter(pk__any_of=Arg("pks")).order_by("pk").values_list(*model_fields(Job))
    )
    loaded = read.models(Job, pks=[jobs[2].pk, jobs[0].pk])
    assert [job.pk for job in loaded] == [jobs[0].pk, jobs[2].pk]
    fresh = Job.all_tenants.get(pk=jobs[0].pk)
    assert all(getattr(loaded[0], f) == getattr(fresh, f) for f in model_fields(Job))
    assert not loaded[0]._state.adding and loaded[0]._state.db == "default"
    assert read.models(Job, pks=[]) == []
    with pytest.raises(TypeError, match="missing argument"):
        read.rows()


def test_models_of_a_partial_read_defer_the_other_fields():
    from apps.core.db.prepared import model_fields

    tenant = make_tenant()
    job = make_job(tenant)
    names = model_fields(Job, only={"name", "id", "tenant_id"})
    assert sorted(names) == ["id", "name", "tenant_id"]
    [partial] = PreparedRead(lambda: Job.all_tenants.values_list(*names)).models(Job)
    assert (partial.pk, partial.name) == (job.pk, job.name)
    assert "spec" in partial.get_deferred_fields() and partial.spec == job.spec  # loads on access
    with pytest.raises(TypeError, match="field order"):
        PreparedRead(lambda: Job.all_tenants.values_list("name", "id")).models(Job)


def test_json_columns_decode_as_the_orm_decodes_them_big_integers_included():
    tenant = make_tenant()
    job = make_job(tenant)
    odd = {"big": 2**70, "nested": [{"a": 1.5}, None, "é"], "empty": {}}
    big = {"n": -(2**64), "m": 2**63}
    Job.all_tenants.filter(pk=job.pk).update(placement=odd, restarts={"0": 2}, allocated_nodes=[2**65], request=big)
    names = ("pk", "placement", "restarts", "allocated_nodes", "spec", "request")
    [row] = PreparedRead(lambda: Job.all_tenants.values_list(*names)).rows()
    assert row == tuple(Job.all_tenants.values_list(*names).get())
    assert row[1]["big"] == 2**70 and type(row[1]["big"]) is int
    assert row[2] == {"0": 2} and row[3] == [2**65] and type(row[3][0]) is int
    assert row[5] == {"n": -(2**64), "m": 2**63} and all(type(v) is int for v in row[5].values())


def test_models_are_the_orms_instances_and_receivers_get_their_signals():
    from django.db.models.signals import post_init

    from apps.core.db.prepared import _fast_init, model_fields

    tenant = make_tenant()
    job = make_job(tenant)
    read = PreparedRead(lambda: Job.all_tenants.values_list(*model_fields(Job)))
    [fast] = read.models(Job)
    orm = Job.all_tenants.get(pk=job.pk)
    assert _fast_init(Job)
    assert {k: v for k, v in vars(fast).items() if k != "_state"} == {
        k: v for k, v in vars(orm).items() if k != "_state"
    }
    assert fast.tenant == tenant and fast.get_deferred_fields() == set()
    fast.name = "renamed"
    fast.save(update_fields=["name"])  # an instance loaded from the database: an UPDATE, not an INSERT
    assert Job.all_tenants.get(pk=job.pk).name == "renamed"
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance.pk)

    post_init.connect(receiver, sender=Job)
    try:
        assert not _fast_init(Job)
        read.models(Job)  # through Model.__init__, so the receiver sees it
    finally:
        post_init.disconnect(receiver, sender=Job)
    assert seen == [job.pk]


def test_built_reuses_what_it_built_for_a_row_that_did_not_change():
    tenant = make_tenant()
    first, second = make_job(tenant), make_job(tenant)
    read = PreparedRead(_query)
    made = []

    def make(*row):
        made.append(row[1])
        return list(row)  # a fresh object per build, so reuse shows as identity

    before = read.built(make)
    assert before == [list(row) for row in _query()]  # make(*row) of each converted row, in order
    assert made == [first.name, second.name]
    Job.all_tenants.filter(pk=second.pk).update(spec={**second.spec, "ttlSecondsAfterFinished": 5})
    third = make_job(make_tenant())  # another tenant: the first tenant's rows (their window counts) stay the same
    after = read.built(make)
    assert after == [list(row) for row in _query()]
    assert after[0] is before[0]  # the same row as before: the same object, nothing converted
    assert after[1] is not before[1] and after[1][-1] in (5, "5")  # changed: built again from the new row
    assert made == [first.name, second.name, second.name, third.name]
    # Only the previous call's rows are remembered: a row gone and back is built again.
    Job.all_tenants.filter(pk=first.pk).update(finalized=True)
    read.built(make)
    Job.all_tenants.filter(pk=first.pk).update(finalized=False)
    assert read.built(make)[0] is not before[0]


def test_long_json_documents_keep_their_big_integers_and_odd_values():
    tenant = make_tenant()
    job = make_job(tenant)
    padding = "x" * 300  # a document longer than any short-document shortcut
    long_big = {"pad": padding, "n": 2**64 + 1, "list": [-(2**63) - 1, 1.25]}
    long_plain = {"pad": padding, "é": "ü", "n": 2**63 - 1, "when": "2026-12-06T00:40:29.331445+00:00"}
    Job.all_tenants.filter(pk=job.pk).update(placement=long_big, request=long_plain)
    names = ("placement", "request")
    [row] = PreparedRead(lambda: Job.all_tenants.filter(pk=job.pk).values_list(*names)).rows()
    assert row == tuple(Job.all_tenants.filter(pk=job.pk).values_list(*names).get())
    assert type(row[0]["n"]) is int and row[0]["n"] == 2**64 + 1 and row[0]["list"][0] == -(2**63) - 1
    assert row[1] == long_plain


def test_the_waiting_heads_are_the_window_querys_rows_in_every_queue():
    """PostgreSQL reads the heads through the queue-order index (a LATERAL top-N per queue), elsewhere through the
    window query: the same jobs, ranks, counts and statuses either way, in queue order within each queue."""
    first, second = make_tenant(), make_tenant()
    for index in range(5):
        make_job(first, priority=index % 3 * 10, queueName="a")
    for _ in range(3):
        make_job(first, queueName="b")
    cancelled = make_job(second, queueName="a")
    make_job(second, queueName="a", priority=50)
    running = make_job(second, queueName="a")
    Job.all_tenants.filter(pk=cancelled.pk).update(cancel_requested_at=cancelled.created_at)
    Job.all_tenants.filter(pk=running.pk).update(phase="Running")
    Job.all_tenants.filter(tenant=first, queue_name="b").update(phase="Queued", reason="WaitingForQuota", message="m")
    heads = admission_inputs.waiting_heads(3)
    expected = list(admission_inputs._waiting_heads_query(3))
    # id, tenant, queue, priority, created_at, request, may_preempt, phase, reason, message, rank, waiting, pending
    by_id = {row[0]: row for row in expected}
    assert sorted(d.job_id for d in heads.demands) == sorted(by_id)
    for demand in heads.demands:
        row = by_id[demand.job_id]
        assert (demand.tenant_id, demand.queue, demand.priority, demand.request) == (row[1], row[2], row[3], row[5])
        assert heads.status[demand.job_id] == (row[7], row[8], row[9])
    ranks = {}  # within each queue, the demands come in rank order
    for demand in heads.demands:
        ranks.setdefault((demand.tenant_id, demand.queue), []).append(by_id[demand.job_id][10])
    assert all(found == sorted(found) for found in ranks.values())
    assert heads.counts == {(first.pk, "a"): 5, (first.pk, "b"): 3, (second.pk, "a"): 1}
    assert heads.pending == 6  # the waiting jobs still Pending: five in first/a, one in second/a
    assert cancelled.pk not in by_id and running.pk not in by_id
    again = admission_inputs.waiting_heads(3)  # nothing changed: equal Demands (SQLite: the same objects, reused)
    assert again.demands == heads.demands
    reused = all(a is b for a, b in zip(again.demands, heads.demands, strict=True))
    assert reused is (connection.vendor != "postgresql")
    # What a pass reads (in one round trip on PostgreSQL): the same heads, and the admitted jobs as active() reads them.
    with CaptureQueriesContext(connection) as queries:
        together, active = admission_inputs.heads_and_active(3)
    assert together.demands == heads.demands and together.counts == heads.counts
    assert [row.pk for row in active] == [running.pk] and active == admission_inputs.active()
    assert len(queries) == (1 if connection.vendor == "postgresql" else 2)


def test_integer_lists_travel_as_one_array_text_and_select_the_same_rows():
    tenant = make_tenant()
    a, b, c = (make_job(tenant) for _ in range(3))
    read = PreparedRead(lambda: Job.all_tenants.filter(pk__any_of=Arg("pks")).order_by("pk").values_list("pk"))
    assert read.rows(pks=[c.pk, a.pk]) == [(a.pk,), (c.pk,)] and read.rows(pks=[]) == []
    assert list(Job.all_tenants.filter(pk__any_of=(b.pk,)).values_list("pk", flat=True)) == [b.pk]
    if connection.vendor == "postgresql":
        assert read.sql(pks=[a.pk, b.pk])[1] == (f"{{{a.pk},{b.pk}}}",)
    assert int_array_literal([1, -2, 30]) == "{1,-2,30}" and int_array_literal([]) == "{}"
    assert int_array_literal([1, True]) is None and int_array_literal(["1"]) is None  # sent as a list instead


def test_reuse_built_compares_rows_from_key_from_on():
    built = []

    def build(row):
        built.append(row)
        return list(row)

    first, memo = reuse_built({}, [("u1", 1, "a"), ("u2", 2, "b")], build, key_from=1)
    again, memo = reuse_built(memo, [("u1", 1, "a"), ("u2", 2, "changed")], build, key_from=1)
    assert again[0] is first[0] and again[1] is not first[1] and again[1] == ["u2", 2, "changed"]
    assert built == [("u1", 1, "a"), ("u2", 2, "b"), ("u2", 2, "changed")] and set(memo) == {(1, "a"), (2, "changed")}
