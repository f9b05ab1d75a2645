"""``GET {base_url}gpu-widgets/api/v1/cluster``: every host's GPUs, as the configured Prometheus has them.

Without ``host``: one page of the overview (a row per host; ``filter``, ``activity``, ``sort``,
``descending``, ``offset`` and ``limit`` choose it). With ``host=NAME``: that host's GPUs with a
short history, or a 404 when Prometheus knows no such host. Answers come from the cluster
service's cache (gpu_widgets/cluster/service.py): the loop only waits on non-blocking I/O.
"""
from __future__ import annotations

from tornado import web

from ..cluster import pages
from ..cluster.hostnames import host_problem
from ..cluster.promql import LOOKBACK_S
from ..cluster.service import ClusterService
from . import params
from .handlers import BaseApiHandler

PAGE_PARAMS = ("filter", "activity", "sort", "descending", "offset", "limit")


def host_param(arguments: dict[str, list[bytes]]) -> str | None:
    """The host exactly as given (spaces, control characters and all: Prometheus's label value may
    have them, and every host the overview lists must open); the overview's own rule bounds it."""
    values = arguments.get("host")
    if not values:
        return None
    host = values[0].decode("utf-8", "replace")
    problem = host_problem(host)
    if problem is not None:
        raise params.bad_request(f"host: expected a host name as the overview lists it (its Hostname label), "
                                 f"got {problem}: {host[:80]!r}")
    return host


def page_query(arguments: dict[str, list[bytes]]) -> pages.PageQuery:
    with params.as_bad_request():
        return pages.PageQuery(
            filter=params.text(arguments, "filter", pages.MAX_FILTER_CHARS),
            activity=params.choice(arguments, "activity", pages.ACTIVITIES, "all"),
            sort=params.choice(arguments, "sort", tuple(pages.SORT_COLUMNS), "host"),
            descending=params.flag(arguments, "descending"),
            offset=params.bounded_int(arguments, "offset", 0, 0, pages.MAX_OFFSET),
            limit=params.bounded_int(arguments, "limit", pages.MAX_PAGE_ROWS, 1, pages.MAX_PAGE_ROWS))


class ClusterHandler(BaseApiHandler):
    allowed_params = ("host", *PAGE_PARAMS)

    @property
    def cluster(self) -> ClusterService:
        return self.settings["gpu_widgets_cluster"]

    @web.authenticated
    async def get(self) -> None:
        self.check_params()
        host = host_param(self.request.arguments)
        if host is None:
            query = page_query(self.request.arguments)
            body = await self.cluster.overview(query)
        else:
            given = [name for name in PAGE_PARAMS if name in self.request.arguments]
            if given:
                raise params.bad_request(f"{given[0]}: only for the overview, not with host")
            answer = await self.cluster.detail(host)
            if answer.payload is None:
                raise web.HTTPError(404, f"Prometheus has no GPUs with Hostname={host!r} in the last "
                                    f"{LOOKBACK_S // 60} minutes (see the overview for the hosts it has)",
                                    reason="not_found")
            body = answer.body
        self.set_header("Content-Type", "application/json")
        self.finish_small(body.encode())
