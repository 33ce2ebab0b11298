"""The accelerators: code that exists only to make the hot paths cheaper than plain Django ORM code (README.md)."""
