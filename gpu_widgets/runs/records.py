"""Everything a run logged, in columns: cheap to append from the training loop, safe to read from
the monitor's thread without a lock.

A row is one ``log()`` call: its step and wall time. Each key is a sparse column (the rows it
was logged at, and its values), so a key logged every 100 steps holds 1 % as many values, and a
key that appears mid-run needs no back-filling. A column holds ints (``array('q')``) until a
float arrives, then floats (``array('d')``), so ints come back as ints. No value is ever rounded:
a column whose values no longer all fit one of those exactly (an int beyond 64 bits, or one beyond
2**53 beside a float) becomes a list of Python numbers, kept as logged. Only the charts round.

Concurrency: one thread appends (the loop); readers take ``len`` first and never look past a row
that was not yet published (``size`` is incremented last, under the GIL). Readers copy slices,
which are atomic in CPython; they never hold a buffer on an array the loop appends to.
"""
from __future__ import annotations

import json
import math
import threading
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from .scalars import Deferred, coerce

NAN = math.nan
RESERVED = frozenset({"step", "time"})
EXACT = 2**53  # every int within +-EXACT is a float too, exactly
I64 = 2**63
# Held while a column is copied into its new kind, and while the monitor's thread writes a tensor's
# value in place: that write must not land in the old copy. Both are rare; appends never take it.
_SWAP = threading.Lock()


class Series:
    """One key's values and the rows they were logged at."""

    __slots__ = ("key", "rows", "values")

    def __init__(self, key: str) -> None:
        self.key = key
        self.rows = array("q")
        self.values: array | list = array("q")

    def add(self, v: int | float) -> None:
        """Append what the fast path in ``Records.append`` left: a float into ints, an int beyond
        +-2**53, a value into a list column. Changes the column's kind (for good) rather than a value."""
        values = self.values
        if type(values) is list:
            values.append(v)
            return
        if type(v) is int:
            if values.typecode == "q" and -I64 <= v < I64:
                values.append(v)
                return
            if values.typecode == "d" and -EXACT <= v <= EXACT:
                values.append(v)  # an int among floats: the same number as a float
                return
            _check_plottable(self.key, v)
            with _SWAP:
                self.values = list(values)  # ints that a float or an int64 would change: Python ints
        elif values.typecode == "q":  # the first float among ints
            exact = all(-EXACT <= x <= EXACT for x in values)
            with _SWAP:
                self.values = array("d", values) if exact else list(values)
        self.values.append(v)


def _check_plottable(key: str, v: int) -> None:
    try:
        float(v)
    except OverflowError:
        raise ValueError(f"log({key}=...): an int of {v.bit_length()} bits is beyond what can be "
                         "plotted (about 1.8e308); log it scaled down") from None


