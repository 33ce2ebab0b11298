"""Contract registration for /api/v1/jobs/."""

import itertools

from apps.jobs.models import Job
from tests.api_contract import Endpoint, register
from tests.jobs.factories import HELLO_SPEC, make_job

_names = itertools.count(1)

register(
    Endpoint(
        name="jobs",
        model=Job,
        list_path=lambda t: "/api/v1/jobs/",
        detail_path=lambda t, i: f"/api/v1/jobs/{i}/",
        make=lambda t: make_job(t).name,
        read_scope="jobs:read",
        write_scope="jobs:write",
        create_payload=lambda t: {"name": f"contract{next(_names)}", "spec": HELLO_SPEC},
        deletes=True,
        read_only_scopes=["jobs:read", "keys:write"],
        id_field=("metadata", "name"),
    )
)
