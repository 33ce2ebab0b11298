from ..env import env_str

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("GRYVIA_LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        # One INFO line per upstream call from the gateway's HTTP client: the access log already has the request.
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
    },
}
