"""Contract registrations for /api/v1/queues/ and /api/v1/reservations/ (read-only for tenants)."""

import datetime as dt
import itertools

from django.utils import timezone

from apps.queueing import services
from apps.queueing.models import Queue, Reservation
from tests.api_contract import Endpoint, register
from tests.factories import ACTOR

_names = itertools.count(1)


def make_queue(tenant, **spec) -> str:
    return services.queue_create(actor=ACTOR, tenant=tenant, name=f"queue{next(_names)}", **spec).name


def make_reservation(tenant, **spec) -> str:
    start = timezone.now()
    spec = {"gpu_type": "H100", "count": 2, "start_at": start, "end_at": start + dt.timedelta(hours=4), **spec}
    return str(services.reservation_create(actor=ACTOR, tenant=tenant, **spec).pk)


register(
    Endpoint(
        name="queues",
        model=Queue,
        list_path=lambda t: "/api/v1/queues/",
        detail_path=lambda t, i: f"/api/v1/queues/{i}/",
        make=make_queue,
        read_scope="queues:read",
        write_scope="queues:write",
        create_payload=lambda t: {
            "name": f"contract{next(_names)}",
            "weight": 2,
            "quotas": [{"resource": "nvidia.com/gpu", "flavor": "H100", "nominal": 4}],
        },
        update_payload={"weight": 3, "quotas": [{"resource": "cpu", "nominal": "32"}]},
        deletes=True,
        read_only_scopes=["queues:read"],
        id_field=("name",),
    )
)

register(
    Endpoint(
        name="reservations",
        model=Reservation,
        list_path=lambda t: "/api/v1/reservations/",
        detail_path=lambda t, i: f"/api/v1/reservations/{i}/",
        make=make_reservation,
        read_scope="queues:read",
        id_field=("id",),
    )
)
