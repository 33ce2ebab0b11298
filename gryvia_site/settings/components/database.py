import dj_database_url

from ..env import env_int, env_str
from .core import DATA_DIR

DATABASE_URL = env_str("DATABASE_URL")

if DATABASE_URL:
    DATABASES = {
        "default": dj_database_url.parse(
            DATABASE_URL, conn_max_age=env_int("GRYVIA_DB_CONN_MAX_AGE", 60), conn_health_checks=True
        )
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": DATA_DIR / "gryvia.sqlite3",
            "OPTIONS": {
                # WAL lets the ticker thread write while requests read; IMMEDIATE avoids upgrade deadlocks.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
            },
            # A file, not :memory:, so tests see what a real deployment writes (WAL included).
            "TEST": {"NAME": str(DATA_DIR / "test-gryvia.sqlite3")},
        }
    }
