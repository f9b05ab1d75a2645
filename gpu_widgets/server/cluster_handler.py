"""``GET {base_url}gpu-widgets/api/v1/cluster``: every host's GPUs, as the configured Prometheus has them.

Without ``host``: the overview (one row per host). With ``host=NAME``: that host's GPUs with a
short history, or a 404 when Prometheus knows no such host. Answers come from the cluster
service's cache (gpu_widgets/cluster/service.py): the loop only waits on non-blocking I/O.
"""
from __future__ import annotations

from tornado import web

from ..cluster.hostnames import host_problem
from ..cluster.promql import LOOKBACK_S
from ..cluster.service import ClusterService
from .handlers import BaseApiHandler


def host_param(arguments: dict[str, list[bytes]]) -> str | None:
    """The host exactly as given (spaces, control characters and all: Prometheus's label value may
    have them, and every host the overview lists must open); the overview's own rule bounds it."""
    values = arguments.get("host")
    if not values:
        return None
    host = values[0].decode("utf-8", "replace")
    problem = host_problem(host)
    if problem is not None:
        raise web.HTTPError(400, f"host: expected a host name as the overview lists it (its Hostname label), "
                            f"got {problem}: {host[:80]!r}", reason="bad_parameter")
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
