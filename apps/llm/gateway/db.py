"""Database reads the gateway makes off the event loop (cache reloads, counter seeds), in worker threads.

Those threads are not request threads, so nothing closes their connections for them: each call closes a connection
that is too old or broken before it runs and after (with GRYVIA_DB_CONN_MAX_AGE=0, every time)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections

P = ParamSpec("P")
R = TypeVar("R")


def off_loop(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """`fn` as a coroutine function that runs it in a worker thread."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return sync_to_async(run, thread_sensitive=False)
