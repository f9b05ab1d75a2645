"""``{base_url}gpu-widgets/metrics``: the Prometheus text exposition of the server's sampler.

Authenticated with the Jupyter server's own auth (a scrape config sends the token as
``Authorization: token ...``) unless ``GpuWidgets.metrics_allow_unauthenticated``. A scrape reads
what the sampler holds; the per-GPU part is rendered once per sample, in a worker thread because
kernel attribution walks /proc, and scrapers arriving meanwhile wait for that same render; its
gzip (Prometheus asks for it) is made there too, once (service/gzipped.py).
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from tornado import web

from ..service import attribution, gzipped, privacy
from ..service.gzipped import SharedBody
from ..service.service import GpuService
from . import kernels
from .handlers import BaseApiHandler

try:  # jupyter_server >= 2.13 checks auth before the handler unless told the handler does it
    from jupyter_server.auth.decorator import allow_unauthenticated
except ImportError:  # older servers only check where the handler asks (web.authenticated)
    def allow_unauthenticated(method: Any) -> Any:  # type: ignore[no-redef]
        return method

METRICS_PATH = "/gpu-widgets/metrics"
ALLOW_KEY = "gpu_widgets_metrics_allow_unauthenticated"
HOSTNAME_KEY = "gpu_widgets_hostname"
SCRAPES_KEY = "gpu_widgets_scrapes"
# While scrapes come (one in the last WARM_LEASE_S), each new sample's per-GPU part is rendered,
# and gzipped, as the sample arrives: the next scrape finds it made (a big machine's render is
# ~100 ms of prometheus-client work a scraper would otherwise wait for).
WARM_LEASE_S = 30.0


@dataclass(frozen=True)
class _Managers:
    """What a render needs from a request's handler, kept without the request."""

    session_manager: Any
    kernel_manager: Any
    log: Any
    settings: Any


