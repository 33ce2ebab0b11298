"""apps.core.db.epochs: every write to a watched table gives it a new epoch (triggers, both databases), and a cached
read inside a snapshot loads again exactly when one of its tables changed."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from apps.core.db import epochs
from apps.core.db.epochs import EpochCached
from apps.core.models import TableEpoch
from apps.queueing import services as queueing
from apps.queueing.models import Queue
from apps.tenants.models import Tenant
from tests.factories import ACTOR, make_tenant

pytestmark = pytest.mark.django_db


def epoch(table: str) -> int | None:
    return TableEpoch.objects.filter(table_name=table).values_list("epoch", flat=True).first()


def test_every_kind_of_write_gives_the_table_a_new_epoch():
    seen = [epoch("tenants_tenant")]
    tenant = make_tenant()  # INSERT
    seen.append(epoch("tenants_tenant"))
    tenant.max_gpus = 8
    tenant.save()  # UPDATE through the ORM
    seen.append(epoch("tenants_tenant"))
    Tenant.objects.filter(pk=tenant.pk).update(gpu_type_ceilings={"H100": 4})  # a QuerySet update
    seen.append(epoch("tenants_tenant"))
    with connection.cursor() as cursor:  # raw SQL
        cursor.execute("UPDATE tenants_tenant SET max_cpu = %s WHERE id = %s", ["64", tenant.pk])
    seen.append(epoch("tenants_tenant"))
    assert None not in seen[1:] and len(set(seen)) == len(seen)


def test_status_columns_a_reconciler_writes_leave_the_epoch_alone(tenant_a):
    queueing.queue_create(actor=ACTOR, tenant=tenant_a, name="team", quotas=[{"resource": "cpu", "nominal": 4}])
    before = epoch("queueing_queue")
    Queue.all_tenants.filter(tenant=tenant_a).update(status_pending=3, status_admitted={"cpu": 1000})
    assert epoch("queueing_queue") == before
    Queue.all_tenants.filter(tenant=tenant_a).update(weight=2.0)
    assert epoch("queueing_queue") != before
    Queue.all_tenants.filter(tenant=tenant_a).delete()  # DELETE
    assert epoch("queueing_queue") not in (before, None)


def test_a_cached_read_loads_again_only_when_its_table_changed():
    loads = []
    cached = EpochCached(("tenants_tenant",), lambda: loads.append(1) or sorted(Tenant.objects.values_list("slug")))
    make_tenant("first")
    assert cached.get() == [("first",)] and cached.get() == [("first",)] and len(loads) == 2  # no snapshot: loads
    with epochs.snapshot():
        assert cached.get() == [("first",)]
        with CaptureQueriesContext(connection) as queries:
            assert cached.get() == [("first",)]  # the snapshot's epochs, and the value loaded with them
        assert len(queries) == 0 and len(loads) == 3
    with epochs.snapshot():
        with CaptureQueriesContext(connection) as queries:
            assert cached.get() == [("first",)]  # unchanged: one read of the epochs, no load
        assert len(queries) == 1 and len(loads) == 3
    make_tenant("second")
    with epochs.snapshot():
        assert cached.get() == [("first",), ("second",)] and len(loads) == 4


def test_a_snapshot_takes_its_epochs_from_a_read_sent_with_another_statement():
    cached = EpochCached(("tenants_tenant",), lambda: sorted(Tenant.objects.values_list("slug", flat=True)))
    make_tenant("first")
    assert epochs.snapshot_reads() == []  # outside a snapshot: nothing to read
    with epochs.snapshot():
        [(sql, params, receive)] = epochs.snapshot_reads()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            receive(cursor.fetchall())
        assert epochs.snapshot_reads() == []  # read already
        assert cached.get() == ["first"]
    with epochs.snapshot():
        [(sql, params, receive)] = epochs.snapshot_reads()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            receive(cursor.fetchall())
        with CaptureQueriesContext(connection) as queries:
            assert cached.get() == ["first"]  # the epochs received, unchanged: no statement at all
        assert len(queries) == 0


def test_a_rolled_back_write_is_not_served_afterwards():
    cached = EpochCached(("tenants_tenant",), lambda: sorted(Tenant.objects.values_list("slug", flat=True)))
    make_tenant("kept")
    with epochs.snapshot():
        assert cached.get() == ["kept"]
    with pytest.raises(RuntimeError), transaction.atomic():
        make_tenant("undone")
        with epochs.snapshot():
            assert cached.get() == ["kept", "undone"]
        raise RuntimeError
    with epochs.snapshot():
        assert cached.get() == ["kept"]  # the epoch went back with the write: its value is not the one cached


def test_only_watched_tables_can_be_cached():
    with pytest.raises(ValueError, match="jobs_job"):
        EpochCached(("jobs_job",), list)


def test_triggers_are_installed_again_idempotently():
    epochs.install_triggers()
    epochs.install_triggers()
    before = epoch("tenants_tenant")
    make_tenant()
    assert epoch("tenants_tenant") != before
