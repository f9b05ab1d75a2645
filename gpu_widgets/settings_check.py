"""The one check for the numbers of the server's settings (``c.GpuWidgets.<name>`` and the alerts'
settings endpoint), so that every bad number is refused in the same words."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

SHOWN_CHARS = 60  # of a bad value, in the message


def check_number(name: str, value: Any, allowed: Callable[[float], bool], rule: str) -> float:
    """``value`` as a float when it is a number that ``allowed`` accepts; else a ValueError that
    says "<name> must be <rule>, got <value>", or "<name> must be a number (<rule>), got <repr>"
    when it is no number at all. NaN fails every comparison, so a bound written as one refuses it; an
int too big for a float is refused too (its size in digits shown, not the digits)."""
    # bool is an int to Python, never a setting's number to a person
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number ({rule}), got {shown(value)}")
    try:
        number = float(value)
    except OverflowError:  # an int of 309 digits or more (JSON has no bound on them)
        number = math.nan  # refused below, whatever the rule
    if not allowed(value) or number != number:
        raise ValueError(f"{name} must be {rule}, got {_number(value)}")
    return number


def cut(text: str) -> str:
    """``text`` cut to SHOWN_CHARS: a bad value from a request may be anything, of any size."""
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


def shown(value: Any) -> str:
    return cut(repr(value))


def _number(value: int | float) -> str:
    if isinstance(value, int) and not -10**SHOWN_CHARS < value < 10**SHOWN_CHARS:
        try:
            return f"an integer of {len(str(abs(value)))} digits"
        except ValueError:  # past Python's int-to-text limit
            return f"an integer of {value.bit_length()} bits"
    return f"{value}"
