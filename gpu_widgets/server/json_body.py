"""A request body that must be one flat JSON object, read strictly: every way it can be wrong is a
``BadBody`` whose message names the field (where there is one) and the problem.

Each field's value is read on its own, so a value nested too deeply for Python's JSON reader (a
RecursionError) or a number no float holds is refused naming its field. NaN and Infinity (which
Python's reader accepts, JSON does not) are refused too. The body's size is bounded by the
caller before it gets here.
"""
from __future__ import annotations

import json
import re
from json.decoder import scanstring
from typing import Any

from ..settings_check import cut, shown

_SPACE = re.compile(r"[ \t\n\r]*")


class BadBody(ValueError):
    pass


class _Field:
    """The constant and float hooks of the decoder, knowing which field they read."""

    def __init__(self) -> None:
        self.name = ""

    def constant(self, text: str) -> Any:
        raise BadBody(f"{self.name} is {text}, which is not JSON: send a number")

    def number(self, text: str) -> float:
        value = float(text)
        if value - value != 0:  # a literal past 1.8e308 reads as inf
            raise BadBody(f"{self.name}: the number {shown(text)} is beyond what a float holds")
        return value


def _skip(text: str, i: int) -> int:
    return _SPACE.match(text, i).end()  # type: ignore[union-attr]


def read_object(body: bytes, what: str) -> dict[str, Any]:
    """The fields of ``body``, a JSON object; ``what`` says what it is in messages ("alert settings")."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadBody(f"the body must be a JSON object of {what} in UTF-8 (byte {exc.start} is not)") from None
    field = _Field()
    decoder = json.JSONDecoder(parse_constant=field.constant, parse_float=field.number)
    i = _skip(text, 0)
    if not text.startswith("{", i):
        return _not_an_object(text, what)
    out: dict[str, Any] = {}
    i = _skip(text, i + 1)
    if text.startswith("}", i):
        return _end(text, i + 1, out, what)
    while True:
        if not text.startswith('"', i):
            raise BadBody(f"the body must be a JSON object of {what}: a field name in double quotes "
                          f"was expected at character {i}")
        try:
            name, i = scanstring(text, i + 1)
        except ValueError as exc:
            raise BadBody(f"the body must be a JSON object of {what}: {exc}") from None
        field.name = cut(name)
        i = _skip(text, i)
        if not text.startswith(":", i):
            raise BadBody(f"the body must be a JSON object of {what}: ':' was expected after {shown(name)}")
        try:
            out[name], i = decoder.raw_decode(text, _skip(text, i + 1))
        except RecursionError:
            raise BadBody(f"{field.name} is nested too deeply: send a number or a string") from None
        except BadBody:
            raise
        except ValueError as exc:  # JSONDecodeError, or an integer of more than 4300 digits
            raise BadBody(f"{field.name}: not a JSON value ({exc})") from None
        i = _skip(text, i)
        if text.startswith(",", i):
            i = _skip(text, i + 1)
        elif text.startswith("}", i):
            return _end(text, i + 1, out, what)
        else:
            raise BadBody(f"the body must be a JSON object of {what}: ',' or '}}' was expected at character {i}")


def _end(text: str, i: int, out: dict[str, Any], what: str) -> dict[str, Any]:
    if _skip(text, i) != len(text):
        raise BadBody(f"the body must be one JSON object of {what}: something follows it at character {i}")
    return out


def _not_an_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "null", parse_constant=lambda c: None)
    except RecursionError:
        value = []  # deeply nested arrays: JSON, but no object
    except ValueError as exc:
        raise BadBody(f"the body must be a JSON object of {what} (not JSON: {exc})") from None
    kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "nothing"}.get(type(value), "a number")
    raise BadBody(f"the body must be a JSON object of {what}, got {kind}")
