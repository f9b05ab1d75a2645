"""The cluster service: one query round per refresh, shared by every client.

An answer is fresh for ``refresh_s`` seconds. A request after that starts the next round and,
while it runs, is given the previous answer (for up to STALE_GRACE more refreshes): a round over
500 hosts takes Prometheus a few hundred ms, which no poll should have to wait for. Only the
first request, or one after a long quiet spell, waits; requests that arrive meanwhile wait for
that same round. So Prometheus sees the same load for 1 or 100 open sidebars. Failures are
answers too (``status`` "unreachable" or "error" with a reason), kept as long, so a Prometheus
that is down is not asked again by every poll.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from . import detail, overview, promql
from .pages import PageQuery, Pages
from .prometheus import DEFAULT_MAX_ANSWER_MB, ERROR, Auth, PrometheusClient, PrometheusError

OK = "ok"
NOT_CONFIGURED = "not_configured"
# Details of this many hosts are cached at once (a panel opens a few; 500 would be a scan).
MAX_CACHED_DETAILS = 64
# Up to this many stopped hosts are dated by name; more, by one query over every host.
MAX_GONE_LISTED = 100
# How many refresh periods past its freshness an answer may still be served while the next round runs.
STALE_GRACE = 2


@dataclass(frozen=True)
class ClusterConfig:
    prometheus_url: str = ""
    auth: Auth = Auth()
    refresh_s: float = 5.0
    timeout_s: float = 5.0
    max_answer_mb: float = DEFAULT_MAX_ANSWER_MB


class Answer:
    """A finished answer: the payload and its JSON, encoded once for every client."""

    def __init__(self, payload: dict[str, Any] | None) -> None:
        self.payload = payload
        self.body = None if payload is None else json.dumps(payload, allow_nan=False, separators=(",", ":"))


class OverviewAnswer(Answer):
    """An overview round: every host's row, never sent whole; each request gets a page of it."""

    def __init__(self, payload: dict[str, Any]) -> None:
        self.payload = payload
        self.body = None
        self.pages = Pages(payload)