class ServerScrapes:
    """The server's exposition and the render in progress, shared by every scraper."""

    def __init__(self, service: GpuService, hostname: str) -> None:
        from ..export.exposition import Exposition  # prometheus-client only once someone scrapes

        self.service = service
        self.exposition = Exposition(hostname)
        self._rendering: tuple[object, asyncio.Future[bytes]] | None = None
        self._shared: tuple[bytes, SharedBody] | None = None  # the devices' part as rendered, and its gzip
        self._scraped: tuple[float, bool, _Managers] | None = None  # the last scrape: when, gzip asked
        self._unsubscribe: Any = None

    def watch(self, handler: web.RequestHandler, gzip: bool) -> None:
        """After a scrape: render the next samples as they arrive while scrapes keep coming."""
        self._scraped = (time.monotonic(), gzip, _Managers(handler.session_manager, handler.kernel_manager,
                                                            handler.log, handler.settings))
        sampler = self.service.sampler
        if self._unsubscribe is None and sampler is not None:
            loop = asyncio.get_running_loop()
            # On the sampler thread: hand the sample to the loop, which starts the render.
            self._unsubscribe = sampler.subscribe(lambda snap: loop.call_soon_threadsafe(self._warm, snap))

    def _warm(self, snap: Any) -> None:
        scraped = self._scraped
        if scraped is None or time.monotonic() - scraped[0] > WARM_LEASE_S or snap is not self.service.latest():
            return
        _, gzip, managers = scraped
        task = asyncio.ensure_future(self._shared_part(snap, managers, gzip))
        task.add_done_callback(lambda t: t.cancelled() or t.exception() is None or managers.log.warning(
            "gpu-widgets: rendering the exposition ahead of the next scrape failed: %r", t.exception()))

    def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    async def body(self, handler: web.RequestHandler, gzip: bool = False) -> tuple[SharedBody, bytes]:
        """The devices' part (shared by the scrapes of one sample) and the rest, fresh; with
        ``gzip`` the shared part's compression is made (once, in a worker)."""
        from ..export.exposition import asked_by_scrape, health_of

        asked_by_scrape(self.service)
        snap = self.service.latest() if self.service.ready else None
        shared = SharedBody(b"") if snap is None else await self._shared_part(snap, handler, gzip)
        parts = []
        tracker = handler.settings.get("gpu_widgets_gpu_activity")  # server/gpu_activity.py
        if tracker is not None:
            parts.append(self.exposition.render_kernels(tracker.kernel_rows()))
        # Health last and fresh: the sample may be old by now (a driver call that hangs).
        parts.append(self.exposition.render_health(health_of(self.service, self.exposition.hostname)))
        return shared, b"".join(parts)

    async def _shared_part(self, snap: Any, handler: Any, gzip: bool) -> SharedBody:
        devices = await self._devices(snap, handler)
        made = self._shared
        if made is None or made[0] is not devices:
            made = self._shared = (devices, SharedBody(devices))
        body = made[1]
        if gzip and body.worth_compressing() and not body.deflated:
            await asyncio.get_running_loop().run_in_executor(None, body.deflate)
        return body

    async def _devices(self, snap: Any, handler: Any) -> bytes:
        cached = self.exposition.cached(snap)
        if cached is not None:
            return cached
        rendering = self._rendering
        if rendering is None or rendering[0] is not snap:
            rendering = (snap, asyncio.ensure_future(self._render(snap, handler)))
            self._rendering = rendering
        # Shielded: a scraper that goes away must not cancel the render the others wait for.
        return await asyncio.shield(rendering[1])

    async def _render(self, snap: Any, handler: Any) -> bytes:
        paths: dict[str, str] = {}
        roots: dict[int, str] = {}
        if any(dev.get("processes") for dev in snap["devices"]):
            paths = await kernels.notebook_paths(handler.session_manager, handler.log)
            roots = kernels.kernel_root_pids(handler.kernel_manager)
        me = privacy.full_view_uid(self.service.show_other_users_processes)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self._render_sync, snap, roots, paths, me)

    def _render_sync(self, snap: Any, roots: dict[int, str], paths: dict[str, str], me: int | None) -> bytes:
        from ..export.families import exported_processes

        processes: dict[int, Any] = {}
        # Only the processes that get a series are attributed (a /proc walk each) and redacted.
        cut = [{**dev, "processes": exported_processes(dev.get("processes"))} for dev in snap["devices"]]
        for dev in attribution.attribute(cut, roots, paths):
            procs = dev["processes"]
            if procs is not None and me is not None:
                procs = [privacy.redact_process(p, me) for p in procs]
            processes[dev["index"]] = procs
        return self.exposition.render_devices(snap, self.service.devices(), processes)


class PrometheusMetricsHandler(BaseApiHandler):
    """GET the exposition. Errors (403, 400) stay JSON like the rest of the API."""

    # A scrape every few seconds is not a person using the server: it must not keep JupyterHub's
    # idle culler from stopping it.
    _track_activity = False

    @allow_unauthenticated
    async def get(self) -> None:
        if not self.settings.get(ALLOW_KEY, False) and not self.current_user:
            raise web.HTTPError(403)
        self.check_params()
        from ..export.exposition import CONTENT_TYPE_LATEST

        scrapes = self.settings.get(SCRAPES_KEY)
        if scrapes is None:
            hostname = self.settings.get(HOSTNAME_KEY) or ""
            scrapes = self.settings[SCRAPES_KEY] = ServerScrapes(self.service, hostname)
        accepted = gzipped.accepts_gzip(self.request.headers)
        shared, rest = await scrapes.body(self, gzip=accepted)
        scrapes.watch(self, accepted)
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        await self.finish_shared(shared, rest)

    def compute_etag(self) -> None:
        return None  # every scrape is new (the health part), and hashing it is wasted work


def metrics_route() -> tuple[str, type[PrometheusMetricsHandler]]:
    """The route, under the server's base_url (the extension app prefixes it)."""
    return (METRICS_PATH, PrometheusMetricsHandler)
