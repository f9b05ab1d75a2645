"""Keep a plot of an ever-growing series bounded, at a cost proportional to the NEW points.

Re-downsampling a million-step loss curve four times a second would cost more than the training
loop's own Python. Instead, points are folded as they arrive into at most ``2 * max_points``
blocks, each remembering its lowest and highest value (in the order they happened); when the
blocks fill up, neighbours merge and every block covers twice as many points. Merging and the
payload's bound are both ``gpu_widgets.store.downsample``'s min/max buckets (the same as the GPU
history's), on the few thousand block extremes instead of the raw points: a merge is a bucket of
two blocks' four points. Peaks and dips survive both.
Blocks live in a NumPy array: reading them all for a redraw then costs tens of µs, not ms.

Non-finite values are not plotted (a NaN breaks a line, an inf breaks the scale); the first one
of each series is remembered so the monitor can say where the run went wrong.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .downsample import downsample, extremes


class Decimator:
    def __init__(self, max_points: int = 2000) -> None:
        if max_points < 4:
            raise ValueError(f"max_points must be at least 4, got {max_points}")
        self.max_points = max_points
        self.max_blocks = 2 * max_points
        self.width = 1  # raw points per closed block
        # Closed blocks, one row each: (x_first, y_first, x_second, y_second), the block's min and
        # max ordered by x. NumPy, because the redraw reads them all 4 times a second.
        self._blocks = np.empty((self.max_blocks, 4))
        self.n_blocks = 0
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
                o = self._open = [1, x, y, x, y]
            else:
                o[0] += 1
                if y < o[2]:
                    o[1], o[2] = x, y
                if y > o[4]:
                    o[3], o[4] = x, y
            if o[0] >= self.width:
                self._close()

    def _close(self) -> None:
        _, x_lo, y_lo, x_hi, y_hi = self._open  # type: ignore[misc]
        self._open = None
        self._blocks[self.n_blocks] = (x_lo, y_lo, x_hi, y_hi) if x_lo <= x_hi else (x_hi, y_hi, x_lo, y_lo)
        self.n_blocks += 1
        if self.n_blocks >= self.max_blocks:
            self._halve()

    def _halve(self) -> None:
        """Merge neighbouring blocks pairwise: each keeps the lower and the higher of its 4 points."""
        n = self.n_blocks
        k = n // 2
        odd = self._blocks[n - 1].copy() if n % 2 else None
        pts = self._blocks[:2 * k].reshape(-1, 2)  # each block's two points, in time order
        at = extremes(pts[:, 1], k)  # buckets of 4 points: two blocks
        self._blocks[:k] = pts[at.ravel()].reshape(k, 4)
        if odd is not None:
            self._blocks[k] = odd
            k += 1
        self.n_blocks = k
        self.width *= 2

    def points(self, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """At most ``max_points`` (or ``limit``, if smaller; at least 4) (x, y) points showing
        every peak and dip seen so far, as two float64 arrays."""
        cap = self.max_points if limit is None else max(4, min(limit, self.max_points))
        blocks = self._blocks[:self.n_blocks]
        if self._open is not None:
            _, x_lo, y_lo, x_hi, y_hi = self._open
            row = (x_lo, y_lo, x_hi, y_hi) if x_lo <= x_hi else (x_hi, y_hi, x_lo, y_lo)
            blocks = np.vstack((blocks, np.asarray(row, dtype=float)[None, :]))
        pts = blocks.reshape(-1, 2)  # first and second point of each block, interleaved
        keep = np.ones(len(pts), dtype=bool)
        keep[1::2] = (blocks[:, 2] != blocks[:, 0]) | (blocks[:, 3] != blocks[:, 1])  # one-point blocks
        xs, ys = pts[keep, 0], pts[keep, 1]
        if len(xs) > cap - 1:
            bx, cols = downsample(xs, {"y": ys}, cap - 1)
            xs, ys = np.asarray(bx, dtype=float), np.asarray(cols["y"], dtype=float)
        if self.last is not None and (not len(xs) or (xs[-1], ys[-1]) != self.last):
            # The line must end at the newest value, not at its block's extreme.
            xs, ys = np.append(xs, self.last[0]), np.append(ys, self.last[1])
        return xs, ys
