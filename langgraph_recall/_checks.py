"""Checks of option values shared by several parts (timeouts, waits, lease lengths)."""

from __future__ import annotations

import math
from typing import Any

from ._errors import RecallError


def is_seconds(value: Any) -> bool:
    """Whether ``value`` is a number of seconds (inf allowed; NaN, bools and strings not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def check_timeout(name: str, value: Any) -> float:
    """``value`` as a timeout: more than 0 seconds, ``math.inf`` for no limit."""
    if not is_seconds(value) or value <= 0:
        raise RecallError(
            f"{name} must be a number of seconds above 0 (math.inf for no limit), got {value!r}",
            code="invalid_value",
        )
    return float(value) if value != math.inf else math.inf
