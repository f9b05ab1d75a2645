"""The one check for the numbers of the server's settings (``c.GpuWidgets.<name>`` and the alerts'
settings endpoint), so that every bad number is refused in the same words."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any


def check_number(name: str, value: Any, allowed: Callable[[float], bool], rule: str) -> float:
    """``value`` as a float when it is a number that ``allowed`` accepts; else a ValueError that
    says "<name> must be <rule>, got <value>", or "<name> must be a number (<rule>), got <repr>"
    when it is no number at all. NaN fails every comparison, so a bound written as one refuses it."""
    # bool is an int to Python, never a setting's number to a person
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number ({rule}), got {value!r}")
    if not allowed(value):
        raise ValueError(f"{name} must be {rule}, got {value}")
    return float(value)
