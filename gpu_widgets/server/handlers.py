"""REST handlers under ``{base_url}gpu-widgets/api/v1/``: JSON only, every one authenticated.

Handlers read what the service holds in memory; the heavier work (downsampling a history,
walking /proc for kernel attribution) runs in a worker thread so the event loop stays free.
"""
from __future__ import annotations

import asyncio
import json
import time
from functools import lru_cache
from importlib import resources
from collections.abc import Mapping, Sequence
from typing import Any

from jupyter_server.base.handlers import APIHandler
from tornado import web
from tornado.iostream import StreamClosedError

from ..metrics import catalogue
from ..service import gzipped, privacy, process_pages
from ..service.gzipped import SharedBody
from ..service.service import GpuService
from . import kernels, params

DEFAULT_MAX_POINTS = 600
# A history request covering at most this many samples x GPUs (~1 ms of work) is answered on the
# event loop; bigger ones go to the history worker (samples.py).
INLINE_HISTORY_VALUES = 256
MIN_MAX_POINTS = 2
# samples/latest for more GPUs than this makes its JSON (once per sample) in a worker thread.
INLINE_LATEST_GPUS = 8
# A samples answer at least this big is written without being copied (SamplesHandler.get).
BIG_ANSWER_BYTES = 1 << 16
# How long a browser may reuse the metric catalogue without asking (it is fixed while the server
# runs; a restart with another version may change it, so not forever).
METRICS_MAX_AGE_S = 300
PROCESS_PARAMS = ("offset", "limit", "gpu")


@lru_cache(maxsize=1)
def openapi_document() -> str:
    return resources.files(__package__).joinpath("openapi.json").read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def openapi_body() -> SharedBody:
    return SharedBody(openapi_document().encode())  # its gzip made once, on first use


# The catalogue's JSON (and its gzip), made once per catalogue: keyed on the METRICS tuple so that
# a test (or a plug-in) that extends the catalogue is served what it added.
_catalogue_body: tuple[object, SharedBody] = ((), SharedBody(b""))


def catalogue_body() -> SharedBody:
    global _catalogue_body
    metrics, body = _catalogue_body
    if metrics is not catalogue.METRICS:
        body = SharedBody(json.dumps(catalogue.catalogue_json(), allow_nan=False).encode())
        _catalogue_body = (catalogue.METRICS, body)
    return body


def process_query(arguments: Mapping[str, Sequence[bytes]],
                  devices: Sequence[Mapping[str, Any]]) -> tuple[int, int, int | None]:
    """(offset, limit, gpu index or None) of a ``processes`` page; raises ``params.BadParameter``."""
    offset = params.bounded_int(arguments, "offset", 0, 0, process_pages.MAX_OFFSET)
    limit = params.bounded_int(arguments, "limit", process_pages.DEFAULT_LIMIT, 1, process_pages.MAX_LIMIT)
    gpu = None
    if arguments.get("gpu"):
        gpu = params.bounded_int(arguments, "gpu", 0, 0, process_pages.MAX_OFFSET)
        indices = [d["index"] for d in devices]
        if gpu not in indices:
            known = ", ".join(map(str, indices)) or "none yet"
            raise params.BadParameter("gpu", f"no GPU with index {gpu} (indices: {known})")
    return offset, limit, gpu


