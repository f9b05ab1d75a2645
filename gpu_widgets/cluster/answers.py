"""Prometheus's JSON, decoded and checked for the shape that was asked for, in a worker thread.

Real Prometheus answers what its API documents; a proxy or a look-alike in front of it may not.
Whatever comes back, the cluster view gets either samples of the documented shape (labels as
strings, values as [time, "text"]) or a ``BadAnswer`` that says what was wrong, in words the
API can show: never an exception deeper in the code that would end in an HTTP 500.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

_KINDS = {"vector": "value", "matrix": "values"}


class BadAnswer(ValueError):
    """An answer that is JSON (or not) but not what was asked: the message says what."""


class NotJson(ValueError):
    """Not JSON at all: not Prometheus (an HTML page, a login form)."""


def decode(body: bytes) -> Any:
    try:
        return json.loads(body)
    except RecursionError:  # JSON, but nested past what Python's decoder follows
        raise BadAnswer("JSON nested too deeply") from None
    except ValueError as exc:  # UnicodeDecodeError among them
        raise NotJson(str(exc)) from None


def _what(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number",
            type(None): "null"}.get(type(value), type(value).__name__)


def _time(value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadAnswer(f"{where} has a time that is {_what(value)}, not a finite number")


def _point(point: Any, where: str) -> None:
    if not isinstance(point, list) or len(point) != 2:
        raise BadAnswer(f"{where} is {_what(point)}, not a [time, \"value\"] pair")
    _time(point[0], where)
    if not isinstance(point[1], str):
        raise BadAnswer(f"{where} has a value that is {_what(point[1])}, not a string")


def _labels(metric: Any, where: str) -> None:
    if not isinstance(metric, dict):
        raise BadAnswer(f"{where}.metric is {_what(metric)}, not an object of labels")
    for name, value in metric.items():
        if not isinstance(value, str):
            raise BadAnswer(f"{where}.metric label {name[:60]!r} is {_what(value)}, not a string")


def result(data: Any, kind: str) -> list[dict[str, Any]]:
    """``data.result`` of a query answer, every sample checked: a vector's ``value`` is one
    [time, "value"] pair, a matrix's ``values`` a list of them."""
    if not isinstance(data, dict) or data.get("resultType") != kind:
        got = data.get("resultType") if isinstance(data, dict) else None
        raise BadAnswer(f"a result of type {str(got)[:40]!r}, wanted a {kind}")
    samples = data.get("result")
    if not isinstance(samples, list):
        raise BadAnswer(f"data.result is {_what(samples)}, not a list")
    field = _KINDS[kind]
    for i, sample in enumerate(samples):
        where = f"result[{i}]"
        if not isinstance(sample, dict):
            raise BadAnswer(f"{where} is {_what(sample)}, not an object")
        _labels(sample.get("metric"), where)
        if kind == "vector":
            _point(sample.get(field), f"{where}.value")
        else:
            points = sample.get(field)
            if not isinstance(points, list):
                raise BadAnswer(f"{where}.values is {_what(points)}, not a list")
            for j, point in enumerate(points):
                _point(point, f"{where}.values[{j}]")
    return samples


def targets(data: Any, seconds: Callable[[str], float | None]) -> dict[tuple[str, str], float]:
    """(job, instance) -> scrape interval in seconds, from the targets API's ``activeTargets``."""
    active = data.get("activeTargets") if isinstance(data, dict) else None
    if not isinstance(active, list):
        raise BadAnswer(f"activeTargets is {_what(active)}, not a list")
    out: dict[tuple[str, str], float] = {}
    for i, target in enumerate(active):
        if not isinstance(target, dict):
            raise BadAnswer(f"activeTargets[{i}] is {_what(target)}, not an object")
        labels, discovered = target.get("labels") or {}, target.get("discoveredLabels") or {}
        if not isinstance(labels, dict) or not isinstance(discovered, dict):
            raise BadAnswer(f"activeTargets[{i}] has labels that are not an object")
        interval = target.get("scrapeInterval") or discovered.get("__scrape_interval__") or ""
        if not isinstance(interval, str):
            raise BadAnswer(f"activeTargets[{i}].scrapeInterval is {_what(interval)}, not a duration")
        job, instance = labels.get("job", ""), labels.get("instance", "")
        if not isinstance(job, str) or not isinstance(instance, str):
            raise BadAnswer(f"activeTargets[{i}] has a job or instance that is not a string")
        if (s := seconds(interval)):
            out[(job, instance)] = s
    return out
