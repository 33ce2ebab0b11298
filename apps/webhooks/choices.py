"""The webhooks app's choices: payload formats, delivery and attempt states (also importable from
apps.webhooks.models)."""

from django.db import models


class Format(models.TextChoices):
    """The body a delivery sends."""

    STANDARD = "standard"  # Standard Webhooks: JSON {type, timestamp, data}, signed
    SLACK = "slack"  # a Slack incoming webhook: {"text": ...}


class DeliveryStatus(models.TextChoices):
    """A delivery's state: pending until it succeeds or its retries run out."""

    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class AttemptStatus(models.TextChoices):
    """One attempt's outcome, as the worker that made it reported it."""

    IN_FLIGHT = "in_flight"  # claimed by a worker that has not reported yet
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REFUSED = "refused"  # the address guard refused the URL or an address it resolved to
    ABANDONED = "abandoned"  # the worker's lease ran out (it died or hung); the delivery was claimed again
