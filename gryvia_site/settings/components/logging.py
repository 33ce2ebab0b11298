from ..env import env_str

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("GRYVIA_LOG_LEVEL", "INFO")},
    "loggers": {
        # Django's own configuration gives `django` a console handler of its own (DEBUG only) and mail_admins
        # (no ADMINS are set), and the record then propagates to the root's console too: every `django.request`
        # warning was written twice, traceback and all. Named here without handlers, it keeps none; the root
        # writes it once.
        "django": {"level": "INFO"},
        "django.db.backends": {"level": "INFO"},
        # One INFO line per upstream call from the gateway's HTTP client: the access log already has the request.
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
    },
}
