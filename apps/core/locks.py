"""Non-blocking named locks: PostgreSQL advisory locks, or a file lock under the data dir on SQLite.

Both are held across processes on their scope (the database cluster, or this machine for SQLite, which is the
embedded profile's whole world) and released when the holder exits.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import connection


@contextmanager
def try_advisory_lock(name: str) -> Iterator[bool]:
    """Yield True when the lock `name` was taken, False when someone else holds it; never waits."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(hashtext(%s))", [name])
            acquired = bool(cursor.fetchone()[0])
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
        try:
            yield acquired
        finally:
            if acquired:
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
