"""Test settings: the same profiles as production, chosen by DATABASE_URL / REDIS_URL, plus fast password hashing."""

from .base import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
