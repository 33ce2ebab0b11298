"""`gryvia hooks …` against the stand-in server."""

from __future__ import annotations

from .conftest import Run, page
from .standin import Answer, StandIn
from .test_cli import _args

HOOKS = "/api/v1/webhooks/"
HOOK = {
    "id": 7,
    "tenant": "alpha",
    "url": "https://hooks.example.com/gryvia",
    "events": ["job.failed", "job.succeeded"],
    "enabled": True,
    "format": "standard",
    "description": "",
    "job_names": ["train-*"],
    "job_labels": {},
    "consecutive_failures": 0,
    "disabled_reason": "",
    "secret_rotation_ends_at": None,
}
DELIVERY = {
    "id": 31,
    "endpoint": 7,
    "type": "job.failed",
    "status": "failed",
    "attempts": 3,
    "message_id": "msg_abc",
    "next_attempt_at": "2024-05-01T12:00:00Z",
    "attempt_log": [{"number": 3, "status": "failed", "status_code": 500, "error_code": "http_status"}],
}


def test_create_posts_selectors_and_prints_the_secret_once(standin: StandIn, cli: Run):
    standin.add("POST", HOOKS, Answer(status=201, json={**HOOK, "secret": "whsec_c2VjcmV0"}))
    args = ["hooks", "create", HOOK["url"], "--event", "job.failed", "--event", "job.succeeded"]
    result = cli(*_args(standin, *args, "--job-name", "train-*", "--job-label", "gryvia.io/type=training"))
    assert result.code == 0, result.err
    assert standin.requests[-1].json() == {
        "url": HOOK["url"],
        "events": ["job.failed", "job.succeeded"],
        "format": "standard",
        "job_names": ["train-*"],
        "job_labels": {"gryvia.io/type": "training"},
    }
    assert "secret: whsec_c2VjcmV0" in result.out and "shown only now" in result.err


def test_list_and_deliveries(standin: StandIn, cli: Run):
    standin.add("GET", HOOKS, Answer(json=page([HOOK])))
    result = cli(*_args(standin, "hooks", "list"))
    assert result.code == 0, result.err
    header, row = result.out.splitlines()[:2]
    assert header.split() == ["ID", "URL", "FORMAT", "EVENTS", "ENABLED", "FAILURES"]
    assert row.split()[:4] == ["7", HOOK["url"], "standard", "job.failed,job.succeeded"]

    standin.add("GET", f"{HOOKS}7/deliveries/", Answer(json=page([DELIVERY])))
    result = cli(*_args(standin, "hooks", "deliveries", "7", "--status", "failed"))
    assert result.code == 0, result.err
    assert standin.requests[-1].query == {"status": "failed"}
    assert result.out.splitlines()[1].split()[:5] == ["31", "job.failed", "failed", "3", "500"]


def test_redeliver_ping_rotate_delete(standin: StandIn, cli: Run):
    standin.add(
        "POST", f"{HOOKS}7/deliveries/31/redeliver/", Answer(status=202, json={**DELIVERY, "status": "pending"})
    )
    result = cli(*_args(standin, "hooks", "redeliver", "7", "31"))
    assert result.code == 0 and "delivery/31 queued again (msg_abc)" in result.err + result.out

    ok = {**DELIVERY, "type": "ping", "status": "succeeded", "attempt_log": [{"status_code": 204, "latency_ms": 12}]}
    standin.add("POST", f"{HOOKS}7/ping/", Answer(json=ok))
    result = cli(*_args(standin, "hooks", "ping", "7"))
    assert result.code == 0 and "ping delivered: 204 in 12 ms" in result.err + result.out

    rotated = {**HOOK, "secret": "whsec_bmV3", "secret_rotation_ends_at": "2024-05-02T12:00:00Z"}
    standin.add("POST", f"{HOOKS}7/rotate-secret/", Answer(json=rotated))
    result = cli(*_args(standin, "hooks", "rotate-secret", "7", "--grace", "3600"))
    assert result.code == 0 and standin.requests[-1].json() == {"grace_seconds": 3600}
    assert "secret: whsec_bmV3" in result.out

    standin.add("DELETE", f"{HOOKS}7/", Answer(status=204))
    assert cli(*_args(standin, "hooks", "delete", "7", "--yes")).code == 0
    assert cli(*_args(standin, "hooks", "get", "not-a-number")).code == 2
