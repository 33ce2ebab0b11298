"""Quota amounts as numbers: a resource key per GPU flavor, and amounts in each resource's base unit."""

from __future__ import annotations

from apps.core.quantities import cpu_millicores, memory_bytes

from .choices import CPU, MEMORY


def resource_key(resource: str, flavor: str = "") -> str:
    """`nvidia.com/gpu` for untyped GPU quota, `nvidia.com/gpu:H100` for a flavor, else the resource name."""
    return f"{resource}:{flavor}" if flavor else resource


def resource_amount(resource: str, value: int | str) -> int:
    """A quota amount in the resource's base unit: GPUs as a count, cpu in millicores, memory in bytes."""
    if resource == CPU:
        return cpu_millicores(value)
    if resource == MEMORY:
        return memory_bytes(value)
    return int(value)
