"""``GET .../api/v1/cells/summary``: what one cell of a kernel cost the GPU (docs/cells.md).

The front end sends the kernel id and the cell's start (and end, once it finished) as the kernel's
own messages date them; the answer comes from the kernel ledger (cell_ledger.py) and the GPU history,
made in a worker thread. Only this server's kernels are known: another user's is a 404 like any
unknown id, and other processes on a GPU are a count, never named.
"""
from __future__ import annotations

import asyncio
import re
import time

from tornado import web

from ..service.cell_cost import summarize
from . import params
from .cell_ledger import LEDGER_KEY
from .handlers import BaseApiHandler

KERNEL_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]{0,63}")
# A cell's times come from the kernel's clock, the same machine's as ours, give or take what
# the messages took: a little slack before "in the future".
CLOCK_SLACK_S = 5.0
MAX_CELL_S = 31 * 86400.0


class CellSummaryHandler(BaseApiHandler):
    allowed_params = ("kernel_id", "start", "end", "next_start")

    @web.authenticated
    async def get(self) -> None:
        self.check_params()
        now = time.time()
        args = self.request.arguments
        with params.as_bad_request():
            kernel_id = params.text(args, "kernel_id", 64)
            if not KERNEL_ID.fullmatch(kernel_id):
                raise params.BadParameter("kernel_id", f"expected a kernel id (letters, digits, '-'), got {kernel_id!r}")
            start = params.unix_seconds(args, "start")
            end = params.unix_seconds(args, "end")
            if start is None:
                raise params.BadParameter("start", "required: when the cell started, unix seconds")
            for name, value in (("start", start), ("end", end)):
                if value is not None and value > now + CLOCK_SLACK_S:
                    raise params.BadParameter(name, f"{value} is in the future (the server's time is {now:.3f})")
            if end is not None and end < start:
                raise params.BadParameter("end", f"the end ({end}) is before the start ({start})")
            next_start = params.unix_seconds(args, "next_start")
            if next_start is not None and (end is None or next_start < end):
                raise params.BadParameter("next_start", "the kernel's next cell starts after this one's end (and needs end)")
            if next_start is not None and next_start > now + CLOCK_SLACK_S:
                raise params.BadParameter("next_start", f"{next_start} is in the future (the server's time is {now:.3f})")
            if (end if end is not None else now) - start > MAX_CELL_S:
                raise params.BadParameter("start", "a cell of more than 31 days: not a cell's time")
        ledger = self.settings.get(LEDGER_KEY)
        if ledger is None or not ledger.known(kernel_id):
            raise web.HTTPError(404, f"no kernel {kernel_id!r} on this server (running or ended within the hour)",
                                reason="unknown_kernel")
        t1 = min(now, end) if end is not None else now
        entries, restarts, after = ledger.between(kernel_id, start, t1, next_start)
        if end is None:
            after = None  # running: there is no "after" yet
        history = self.service.sampler.history if self.service.sampler is not None else None
        loop = asyncio.get_running_loop()
        answer = await loop.run_in_executor(None, summarize, entries, restarts, history, start, t1, end is None,
                                            self.service.interval_s, after)
        booked = ledger.booked_until
        final = end is not None and booked is not None and booked >= end
        self.send({"kernel_id": kernel_id, **answer, "final": final, "server_time": time.time()})
