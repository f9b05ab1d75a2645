"""Query parameters: parsed strictly, with a message that names the parameter and the problem.

A handler parses inside ``with params.as_bad_request():``, which turns ``BadParameter`` into the
API's one answer for it: a 400 ``{"code": "bad_parameter", "message": ...}``.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TypeVar

from tornado import web

T = TypeVar("T")

# Jupyter's own auth parameters may ride along on any request.
IGNORED = frozenset({"token", "_xsrf"})


class BadParameter(ValueError):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name


def bad_request(message: str) -> web.HTTPError:
    """The 400 for a request the API refuses, ``message`` saying why (it may hold what was sent)."""
    # "%s": tornado's log formats log_message with %, and the message may hold a '%' that was sent
    return web.HTTPError(400, "%s", message, reason="bad_parameter")


@contextmanager
def as_bad_request() -> Iterator[None]:
    """A ``BadParameter`` raised inside becomes ``bad_request`` with its message."""
    try:
        yield
    except BadParameter as exc:
        raise bad_request(str(exc)) from None


def _cache_buster(name: str, values: Sequence[bytes]) -> bool:
    # JupyterLab's ServerConnection appends "?<Date.now()>" to GETs unless told not to cache.
    return name.isdigit() and all(not v for v in values)


def check_known(arguments: Mapping[str, Sequence[bytes]], allowed: Sequence[str]) -> None:
    for name, values in arguments.items():
        if name not in allowed and name not in IGNORED and not _cache_buster(name, values):
            valid = ", ".join(allowed) if allowed else "none"
            raise BadParameter(name, f"unknown parameter (valid: {valid})")
    for name in allowed:
        if len(arguments.get(name, ())) > 1:
            raise BadParameter(name, "given more than once")


def _one(arguments: Mapping[str, Sequence[bytes]], name: str) -> str | None:
    values = arguments.get(name)
    if not values:
        return None
    return values[0].decode("utf-8", "replace").strip()


def _converted(name: str, raw: str, convert: Callable[[str], T], expected: str) -> T:
    try:
        return convert(raw)
    except ValueError:
        raise BadParameter(name, f"expected {expected}, got {raw!r}") from None


def unix_seconds(arguments: Mapping[str, Sequence[bytes]], name: str) -> float | None:
    raw = _one(arguments, name)
    if raw is None:
        return None
    value = _converted(name, raw, float, "unix seconds (a number)")
    if not math.isfinite(value) or value < 0:
        raise BadParameter(name, f"expected unix seconds >= 0, got {raw!r}")
    return value


def bounded_int(arguments: Mapping[str, Sequence[bytes]], name: str, default: int, lo: int, hi: int) -> int:
    raw = _one(arguments, name)
    if raw is None:
        return default
    value = _converted(name, raw, int, f"a whole number from {lo} to {hi}")
    if not lo <= value <= hi:
        raise BadParameter(name, f"expected a whole number from {lo} to {hi}, got {value}")
    return value


def flag(arguments: Mapping[str, Sequence[bytes]], name: str) -> bool:
    """``1``/``true`` or ``0``/``false`` (absent: false)."""
    raw = _one(arguments, name)
    if raw is None:
        return False
    if raw.lower() in ("1", "true"):
        return True
    if raw.lower() in ("0", "false"):
        return False
    raise BadParameter(name, f"expected 1 or 0, got {raw!r}")


def choice(arguments: Mapping[str, Sequence[bytes]], name: str, choices: Sequence[str], default: str) -> str:
    raw = _one(arguments, name)
    if raw is None:
        return default
    if raw not in choices:
        raise BadParameter(name, f"expected one of {', '.join(choices)}, got {raw[:80]!r}")
    return raw


def text(arguments: Mapping[str, Sequence[bytes]], name: str, max_chars: int) -> str:
    """Free text of at most ``max_chars`` characters (absent: empty)."""
    raw = _one(arguments, name)
    if raw is None:
        return ""
    if len(raw) > max_chars:
        raise BadParameter(name, f"expected at most {max_chars} characters, got {len(raw)}")
    return raw
