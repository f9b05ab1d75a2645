"""A small client for Prometheus's HTTP API on tornado's AsyncHTTPClient: it never blocks the loop.

Every failure becomes a ``PrometheusError`` with a status for the API ("unreachable": no answer;
"error": an answer we cannot use) and a reason in plain words that names the URL, never the
credentials.
"""
from __future__ import annotations

import asyncio
import json
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

BIG_ANSWER_CHARS = 1 << 16
UNREACHABLE = "unreachable"
ERROR = "error"
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s|d|w|y)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400,
           "w": 7 * 86400, "y": 365 * 86400}


class PrometheusError(Exception):
    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def check_url(url: str) -> str:
    """The URL as given, or a ValueError that says what is wrong with it."""
    if any(c.isspace() or not c.isprintable() for c in url):
        # not echoed: its credentials (if any) cannot be told apart from the rest with certainty
        raise ValueError("must not contain spaces or control characters")
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:  # an unclosed [ of an IPv6 address: nothing of it can be shown safely
        raise ValueError(f"is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"must start with http:// or https:// (the Prometheus server, e.g. "
                         f"http://prometheus:9090), got {display_url(url)!r}")
    if not parts.hostname:
        raise ValueError(f"has no host name: {display_url(url)!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"must not have a query or fragment (only the server and an optional path "
                         f"prefix), got {display_url(url)!r}")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise ValueError(f"has a bad port: {display_url(url)!r}") from None
    return url


def display_url(url: str) -> str:
    """The URL without user name and password: what may appear in answers and logs."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url.rstrip("/")
    netloc = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)).rstrip("/")


def go_duration_s(text: str) -> float | None:
    """Seconds in a Go/Prometheus duration ("15s", "1m30s", "500ms"); None when it is not one."""
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _UNIT_S[match.group(2)]
        pos = match.end()
    return total if pos == len(text) and pos else None


@dataclass(frozen=True)
class Auth:
    token: str = ""
    username: str = ""
    password: str = ""


class PrometheusClient:
    def __init__(self, url: str, auth: Auth = Auth(), timeout_s: float = 5.0) -> None:
        parts = urllib.parse.urlsplit(check_url(url))
        username = auth.username or urllib.parse.unquote(parts.username or "")
        password = auth.password or urllib.parse.unquote(parts.password or "")
        self.auth = Auth(auth.token, username, password)
        self.url = display_url(url)  # credentials travel as headers, never in the URL
        self.timeout_s = timeout_s

    def _request(self, path: str, form: dict[str, Any] | None) -> HTTPRequest:
        headers = {"Accept": "application/json"}
        if self.auth.token:
            headers["Authorization"] = f"Bearer {self.auth.token}"
        body = None
        if form is not None:
            # POST: the overview's PromQL is a few kB, too long for some proxies' URL limits.
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            body = urllib.parse.urlencode(form)
        basic = {"auth_username": self.auth.username, "auth_password": self.auth.password,
                 "auth_mode": "basic"} if self.auth.username else {}
        return HTTPRequest(f"{self.url}{path}", method="POST" if body is not None else "GET", headers=headers,
                           body=body, connect_timeout=self.timeout_s, request_timeout=self.timeout_s,
                           follow_redirects=False, **basic)

    async def _call(self, path: str, form: dict[str, Any] | None = None) -> Any:
        client = AsyncHTTPClient()
        try:
            response = await client.fetch(self._request(path, form), raise_error=False)
        except Exception as exc:  # DNS, refused connection, TLS, timeout: the server cannot be reached
            response, error = None, exc
        else:
            error = response.error if response.code == 599 else None
        if response is None or error is not None:
            what = _plain(error)
            if "timeout" in what.lower():
                what = f"no answer within {self.timeout_s:g} s (GpuWidgets.prometheus_timeout_s)"
            raise PrometheusError(UNREACHABLE, f"Prometheus at {self.url} cannot be reached: {what}")
        text = response.body.decode("utf-8", "replace") if response.body else ""
        if response.code in (401, 403):
            raise PrometheusError(ERROR, f"Prometheus at {self.url} refused the request (HTTP {response.code}): "
                                  "check GpuWidgets.prometheus_token or prometheus_username/prometheus_password")
        try:
            answer = await _decode(text)
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or answer.get("status") not in ("success", "error"):
            raise PrometheusError(ERROR, f"{self.url}{path} answered HTTP {response.code} without Prometheus's "
                                  "JSON: is GpuWidgets.prometheus_url the Prometheus server?")
        if answer["status"] != "success" or response.code >= 400:
            raise PrometheusError(ERROR, f"Prometheus at {self.url} answered HTTP {response.code}: "
                                  f"{answer.get('error') or answer.get('errorType') or 'error'}")
        return answer.get("data")

    async def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's vector: ``[{"metric": {...}, "value": [t, "v"]}, ...]``."""
        return _result(await self._call("/api/v1/query", {"query": promql}), "vector", self.url)

    async def query_range(self, promql: str, start: float, end: float, step_s: float) -> list[dict[str, Any]]:
        form = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s:g}"}
        return _result(await self._call("/api/v1/query_range", form), "matrix", self.url)

    async def scrape_intervals(self) -> dict[tuple[str, str], float]:
        """(job, instance) -> scrape interval in seconds, for every active target."""
        data = await self._call("/api/v1/targets?state=active")
        out: dict[tuple[str, str], float] = {}
        for target in (data or {}).get("activeTargets") or []:
            labels = target.get("labels") or {}
            seconds = go_duration_s(str(target.get("scrapeInterval") or
                                        (target.get("discoveredLabels") or {}).get("__scrape_interval__") or ""))
            if seconds:
                out[(str(labels.get("job", "")), str(labels.get("instance", "")))] = seconds
        return out


async def _decode(text: str) -> Any:
    """JSON of an answer; a big one (the overview of 500 hosts is ~0.5 MB) in a worker thread, so
    the loop is not held for the whole decode and the rows built from it."""
    if len(text) < BIG_ANSWER_CHARS:
        return json.loads(text)
    return await asyncio.get_running_loop().run_in_executor(None, json.loads, text)


def _result(data: Any, kind: str, url: str) -> list[dict[str, Any]]:
    if not isinstance(data, dict) or data.get("resultType") != kind or not isinstance(data.get("result"), list):
        raise PrometheusError(ERROR, f"Prometheus at {url} gave an answer of an unexpected shape (wanted a {kind})")
    return data["result"]


def _plain(exc: BaseException | None) -> str:
    if isinstance(exc, HTTPClientError):
        return exc.message or str(exc.code)
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is Prometheus running, and is the port right?)"
    return str(exc) or type(exc).__name__