class ClusterService:
    """``problem``: why the settings cannot be used. Then every answer is status "error" with it as
    the reason, and Prometheus is never asked (a bad setting must not take the local sidebar down)."""

    def __init__(self, config: ClusterConfig, current_host: str, log: logging.Logger | None = None,
                 problem: str | None = None) -> None:
        self.config = config
        self.current_host = current_host
        self.log = log or logging.getLogger(__name__)
        self.problem = problem
        self.client = PrometheusClient(config.prometheus_url, config.auth, config.timeout_s, config.max_answer_mb) \
            if config.prometheus_url and problem is None else None
        self._cache: OrderedDict[str, tuple[float, Answer]] = OrderedDict()
        self._running: dict[str, asyncio.Future[Answer]] = {}
        self._interval_s: float | None = None  # the typical scrape interval, from the last overview
        self._warned: str | None = None

    # -- shared, cached rounds ------------------------------------------------------------------
    async def _shared(self, key: str, make: Callable[[], Awaitable[dict[str, Any] | Answer | None]]) -> Answer:
        hit = self._cache.get(key)
        now = time.monotonic()
        if hit is not None and hit[0] > now:
            return hit[1]
        running = self._running.get(key)
        if running is None:
            running = asyncio.ensure_future(self._round(key, make))
            running.add_done_callback(self._log_failure)
            self._running[key] = running
        if hit is not None and now < hit[0] + STALE_GRACE * self.config.refresh_s:
            return hit[1]  # the round refreshes it meanwhile
        # shield: a client that goes away must not cancel the round the others wait for
        return await asyncio.shield(running)

    def _log_failure(self, round_: asyncio.Future[Answer]) -> None:
        # Failures of Prometheus are answers; this is a bug, and a round nobody awaited must not hide it.
        if not round_.cancelled() and round_.exception() is not None:
            self.log.error("gpu-widgets cluster view: a query round failed", exc_info=round_.exception())

    async def _round(self, key: str, make: Callable[[], Awaitable[dict[str, Any] | Answer | None]]) -> Answer:
        try:
            made = await make()  # a failure is an answer too: cached as long
            answer = made if isinstance(made, Answer) else Answer(made)
            self._cache[key] = (time.monotonic() + self.config.refresh_s, answer)
            self._cache.move_to_end(key)
            while len(self._cache) > MAX_CACHED_DETAILS + 1:
                self._cache.popitem(last=False)
            return answer
        finally:
            self._running.pop(key, None)

    def _warn(self, reason: str) -> None:
        # Once per new reason, not once per refresh while Prometheus stays down.
        if reason != self._warned:
            self.log.warning("gpu-widgets cluster view: %s", reason)
            self._warned = reason

    async def _intervals(self) -> dict[tuple[str, str], float]:
        """Scrape intervals by target. Query front ends (Thanos, Mimir) may lack the targets API:
        then staleness rests on Prometheus's own markers and lookback alone."""
        assert self.client is not None
        try:
            return await self.client.scrape_intervals()
        except PrometheusError as exc:
            if exc.bad_shape:  # the API is there but answers nonsense: say so, not a silent guess
                raise
            self.log.debug("gpu-widgets cluster view: no scrape intervals: %s", exc.reason)
            return {}

    # -- the overview -----------------------------------------------------------------------------
    def _head(self, status: str, reason: str | None) -> dict[str, Any]:
        return {"status": status, "reason": reason,
                "prometheus_url": self.client.url if self.client else None, "current_host": self.current_host}

    async def overview(self, query: PageQuery = PageQuery()) -> str:
        """The JSON of one page of the overview, cut from this refresh's one round."""
        answer = await self._shared("overview", self._overview_answer)
        assert isinstance(answer, OverviewAnswer)
        body = answer.pages.cached(query)
        if body is None:
            # Filtering and sorting thousands of rows: off the loop, as the round's build is.
            body = await asyncio.get_running_loop().run_in_executor(None, answer.pages.make, query)
            answer.pages.keep(query, body)
        return body

    async def _overview_answer(self) -> OverviewAnswer:
        return OverviewAnswer(await self._overview())

    async def _overview(self) -> dict[str, Any]:
        empty = {"queried_at": time.time(), "scrape_interval_s": None, "host_columns": list(overview.HOST_COLUMNS),
                 "hosts": [], "totals": {"hosts": 0, "gpus": 0, "stale_hosts": 0, "busy_gpus": 0, "free_gpus": 0,
                                         "simulated_hosts": 0}, "unlisted_hosts": 0, "unlisted_reason": None}
        if self.problem is not None:
            return {**self._head(ERROR, self.problem), **empty}
        if self.client is None:
            return {**self._head(NOT_CONFIGURED, "GpuWidgets.prometheus_url is not set: no cluster view"), **empty}
        try:
            result, intervals = await asyncio.gather(
                self.client.query(promql.overview_query(self._interval_s)), self._intervals())
            gone = overview.gone_hosts(result)
            if gone:  # a second, small query dates their last samples (too costly for every host)
                named = gone if len(gone) <= MAX_GONE_LISTED else None
                result = [*result, *await self.client.query(promql.gone_ages_query(named, self._interval_s))]
        except PrometheusError as exc:
            self._warn(exc.reason)
            return {**self._head(exc.status, exc.reason), **empty}
        # ~10 ms of Python for 500 hosts: in a worker thread, where the GIL's switch interval lets
        # the loop in every 5 ms, rather than on the loop in one piece.
        try:
            body = await asyncio.get_running_loop().run_in_executor(
                None, _encodable, overview.build, result, intervals, self.current_host)
        except _Unusable as exc:
            return {**self._head(ERROR, self._unusable(exc)), **empty}
        self._warned = None
        self._interval_s = body["scrape_interval_s"]
        if body["queried_at"] is None:
            body["queried_at"] = empty["queried_at"]
        reason = None if body["totals"]["hosts"] else (
            f"Prometheus at {self.client.url} holds no {promql.UTIL} series with a {promql.HOST} (or "
            f"{promql.NEW_HOST}) label: is anything scraped that exports them?")
        return {**self._head(OK, reason), **body}

    def _unusable(self, exc: _Unusable) -> str:
        assert self.client is not None
        reason = (f"Prometheus at {self.client.url} gave an answer the cluster view cannot use "
                  f"({exc})")
        self._warn(reason)
        return reason

    # -- one host -----------------------------------------------------------------------------------
    async def detail(self, host: str) -> Answer:
        """One host's GPUs; ``payload`` None when Prometheus knows no such host."""
        return await self._shared(f"host:{host}", lambda: self._detail(host))

    async def _detail(self, host: str) -> dict[str, Any] | None:
        head = {"status": NOT_CONFIGURED, "reason": "GpuWidgets.prometheus_url is not set: no cluster view",
                "hostname": host, "current": host == self.current_host, "stale": None, "age_s": None, "simulated": None,
                "history_step_s": None, "gpus": []}
        if self.problem is not None:
            return {**head, "status": ERROR, "reason": self.problem}
        if self.client is None:
            return head
        step = promql.history_step_s(self._interval_s)
        n = promql.HISTORY_POINTS
        end = time.time()
        start = end - (n - 1) * step
        try:
            result, matrix, intervals = await asyncio.gather(
                self.client.query(promql.detail_query(host, self._interval_s)),
                self.client.query_range(promql.history_query(host, step), start, end, step),
                self._intervals())
        except PrometheusError as exc:
            self._warn(exc.reason)
            return {**head, "status": exc.status, "reason": exc.reason}
        try:
            answer = _encodable(_detail_of, host, result, matrix, intervals, self.current_host, start, step)
        except _Unusable as exc:
            return {**head, "status": ERROR, "reason": self._unusable(exc)}
        return None if answer is None else {"status": OK, "reason": None, **answer, "history_step_s": float(step)}


def _detail_of(host: str, result: list[Any], matrix: list[Any], intervals: dict[tuple[str, str], float],
               current_host: str, start: float, step: int) -> dict[str, Any] | None:
    n = promql.HISTORY_POINTS
    answer = detail.build(host, result, intervals, current_host, n)
    if answer is None:
        return None
    detail.add_history(answer["gpus_by_key"], matrix, start, step, n)
    return detail.finish(answer)


class _Unusable(Exception):
    """Checked answers that still could not be made into the API's JSON (a bug's or a look-alike's doing)."""


def _encodable(build: Callable[..., dict[str, Any] | None], *args: Any) -> dict[str, Any] | None:
    """``build(*args)``, proven to encode as JSON; any failure as ``_Unusable``, never an HTTP 500."""
    try:
        body = build(*args)
        json.dumps(body, allow_nan=False)
    except (ArithmeticError, ValueError, TypeError, KeyError, IndexError, RecursionError) as exc:
        raise _Unusable(f"{type(exc).__name__}: {exc}") from exc
    return body
