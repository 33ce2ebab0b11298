"""`gryvia queues …` against the stand-in server."""

from __future__ import annotations

import json

from .conftest import Run, page
from .standin import Answer, StandIn
from .test_cli import _args

QUEUES = "/api/v1/queues/"
TEAM_A = {
    "name": "team-a",
    "tenant": "alpha",
    "cohort": "pool",
    "weight": 1.0,
    "quotas": [{"resource": "nvidia.com/gpu", "flavor": "H100", "nominal": 8}],
    "status": {"admitted": {"nvidia.com/gpu": 4}, "pending": 3, "updated_at": None},
}


def test_list_shows_quota_cohort_and_pending(standin: StandIn, cli: Run):
    standin.add("GET", QUEUES, Answer(json=page([TEAM_A])))
    result = cli(*_args(standin, "queues", "list"))
    assert result.code == 0, result.err
    header, row = result.out.splitlines()[:2]
    assert header.split() == ["NAME", "COHORT", "WEIGHT", "QUOTA", "PENDING"]
    assert row.split()[:3] == ["team-a", "pool", "1.0"] and "8 nvidia.com/gpu (H100)" in row and row.split()[-1] == "3"


def test_create_posts_the_quota(standin: StandIn, cli: Run):
    standin.add("POST", QUEUES, Answer(status=201, json=TEAM_A))
    args = [
        "queues",
        "create",
        "team-a",
        "--gpus",
        "8",
        "--gpu-type",
        "H100",
        "--cohort",
        "pool",
        "--lending-limit",
        "2",
    ]
    result = cli(*_args(standin, *args))
    assert result.code == 0, result.err
    body = json.loads(standin.requests[-1].body)
    assert body == {
        "name": "team-a",
        "quotas": [{"resource": "nvidia.com/gpu", "nominal": 8, "flavor": "H100", "lendingLimit": 2}],
        "cohort": "pool",
    }
