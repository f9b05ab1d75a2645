"""``GET {base_url}gpu-widgets/api/v1/cluster``: every host's GPUs, as the configured Prometheus has them.

Without ``host``: the overview (one row per host). With ``host=NAME``: that host's GPUs with a
short history, or a 404 when Prometheus knows no such host. Answers come from the cluster
service's cache (gpu_widgets/cluster/service.py): the loop only waits on non-blocking I/O.
"""
from __future__ import annotations

from tornado import web

from ..cluster.promql import LOOKBACK_S
from ..cluster.service import ClusterService
from .handlers import BaseApiHandler

MAX_HOST_CHARS = 253  # a DNS name's limit; dcgm-exporter's Hostname is the node's name


def host_param(arguments: dict[str, list[bytes]]) -> str | None:
    values = arguments.get("host")
    if not values:
        return None
    host = values[0].decode("utf-8", "replace").strip()
    if not host:
        raise web.HTTPError(400, "host: expected a host name (the Hostname label of its GPUs), got an empty value",
                            reason="bad_parameter")
    if len(host) > MAX_HOST_CHARS or not host.isprintable():
        raise web.HTTPError(400, f"host: expected a host name of at most {MAX_HOST_CHARS} printable characters, "
                            f"got {host[:80]!r}", reason="bad_parameter")
    return host


class ClusterHandler(BaseApiHandler):
    allowed_params = ("host",)

    @property
    def cluster(self) -> ClusterService:
        return self.settings["gpu_widgets_cluster"]

    @web.authenticated
    async def get(self) -> None:
        self.check_params()
        host = host_param(self.request.arguments)
        if host is None:
            answer = await self.cluster.overview()
        else:
            answer = await self.cluster.detail(host)
            if answer.payload is None:
                raise web.HTTPError(404, f"Prometheus has no GPUs with Hostname={host!r} in the last "
                                    f"{LOOKBACK_S // 60} minutes (see the overview for the hosts it has)",
                                    reason="not_found")
        self.set_header("Content-Type", "application/json")
        self.finish(answer.body)
