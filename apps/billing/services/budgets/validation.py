"""Budget specs: the fields a budget's writer sets (FIELDS) and their validation, errors naming the field."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError
from django.utils import timezone

from ...choices import BudgetPeriod
from ...selectors import pricing

FIELDS = ("period", "start", "end", "amount", "currency", "thresholds", "hard_limit", "description")
MAX_AMOUNT = Decimal(10) ** 12
MAX_THRESHOLDS = 10
_CURRENCY = re.compile(r"^[A-Z]{3}$")


def _amount(value: Any) -> Decimal:
    if value is None:
        raise ValidationError({"amount": "is required: the budget's limit, e.g. 500.00"})
    if isinstance(value, bool) or not isinstance(value, int | str | Decimal | float):
        raise ValidationError({"amount": "must be a positive decimal number such as 500 or 500.00"})
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        raise ValidationError({"amount": f"{value!r} is not a decimal number"}) from None
    if not amount.is_finite() or amount <= 0 or amount > MAX_AMOUNT:
        raise ValidationError({"amount": f"must be greater than 0 and at most {MAX_AMOUNT} (got {value})"})
    if amount != amount.quantize(pricing.SIX):
        raise ValidationError({"amount": "at most 6 decimal places"})
    return amount.quantize(pricing.SIX)


def _thresholds(value: Any) -> list[int]:
    if not isinstance(value, list):
        raise ValidationError({"thresholds": "must be a list of percentages such as [50, 80, 100]"})
    if len(value) > MAX_THRESHOLDS:
        raise ValidationError({"thresholds": f"at most {MAX_THRESHOLDS} thresholds"})
    out = []
    for index, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= 1000:
            raise ValidationError({"thresholds": f"thresholds[{index}]: must be a whole percentage from 1 to 1000"})
        out.append(item)
    if len(set(out)) != len(out):
        raise ValidationError({"thresholds": "each percentage may appear once"})
    return sorted(out)


def _instant(value: Any, name: str) -> dt.datetime | None:
    if value is None:
        return None
    if not isinstance(value, dt.datetime):
        raise ValidationError({name: "must be a date and time"})
    if timezone.is_naive(value):
        raise ValidationError({name: "needs a UTC offset"})
    return value.astimezone(dt.UTC)


def budget_validate(fields: dict[str, Any]) -> dict[str, Any]:
    """The normalized spec fields (FIELDS) of a budget, from the current ones updated with the changes; raises
    ValidationError naming the field (the writes and the admin forms call it)."""
    period = fields.get("period")
    if period not in BudgetPeriod.values:
        raise ValidationError({"period": f"must be one of {', '.join(BudgetPeriod.values)} (got {period!r})"})
    start, end = _instant(fields.get("start"), "start"), _instant(fields.get("end"), "end")
    if period == BudgetPeriod.CUSTOM:
        if start is None:
            raise ValidationError({"start": "is required for a custom period"})
        if end is None:
            raise ValidationError({"end": "is required for a custom period"})
        if end <= start:
            raise ValidationError({"end": f"must be after start ({start.isoformat()})"})
    elif start is not None or end is not None:
        raise ValidationError({"start" if start is not None else "end": "only a custom period has a start and an end"})
    currency = fields.get("currency")
    if not isinstance(currency, str) or not _CURRENCY.match(currency):
        raise ValidationError({"currency": f"must be an ISO 4217 code such as USD (got {currency!r})"})
    if not isinstance(fields.get("hard_limit"), bool):
        raise ValidationError({"hard_limit": "must be true or false"})
    description = fields.get("description")
    if not isinstance(description, str) or len(description) > 500:
        raise ValidationError({"description": "must be a string of at most 500 characters"})
    return {
        "period": period,
        "start": start,
        "end": end,
        "amount": _amount(fields.get("amount")),
        "currency": currency,
        "thresholds": _thresholds(fields.get("thresholds")),
        "hard_limit": fields["hard_limit"],
        "description": description,
    }
