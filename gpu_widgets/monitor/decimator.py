"""Keep a plot of an ever-growing series bounded, at a cost proportional to the NEW points.

Re-downsampling a million-step loss curve four times a second would cost more than the training
loop's own Python. Instead, points are folded as they arrive into at most ``2 * max_points``
blocks, each remembering its lowest and highest value (in the order they happened); when the
blocks fill up, neighbours merge and every block covers twice as many points. The payload is
then bounded by ``gpu_widgets.downsample`` (the same min/max buckets as the GPU history), which
works on the few thousand block extremes instead of the raw points. Peaks and dips survive both.

Non-finite values are not plotted (a NaN breaks a line, an inf breaks the scale); the first one
of each series is remembered so the monitor can say where the run went wrong.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from ..downsample import downsample

# A block: (x_first, y_first, x_second, y_second) with the block's min and max ordered by x.
Block = tuple[float, float, float, float]


def _merge(a: Block, b: Block) -> Block:
    pts = ((a[0], a[1]), (a[2], a[3]), (b[0], b[1]), (b[2], b[3]))
    lo = min(pts, key=lambda p: p[1])
    hi = max(pts, key=lambda p: p[1])
    first, second = (lo, hi) if lo[0] <= hi[0] else (hi, lo)
    return (first[0], first[1], second[0], second[1])


class Decimator:
    def __init__(self, max_points: int = 2000) -> None:
        if max_points < 4:
            raise ValueError(f"max_points must be at least 4, got {max_points}")
        self.max_points = max_points
        self.max_blocks = 2 * max_points
        self.width = 1  # raw points per closed block
        self.blocks: list[Block] = []
        self._open: list[float] | None = None  # [count, x_lo, y_lo, x_hi, y_hi]
        self.count = 0  # finite points folded in
        self.seen = 0  # all points fed, non-finite ones included
        self.first_nonfinite: tuple[int, float] | None = None  # (its position among the points fed, value)
        self.nonfinite = 0
        self.last: tuple[float, float] | None = None  # the newest finite point

    def extend(self, xs: Sequence[float], ys: Sequence[float]) -> None:
        for x, y in zip(xs, ys):
            self.seen += 1
            if y - y != 0:  # NaN or +-inf
                self.nonfinite += 1
                if self.first_nonfinite is None:
                    self.first_nonfinite = (self.seen - 1, y)
                continue
            self.count += 1
            self.last = (x, y)
            o = self._open
            if o is None:
                self._open = [1, x, y, x, y]
            else:
                o[0] += 1
                if y < o[2]:
                    o[1], o[2] = x, y
                if y > o[4]:
                    o[3], o[4] = x, y
            if self._open[0] >= self.width:
                self._close()

    def _close(self) -> None:
        _, x_lo, y_lo, x_hi, y_hi = self._open  # type: ignore[misc]
        self._open = None
        block = (x_lo, y_lo, x_hi, y_hi) if x_lo <= x_hi else (x_hi, y_hi, x_lo, y_lo)
        self.blocks.append(block)
        if len(self.blocks) >= self.max_blocks:
            b = self.blocks
            self.blocks = [_merge(b[i], b[i + 1]) for i in range(0, len(b) - 1, 2)] + ([b[-1]] if len(b) % 2 else [])
            self.width *= 2

    def points(self, limit: int | None = None) -> tuple[list[float], list[float]]:
        """At most ``max_points`` (or ``limit``, if smaller; at least 4) (x, y) points showing
        every peak and dip seen so far."""
        cap = self.max_points if limit is None else max(4, min(limit, self.max_points))
        xs: list[float] = []
        ys: list[float] = []
        blocks = list(self.blocks)
        if self._open is not None:
            _, x_lo, y_lo, x_hi, y_hi = self._open
            blocks.append((x_lo, y_lo, x_hi, y_hi) if x_lo <= x_hi else (x_hi, y_hi, x_lo, y_lo))
        for x1, y1, x2, y2 in blocks:
            xs.append(x1)
            ys.append(y1)
            if x2 != x1 or y2 != y1:
                xs.append(x2)
                ys.append(y2)
        if len(xs) > cap - 1:
            xs, cols = downsample(xs, {"y": ys}, cap - 1)
            ys = [math.nan if v is None else v for v in cols["y"]]
        if self.last is not None and (not xs or (xs[-1], ys[-1]) != self.last):
            # The line must end at the newest value, not at its block's extreme.
            xs.append(self.last[0])
            ys.append(self.last[1])
        return xs, ys
