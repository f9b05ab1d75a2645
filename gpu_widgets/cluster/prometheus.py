"""A small client for Prometheus's HTTP API on tornado's AsyncHTTPClient: it never blocks the loop.

Every failure becomes a ``PrometheusError`` with a status for the API ("unreachable": no answer;
"error": an answer we cannot use) and a reason in plain words that names the URL, never the
credentials.
"""
from __future__ import annotations

import asyncio
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from . import answers

# Smaller answers are decoded on the loop: a thread's hand-off would cost more than the decode.
BIG_ANSWER_BYTES = 1 << 16
DEFAULT_MAX_ANSWER_MB = 16.0
MB = 1_000_000
# tornado's own limits sit this far above ours, so that our count (not its closed stream) tells.
_SLACK_BYTES = 1 << 20
UNREACHABLE = "unreachable"
ERROR = "error"
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s|d|w|y)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400,
           "w": 7 * 86400, "y": 365 * 86400}


class PrometheusError(Exception):
    """``bad_shape``: Prometheus's JSON, but not of the shape asked for (a proxy's doing)."""

    def __init__(self, status: str, reason: str, bad_shape: bool = False) -> None:
        super().__init__(reason)
        self.status, self.reason, self.bad_shape = status, reason, bad_shape


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


@dataclass
class _Body:
    """What is read of one answer: at most ``limit`` bytes are kept, the rest only counted."""
    limit: int
    chunks: list[bytes] = field(default_factory=list)
    received: int = 0
    declared: int | None = None  # its Content-Length

    def header(self, line: str) -> None:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length" and value.strip().isdigit():
            self.declared = int(value.strip())

    def chunk(self, data: bytes) -> None:
        self.received += len(data)
        if self.received <= self.limit:
            self.chunks.append(data)

    @property
    def too_large(self) -> bool:
        return self.received > self.limit or (self.declared or 0) > self.limit


class PrometheusClient:
    def __init__(self, url: str, auth: Auth = Auth(), timeout_s: float = 5.0,
                 max_answer_mb: float = DEFAULT_MAX_ANSWER_MB) -> None:
        parts = urllib.parse.urlsplit(check_url(url))
        username = auth.username or urllib.parse.unquote(parts.username or "")
        password = auth.password or urllib.parse.unquote(parts.password or "")
        self.auth = Auth(auth.token, username, password)
        self.url = display_url(url)  # credentials travel as headers, never in the URL
        self.timeout_s = timeout_s
        self.max_answer_mb = max_answer_mb

    def _request(self, path: str, form: dict[str, Any] | None, body_of: _Body) -> HTTPRequest:
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
                           follow_redirects=False, header_callback=body_of.header,
                           streaming_callback=body_of.chunk, **basic)

    async def _call(self, path: str, form: dict[str, Any] | None = None,
                    check: Callable[[Any], Any] = lambda data: data) -> Any:
        """``check(data)`` of the answer; it runs with the decoding (in a worker thread for a big
        answer) and raises ``answers.BadAnswer`` for one of the wrong shape."""
        body = _Body(int(self.max_answer_mb * MB))
        # Our own client, so that its size limits bound memory for this request only (an endless
        # body would otherwise be buffered whole); streamed, so that the size is ours to count.
        client = AsyncHTTPClient(force_instance=True, max_body_size=body.limit + _SLACK_BYTES,
                                 max_buffer_size=body.limit + _SLACK_BYTES)
        try:
            response = await client.fetch(self._request(path, form, body), raise_error=False)
        except Exception as exc:  # DNS, refused connection, TLS, timeout: the server cannot be reached
            response, error = None, exc
        else:
            error = response.error if response.code == 599 else None
        finally:
            client.close()
        if body.too_large:
            size = f"{body.declared / MB:.1f} MB" if body.declared else f"more than {body.limit / MB:g} MB"
            raise PrometheusError(ERROR, f"Prometheus at {self.url} sent an answer too large: {size}, over the "
                                  f"{self.max_answer_mb:g} MB limit (GpuWidgets.cluster_max_answer_mb). Ask a "
                                  "Prometheus that holds fewer hosts, or raise the limit")
        if response is None or error is not None:
            what = _plain(error)
            if "timeout" in what.lower():
                what = f"no answer within {self.timeout_s:g} s (GpuWidgets.prometheus_timeout_s)"
            raise PrometheusError(UNREACHABLE, f"Prometheus at {self.url} cannot be reached: {what}")
        if response.code in (401, 403):
            raise PrometheusError(ERROR, f"Prometheus at {self.url} refused the request (HTTP {response.code}): "
                                  "check GpuWidgets.prometheus_token or prometheus_username/prometheus_password")
        raw = b"".join(body.chunks)
        try:
            if len(raw) < BIG_ANSWER_BYTES:
                status, payload = _unpack(raw, check)
            else:  # a big answer's decode and checks in a worker thread, not on the loop in one piece
                status, payload = await asyncio.get_running_loop().run_in_executor(None, _unpack, raw, check)
        except answers.BadAnswer as exc:
            raise PrometheusError(ERROR, f"Prometheus at {self.url} gave an answer the cluster view cannot use "
                                  f"({path.split('?')[0]}: {exc})", bad_shape=True) from None
        if status is None:
            raise PrometheusError(ERROR, f"{self.url}{path} answered HTTP {response.code} without Prometheus's "
                                  "JSON: is GpuWidgets.prometheus_url the Prometheus server?")
        if status != "success" or response.code >= 400:
            raise PrometheusError(ERROR, f"Prometheus at {self.url} answered HTTP {response.code}: {payload}")
        return payload

    async def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's vector: ``[{"metric": {...}, "value": [t, "v"]}, ...]``."""
        return await self._call("/api/v1/query", {"query": promql}, lambda data: answers.result(data, "vector"))

    async def query_range(self, promql: str, start: float, end: float, step_s: float) -> list[dict[str, Any]]:
        form = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s:g}"}
        return await self._call("/api/v1/query_range", form, lambda data: answers.result(data, "matrix"))

    async def scrape_intervals(self) -> dict[tuple[str, str], float]:
        """(job, instance) -> scrape interval in seconds, for every active target."""
        return await self._call("/api/v1/targets?state=active", None,
                                lambda data: answers.targets(data, go_duration_s))


def _unpack(raw: bytes, check: Callable[[Any], Any]) -> tuple[str | None, Any]:
    """(status, checked data) of a success; (status, Prometheus's error text) of an error;
    (None, None) when it is not Prometheus's JSON at all."""
    try:
        answer = answers.decode(raw)
    except answers.NotJson:
        return None, None
    if not isinstance(answer, dict) or answer.get("status") not in ("success", "error"):
        return None, None
    if answer["status"] != "success":
        text = answer.get("error") or answer.get("errorType") or "error"
        return "error", str(text)[:500]
    return "success", check(answer.get("data"))


def _plain(exc: BaseException | None) -> str:
    if isinstance(exc, HTTPClientError):
        return exc.message or str(exc.code)
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is Prometheus running, and is the port right?)"
    return str(exc) or type(exc).__name__
