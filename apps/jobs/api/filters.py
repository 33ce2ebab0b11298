# The filter definition lives beside the models (apps/jobs/filtersets.py): the dashboard's list uses it too.
from ..filtersets import JobFilterSet

__all__ = ["JobFilterSet"]