class BaseApiHandler(APIHandler):
    """Shared plumbing: the service, strict parameters, and errors as ``{"code", "message"}``."""

    allowed_params: tuple[str, ...] = ()

    @property
    def service(self) -> GpuService:
        return self.settings["gpu_widgets_service"]

    def set_default_headers(self) -> None:
        super().set_default_headers()
        self.set_header("Cache-Control", "no-store")

    def check_params(self) -> None:
        with params.as_bad_request():
            params.check_known(self.request.arguments, self.allowed_params)

    def send(self, payload: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish_small(json.dumps(payload, allow_nan=False).encode())

    def finish_small(self, data: bytes | SharedBody) -> None:
        """``finish(data)``, gzipped here on the loop where worth it: for answers of a few
        kilobytes (devices, the catalogue), ~50 us, once for a SharedBody."""
        head, end = self._encoded(data if isinstance(data, SharedBody) else SharedBody(data))
        self.finish(head + end, set_content_type=self._headers.get("Content-Type", "application/json"))

    async def finish_shared(self, body: SharedBody, tail: bytes = b"") -> None:
        """``body`` then ``tail``, the shared part's gzip made once for every request (gzipped.py)."""
        await self.finish_big(*self._encoded(body, tail))

    def _encoded(self, body: SharedBody, tail: bytes = b"") -> tuple[bytes, bytes]:
        """The bytes to send for ``body`` then ``tail``: gzipped for a client that accepts it, when
        it is worth it (a big body's gzip is made already, in the worker that made the body)."""
        self.set_header("Vary", "Accept-Encoding")
        if body.worth_compressing() and gzipped.accepts_gzip(self.request.headers):
            self.set_header("Content-Encoding", "gzip")
            return body.gzip(tail)
        return body.raw, tail

    async def finish_big(self, body: bytes, suffix: bytes = b"") -> None:
        """``finish(body + suffix)``; a body of ``BIG_ANSWER_BYTES`` or more goes after its headers,
        as it is: written with them (and joined to the suffix), tornado copies it twice on the loop.
        The Content-Type set before stays (APIHandler.finish would make it JSON)."""
        content_type = self._headers.get("Content-Type", "application/json")
        if len(body) < BIG_ANSWER_BYTES:
            self.finish(body + suffix, set_content_type=content_type)
            return
        self.set_header("Content-Length", len(body) + len(suffix))
        try:
            await self.flush()
            self.write(body)
            await self.flush()
        except StreamClosedError:
            return  # the client went away
        self.finish(suffix, set_content_type=content_type)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc_info = kwargs.get("exc_info")
        message = self._reason
        code = {400: "bad_parameter", 403: "forbidden", 404: "not_found", 405: "method_not_allowed"}.get(
            status_code, "server_error"
        )
        if exc_info:
            exc = exc_info[1]
            if isinstance(exc, web.HTTPError):
                message = exc.log_message % exc.args if exc.log_message and exc.args else exc.log_message or message
                if exc.reason and "_" in exc.reason:
                    code = exc.reason
            elif status_code >= 500:
                message = "internal error in gpu-widgets (see the Jupyter server log)"
        if status_code == 403 and not message or message == "Forbidden":
            message = "not authenticated: send the Jupyter server's token (Authorization: token ...)"
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"code": code, "message": message or self._reason}))

    def _me(self) -> int | None:
        """The uid whose processes are shown in full; None when every process may be shown."""
        return privacy.full_view_uid(self.service.show_other_users_processes)


class StatusHandler(BaseApiHandler):
    @web.authenticated
    def get(self) -> None:
        self.check_params()
        self.send(self.service.status())


class DevicesHandler(BaseApiHandler):
    @web.authenticated
    def get(self) -> None:
        self.check_params()
        status = self.service.status()
        self.send({
            "backend": status["backend"],
            "status": status["status"],
            "reason": status["reason"],
            "devices": self.service.devices(),
        })


class LatestHandler(BaseApiHandler):
    allowed_params = ("gpm",)

    @web.authenticated
    async def get(self) -> None:
        self.check_params()
        with params.as_bad_request():
            gpm = params.flag(self.request.arguments, "gpm")
        sampler = self.service.sampler
        if gpm and sampler is not None:
            # A lease, renewed by each such request: GPM stops GPM_LEASE_S after the client stops asking.
            sampler.want_gpm("api")
        snap = self.service.latest()
        if snap is None:
            self.send(self.service.pending_answer())  # no devices yet, so no processes to redact
            return
        me = self._me()
        self.service.latest_asked(me)
        if not self.service.latest_json_made(snap, me) and len(snap["devices"]) > INLINE_LATEST_GPUS:
            # The first request after a sample on a big machine makes its JSON off the loop, and
            # those arriving meanwhile wait for it; the others (and small machines, where a thread
            # hop costs more) answer from it here.
            await self.service.latest_shared.get(snap, me, self.service.latest_json, snap, me, True)
        self.set_header("Content-Type", "application/json")
        await self.finish_shared(*self.service.latest_answer(snap, me))

    def compute_etag(self) -> None:
        """No ETag: answers are ``no-store``, and a big machine's is a megabyte to hash on the loop."""
        return None