class Records:
    def __init__(self) -> None:
        self.steps = array("q")
        self.times = array("d")
        self.size = 0  # published rows
        self.next_step = 0
        self.series: dict[str, Series] = {}
        # (series, position, row, Deferred): values read later on the monitor's thread.
        self.deferred: deque[tuple[Series, int, int, Deferred]] = deque()
        self.tensor_devices: set[str] = set()  # device types of the tensors logged ("cpu", "cuda")

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self.series)  # first-logged order

    @property
    def last_step(self) -> int | None:
        return self.steps[self.size - 1] if self.size else None

    def append(self, step: int, t: float, values: Mapping[str, Any]) -> None:
        """Add one row. Values are validated as they go; a bad one undoes the row and raises."""
        row = self.size
        series = self.series
        lo, hi = -EXACT, EXACT  # locals: this runs for every value logged
        try:
            for key, v in values.items():
                s = series.get(key)
                if s is None:
                    s = self._new_series(key)
                tv = type(v)
                if tv is float:
                    try:
                        s.values.append(v)
                    except TypeError:  # the first float into an int column
                        s.add(v)
                elif tv is int and lo <= v <= hi:  # fits every kind of column exactly
                    s.values.append(v)
                elif tv is int:
                    s.add(v)
                else:
                    self._append_other(s, row, v)
                s.rows.append(row)
            self.steps.append(step)
            self.times.append(t)
        except BaseException:  # including KeyboardInterrupt mid-row: leave no half row behind
            self._undo(row, values)
            raise
        self.size = row + 1
        self.next_step = step + 1

    def _new_series(self, key: str) -> Series:
        if key in RESERVED:
            raise ValueError(f"log({key}=...): {key!r} is reserved for the row's own {key}; use another name")
        s = self.series[key] = Series(key)
        return s

    def _append_other(self, s: Series, row: int, v: Any) -> None:
        value = coerce(s.key, v, self.tensor_devices)
        if isinstance(value, Deferred):
            s.add(NAN)  # placeholder until the monitor's thread reads the tensor
            self.deferred.append((s, len(s.values) - 1, row, value))
            return
        s.add(value)

    def _undo(self, row: int, values: Iterable[str]) -> None:
        for key in values:
            s = self.series.get(key)
            if s is None:
                continue
            if len(s.values) > len(s.rows):  # value appended, row not yet
                s.values.pop()
            if s.rows and s.rows[-1] == row:
                s.rows.pop()
                s.values.pop()
            if not s.rows and not s.values:
                del self.series[key]  # a key that never got a value does not exist
        del self.steps[row:]
        del self.times[row:]
        while self.deferred and self.deferred[-1][2] == row:
            self.deferred.pop()

    # -- loading -------------------------------------------------------------------------------
    def extend_rows(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Add whole rows (``{"step", "time", key: value...}``), e.g. from a saved file."""
        for r in rows:
            values = {k: v for k, v in r.items() if k not in RESERVED}
            step = r.get("step")
            self.append(self.next_step if step is None else int(step), float(r.get("time", NAN)), values)

    def adopt(self, other: "Records") -> None:
        """Take over the columns of ``other`` (a loaded run) without copying them; ``other`` must
        not be used afterwards. For a Records that others already hold (the monitor's)."""
        self.steps, self.times, self.series = other.steps, other.times, other.series
        self.deferred, self.tensor_devices = other.deferred, other.tensor_devices
        self.next_step = other.next_step
        self.size = other.size  # last: readers look no further than the published rows

    # -- reading (any thread) ------------------------------------------------------------------
    def resolve_deferred(self) -> list[str]:
        """Read the tensors logged since the last call; returns error messages (the value stays NaN)."""
        errors = []
        while self.deferred:
            try:
                s, pos, _row, d = self.deferred.popleft()
            except IndexError:
                break
            try:
                value = d.read()
                with _SWAP:
                    s.values[pos] = value
            except Exception as exc:  # a tensor that cannot be read (freed device, meta tensor)
                errors.append(f"could not read the tensor logged as {s.key!r}: {exc}")
        return errors

    def published_positions(self, s: Series, n_rows: int) -> int:
        """How many of ``s``'s values belong to the first ``n_rows`` rows."""
        m = min(len(s.rows), len(s.values))
        while m and s.rows[m - 1] >= n_rows:
            m -= 1
        return m

    def points(self, key: str, start: int, n_rows: int, time_origin: float | None = None) -> tuple[list[float], list[float], int]:
        """x and values of ``key`` from value position ``start``, up to row ``n_rows``. x is the
        step, or with ``time_origin`` the seconds from then to when the row was logged."""
        s = self.series.get(key)
        if s is None:  # a key whose only value was just refused (log() undid it)
            return [], [], start
        end = self.published_positions(s, n_rows)
        rows = s.rows[start:end]
        values = s.values[start:end]
        if time_origin is not None:
            times = self.times
            return [times[r] - time_origin for r in rows], list(values), end
        steps = self.steps
        return [steps[r] for r in rows], list(values), end

    def rows(self, start: int = 0, stop: int | None = None) -> list[dict[str, Any]]:
        """Rows ``start..stop`` as flat dicts: ``{"step", "time", key: value...}`` (keys logged there only)."""
        stop = self.size if stop is None else min(stop, self.size)
        if start >= stop:
            return []
        out = [{"step": self.steps[i], "time": self.times[i]} for i in range(start, stop)]
        for key, s in list(self.series.items()):
            end = self.published_positions(s, stop)
            pos = bisect_left(s.rows, start, 0, end)
            rows, values = s.rows[pos:end], s.values[pos:end]
            for r, v in zip(rows, values):
                out[r - start][key] = v
        return out

    def jsonl(self, start: int = 0, stop: int | None = None) -> str:
        """``rows(start, stop)`` as JSON lines, exactly as ``json.dumps`` writes them, built
        straight from the columns (the run log writes every row; a dict and an encoder call per
        row cost the monitor's thread 3x more)."""
        stop = self.size if stop is None else min(stop, self.size)
        if start >= stop:
            return ""
        uniform = self._uniform_jsonl(start, stop)
        if uniform is not None:
            return uniform
        steps, times = self.steps, self.times
        lines = [[f'{{"step":{steps[i]},"time":{_json_number(times[i])}'] for i in range(start, stop)]
        for key, s in list(self.series.items()):
            end = self.published_positions(s, stop)
            pos = bisect_left(s.rows, start, 0, end)
            name = _json_key(key)
            for r, v in zip(s.rows[pos:end], s.values[pos:end]):
                lines[r - start].append(name + _json_number(v))
        return "".join([",".join(parts) + "}\n" for parts in lines])

    def _uniform_jsonl(self, start: int, stop: int) -> str | None:
        """``jsonl`` when every row holds the same keys and only finite numbers (a loop logging
        the same values each step): one format string mapped over the columns, 2-3x faster, so
        the run log keeps up with a loop that only logs. None: use the general path."""
        n = stop - start
        template, columns = ['{"step":%d,"time":%r'], [self.steps[start:stop], self.times[start:stop]]
        for key, s in list(self.series.items()):
            end = self.published_positions(s, stop)
            pos = bisect_left(s.rows, start, 0, end)
            if end - pos == n:
                template.append("," + _json_key(key).replace("%", "%%") + "%r")
                columns.append(s.values[pos:end])
            elif end != pos:
                return None  # a key in some of these rows only
        for values in columns[1:]:
            if type(values) is array and values.typecode == "q":
                continue
            try:
                total = sum(values)
            except OverflowError:  # ints too big for a float among floats
                return None
            if total - total != 0:  # a NaN or an infinity (or a sum that overflowed): spelled as json does
                return None
        return "".join(map(("".join(template) + "}\n").__mod__, zip(*columns)))

    def latest(self) -> dict[str, Any]:
        """Each key's newest value."""
        out = {}
        n = self.size
        for key, s in list(self.series.items()):
            m = self.published_positions(s, n)
            if m:
                out[key] = s.values[m - 1]
        return out

    def rate(self, window_s: float | None = None) -> float | None:
        """Steps per second over the last ``window_s`` seconds of logging (None: the whole run).

        Counted by step number, not by rows: a framework that logs every 50th step (Lightning's
        ``log_every_n_steps``) still did 50 steps per row. Rows count where the step number did
        not advance (a loop that renumbers its steps)."""
        n = self.size
        if n < 2:
            return None
        times = self.times
        end = times[n - 1]
        first = 0 if window_s is None else bisect_left(times, end - window_s, 0, n - 1)
        dt = end - times[first]
        if not dt > 0:
            return None
        advanced = self.steps[n - 1] - self.steps[first]
        return (advanced if advanced > 0 else n - 1 - first) / dt

    def series_values(self, key: str) -> tuple[list[int], list[int | float]]:
        steps, values, _ = self.points(key, 0, self.size)
        return steps, values


_KEYS: dict[str, str] = {}


def _json_key(key: str) -> str:
    name = _KEYS.get(key)
    if name is None:
        if len(_KEYS) > 10_000:  # keys made up on the fly must not grow this for ever
            _KEYS.clear()
        name = _KEYS[key] = json.dumps(key) + ":"
    return name


def _json_number(v: float) -> str:
    """What json.dumps writes for an int or a float (NaN and infinities as Python's json does)."""
    if v - v == 0:
        return repr(v)
    if v != v:
        return "NaN"
    return "Infinity" if v > 0 else "-Infinity"
