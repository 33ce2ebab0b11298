"""The values billing code compares against: usage kinds, budget periods and states, invoice states."""

from __future__ import annotations

from django.db import models

__all__ = ["BudgetPeriod", "BudgetState", "InvoiceState", "UsageKind"]


class UsageKind(models.TextChoices):
    GPU = "gpu"  # a job's run with GPUs
    CPU = "cpu"  # a job's run without GPUs
    TOKENS = "tokens"  # an hour of an LLM gateway model's tokens
    EXTERNAL = "external"  # an event from an outside meter (POST /api/v1/usage/events/)
    RESERVATION = "reservation"  # GPUs a reservation holds for a tenant (apps.billing.services.reservations)


class BudgetPeriod(models.TextChoices):
    MONTHLY = "monthly"  # the current UTC calendar month
    CUSTOM = "custom"  # [start, end)


class BudgetState(models.TextChoices):
    OK = "ok"
    WARNING = "warning"  # at or past the lowest threshold (80 % without thresholds)
    EXCEEDED = "exceeded"  # at or past 100 %, without a hard limit
    BLOCKED = "blocked"  # at or past 100 % with a hard limit: new jobs wait


class InvoiceState(models.TextChoices):
    DRAFT = "draft"
    FINALIZED = "finalized"
    PAID = "paid"
    VOID = "void"