class SamplesHandler(BaseApiHandler):
    allowed_params = ("since", "until", "max_points")

    @web.authenticated
    async def get(self) -> None:
        self.check_params()
        with params.as_bad_request():
            since = params.unix_seconds(self.request.arguments, "since")
            until = params.unix_seconds(self.request.arguments, "until")
            max_points = params.bounded_int(
                self.request.arguments, "max_points", DEFAULT_MAX_POINTS, MIN_MAX_POINTS, self.service.max_points_limit
            )
            if until is not None and since is not None and until <= since:
                raise params.BadParameter("until", f"expected unix seconds after since ({since!r}), got {until!r}")
        made = None if until is not None else self.service.samples.ready(since, max_points)
        if made is not None:
            body = made  # tabs opening together: the answer the first of them had made
        elif until is not None:
            # Older history for a client that holds the newer (a longer window): rare, made alone.
            body = await asyncio.wrap_future(self.service.samples.body_in_worker(since, max_points, until))
        elif since is not None and self.service.samples.cost(since) <= INLINE_HISTORY_VALUES:
            # A poll's increment (a few samples, ~0.1 ms): on the loop. Handing it to a thread costs
            # more: the loop then waits for the GIL at each hand-over (p95 22 ms at 100 pollers).
            body = self.service.samples.body(since, max_points)
        else:
            body = await asyncio.wrap_future(self.service.samples.body_in_worker(since, max_points))
        # The server's clock at the moment of answering (clients use it to line their clock up).
        suffix = f',"server_time":{json.dumps(time.time())}}}'.encode()
        self.set_header("Content-Type", "application/json")
        await self.finish_shared(body, suffix)

    def compute_etag(self) -> None:
        """No ETag: answers are ``no-store``, and tornado would hash megabytes on the event loop."""
        return None


class ProcessesHandler(BaseApiHandler):
    """Every GPU process, one page at a time (process_pages.py): the largest first."""

    allowed_params = PROCESS_PARAMS

    @web.authenticated
    async def get(self) -> None:
        self.check_params()
        snap = self.service.latest()
        devices = snap["devices"] if snap else []
        with params.as_bad_request():
            offset, limit, gpu = process_query(self.request.arguments, devices)
        listed, limit = process_pages.page(devices, offset, limit, gpu)
        paths = await kernels.notebook_paths(self.session_manager, self.log)
        roots = kernels.kernel_root_pids(self.kernel_manager)
        head = {"timestamp": snap["timestamp"] if snap else None, "offset": offset, "limit": limit}
        me = self._me()
        # In a worker: a page can hold 2000 processes (a /proc walk each, then a megabyte of JSON).
        # Sidebars polling together ask for the same page of the same sample: they share it.
        book = self.settings.get("gpu_widgets_orphans")  # orphan_watch.py: left by kernels that ended
        orphan_of = book.orphan_of if book is not None else process_pages.no_orphans
        key = (offset, limit, gpu, me, tuple(sorted(roots.items())), tuple(sorted(paths.items())),
               book.version if book is not None else 0)
        body = await self.service.pages_shared.get(snap, key, _page, head, listed, roots, paths, me, orphan_of)
        self.set_header("Content-Type", "application/json")
        await self.finish_shared(body)

    def compute_etag(self) -> None:
        return None  # as samples/latest: no-store, and up to 2000 processes to hash


def _page(*args: Any) -> SharedBody:
    """A processes page and its gzip (in the worker: up to 2000 processes, a megabyte)."""
    body = SharedBody(process_pages.answer(*args))
    if body.worth_compressing():
        body.deflate()
    return body


class OpenApiHandler(BaseApiHandler):
    @web.authenticated
    def get(self) -> None:
        self.check_params()
        self.set_header("Content-Type", "application/json")
        self.finish_small(openapi_body())


class MetricsHandler(BaseApiHandler):
    """The metric catalogue. It changes only with the package, so browsers may keep it a while and
    then revalidate it by its ETag (tornado answers 304 when it still matches)."""

    @web.authenticated
    def get(self) -> None:
        self.check_params()
        self.set_header("Cache-Control", f"private, max-age={METRICS_MAX_AGE_S}")
        self.set_header("Content-Type", "application/json")
        self.finish_small(catalogue_body())


class NotFoundHandler(BaseApiHandler):
    @web.authenticated
    def get(self, path: str) -> None:
        raise web.HTTPError(404, f"no such endpoint: {path!r}; the API is described at openapi.json",
                            reason="not_found")


ROUTES: tuple[tuple[str, type[BaseApiHandler]], ...] = (
    ("status", StatusHandler),
    ("devices", DevicesHandler),
    ("samples/latest", LatestHandler),
    ("samples", SamplesHandler),
    ("processes", ProcessesHandler),
    ("metrics", MetricsHandler),
    ("openapi.json", OpenApiHandler),
)


def route_table(prefix: str) -> list[tuple[str, type[BaseApiHandler]]]:
    table: list[tuple[str, Any]] = [(f"{prefix}/{path}", handler) for path, handler in ROUTES]
    table.append((f"{prefix}/(.*)", NotFoundHandler))
    return table
