"""Non-blocking named locks: PostgreSQL advisory locks, or a file lock under the data dir on SQLite.

Both are held across processes on their scope (the database cluster, or this machine for SQLite, which is the
embedded profile's whole world) and released when the holder exits.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import connection

from .db.deferred import read_together

# A read to make once the lock is taken: (sql with %s placeholders, params, what receives its rows).
LockedRead = tuple[str, Sequence[Any], Callable[[list[tuple]], None]]


def _hand(reads: Sequence[LockedRead], fetched: list[list[tuple]]) -> None:
    """Each read's rows to its receiver."""
    for (_sql, _params, receive), rows in zip(reads, fetched, strict=True):
        receive(rows)


@contextmanager
def try_advisory_lock(name: str, *, reads: Sequence[LockedRead] = ()) -> Iterator[bool]:
    """Yield True when the lock `name` was taken, False when someone else holds it; never waits.

    `reads` are made when the lock is taken, each one's rows handed to its receiver before the block runs. On
    PostgreSQL they go in the lock attempt's round trip (apps.core.db.deferred.read_together): read after the lock
    in the same execute, so they see what the lock's previous holder committed. Their rows are dropped when the
    lock was not taken."""
    if connection.vendor == "postgresql":
        [[(acquired,)], *fetched] = read_together(
            [("SELECT pg_try_advisory_lock(hashtext(%s))", [name]), *[(sql, params) for sql, params, _ in reads]]
        )
        if acquired:
            _hand(reads, fetched)
        try:
            yield acquired
        finally:
            if acquired:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(hashtext(%s))", [name])
        return
    lock_dir = settings.DATA_DIR / "locks"
    lock_dir.mkdir(exist_ok=True)
    path = lock_dir / (re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            acquired = True
        except BlockingIOError:
            acquired = False
        if acquired and reads:
            _hand(reads, read_together([(sql, params) for sql, params, _ in reads]))
        try:
            yield acquired
        finally:
            if acquired:
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
