"""The text exposition: rendered by prometheus-client from registries of our own, once per sample.

A scrape is two parts. The per-GPU part depends only on the sample, so it is rendered once per
sample and shared by every scraper (ten Prometheus servers scraping cost one render). The health
part (is the sample current, how old is it) changes with the clock, so it is rendered at each
scrape; it is a handful of lines. Neither part calls the driver: the sample, the spec cards and
the sampler's counters are all in memory already.
"""
from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from .._version import __version__
from ..backends import ConfigError, resolve_choice
from .families import BARE_COUNTERS, Health, device_families, health_families

__all__ = ["CONTENT_TYPE_LATEST", "Exposition", "GpuCollector", "asked_by_scrape", "health_of"]

# A scrape asks the sampler for GPM (SM active, tensor active, ...) for this long. Longer than the
# views' 30 s: Prometheus often scrapes every 30-60 s, and a lease that ran out between scrapes
# would leave every scrape with the figures null. Five minutes after the last scrape, they stop.
SCRAPE_GPM_LEASE_S = 300.0
SCRAPE_GPM_OWNER = "prometheus"

Processes = Mapping[int, "list[Mapping[str, Any]] | None"]  # device index -> its processes to export
# A render is cut into pieces of this many samples, and hands the GIL over (as samples.py does)
# once it held it YIELD_EVERY_S: rendering 64 GPUs takes ~100 ms, and the event loop of the
# server, waiting for the GIL at each socket call, would otherwise wait 5 ms (the switch
# interval) each time.
SAMPLES_PER_PIECE = 256
YIELD_EVERY_S = 0.002

# prometheus-client names a counter's HELP and TYPE lines with "_total"; put the bare name back.
_BARE_HEADER = re.compile(
    rb"^# (HELP|TYPE) (" + b"|".join(re.escape(n.encode()) for n in BARE_COUNTERS) + rb")_total ", re.M)


class GpuCollector(Collector):
    """A prometheus-client collector over one piece of one sample's per-GPU families (``view``).

    The view is set before each render (under the exposition's lock); the collector never reads
    the sampler itself, so what a scrape sees is exactly the sample it was rendered for.
    """

    def __init__(self, hostname: str) -> None:
        self.hostname = hostname
        self.view: list[Metric] = []

    def collect(self) -> Iterable[Any]:
        return self.view


class _Fixed(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Any]:
        return self.families


class _HealthCollector(Collector):
    def __init__(self) -> None:
        self.health: Health | None = None

    def collect(self) -> Iterable[Any]:
        return health_families(self.health) if self.health is not None else []


class Exposition:
    """What ``/metrics`` answers: ``render_devices`` once per sample (``cached`` finds it again)
    and ``render_health`` at every scrape. Thread-safe: the standalone exporter serves from
    several threads, the server renders in an executor."""

    def __init__(self, hostname: str) -> None:
        self.hostname = hostname
        self.collector = GpuCollector(hostname)
        self._health = _HealthCollector()
        # Registries of our own: the process-wide default one may hold whatever else the process
        # registered (and a second Jupyter extension doing the same must not collide with us).
        self._devices_registry = CollectorRegistry(auto_describe=False)
        self._devices_registry.register(self.collector)
        self._health_registry = CollectorRegistry(auto_describe=False)
        self._health_registry.register(self._health)
        self._lock = threading.Lock()
        # Its own lock: the health part is rendered on the server's event loop, which must
        # never wait for a per-GPU render running in a worker.
        self._health_lock = threading.Lock()
        self._last: tuple[object, bytes] | None = None
        self.renders = 0  # per-GPU renders so far (tests check that scrapers share them)

    def cached(self, snapshot: object) -> bytes | None:
        last = self._last
        return last[1] if last is not None and last[0] is snapshot else None

    def render_devices(self, snapshot: Mapping[str, Any], infos: Iterable[Mapping[str, Any]],
                       processes: Processes | None = None) -> bytes:
        """The per-GPU part for ``snapshot``, rendered now and kept for the next scrapers."""
        by_index = {info["index"]: info for info in infos if "index" in info}
        with self._lock:
            cached = self.cached(snapshot)
            if cached is not None:
                return cached
            pieces = []
            held = time.perf_counter()
            try:
                for family in device_families(snapshot["devices"], by_index, self.hostname, processes):
                    for start in range(0, len(family.samples), SAMPLES_PER_PIECE):
                        piece = Metric(family.name, family.documentation, family.type)
                        piece.samples = family.samples[start:start + SAMPLES_PER_PIECE]
                        self.collector.view = [piece]
                        text = generate_latest(self._devices_registry)
                        # A family's HELP and TYPE lines once, before its first piece.
                        pieces.append(text.split(b"\n", 2)[2] if start else text)
                        if time.perf_counter() - held > YIELD_EVERY_S:
                            time.sleep(0)  # lets a waiting event loop take the GIL now
                            held = time.perf_counter()
            finally:
                self.collector.view = []
            text = _BARE_HEADER.sub(rb"# \1 \2 ", b"".join(pieces))
            self._last = (snapshot, text)
            self.renders += 1
            return text

    def render_kernels(self, rows: Iterable[Mapping[str, Any]]) -> bytes:
        """The per-kernel GPU gauges of a Jupyter server (a handful of lines, rendered per scrape)."""
        from .families import kernel_families

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Fixed(kernel_families(rows)))
        return generate_latest(registry)

    def render_health(self, health: Health) -> bytes:
        with self._health_lock:
            self._health.health = health
            try:
                return generate_latest(self._health_registry)
            finally:
                self._health.health = None

    def scrape(self, service: Any, processes: Callable[[Any], Processes] | None = None) -> bytes:
        """A whole scrape in one go (the standalone exporter, on its serving thread).
        ``processes(snapshot)`` gives the process lists to export (redacted by the caller)."""
        asked_by_scrape(service)
        snap = service.latest() if service.ready else None
        parts = []
        if snap is not None:
            body = self.cached(snap)
            if body is None:
                body = self.render_devices(snap, service.devices(), processes(snap) if processes else None)
            parts.append(body)
        parts.append(self.render_health(health_of(service, self.hostname)))
        return b"".join(parts)


def asked_by_scrape(service: Any) -> None:
    """A scrape looks: renew the GPM lease "prometheus" on the service's sampler (once it is up).
    The first scrapes after a pause find the figures absent: GPM compares two reads."""
    sampler = service.sampler if service.ready else None
    if sampler is not None:
        sampler.want_gpm(SCRAPE_GPM_OWNER, lease_s=SCRAPE_GPM_LEASE_S)


def simulated_choice(choice: str | None) -> bool:
    """Whether the configured backend is the simulated one (known before it opens)."""
    try:
        return resolve_choice(choice) == "simulated"
    except ConfigError:
        return False


def health_of(service: Any, hostname: str) -> Health:
    """The health of a ``GpuService`` (service/service.py) right now: no driver call, the status
    and staleness it works out from the clock."""
    status = service.status()
    sampler = service.sampler if service.ready else None
    snap = sampler.latest if sampler is not None else None
    backend = status["backend"] or ""
    simulated = backend == "simulated" if backend else simulated_choice(service.backend_choice)
    return Health(
        version=__version__,
        backend=backend,
        simulated=simulated,
        hostname=hostname,
        up=status["status"] == "ok" and snap is not None,
        status=status["status"],
        sample_age_s=status["sample_age_s"],
        sample_timestamp=snap["timestamp"] if snap is not None else None,
        samples=sampler.ticks if sampler is not None else None,
        skipped_ticks=sampler.skipped_ticks if sampler is not None else None,
    )
