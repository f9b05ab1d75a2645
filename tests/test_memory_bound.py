"""History memory is fixed by configuration: a sampler fast-forwarded through 24 h at 1 Hz (8 GPUs,
a fake clock, the real tick path) holds no more than after its first hour."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # a day of sampling fast-forwarded: ~25 s

FAST_FORWARD = r"""
import json, psutil
from gpu_widgets.backends import SimulatedBackend
from gpu_widgets.sampling.sampler import Sampler

class FastForward:
    t = 0.0
    def monotonic(self): return self.t
    def wall(self): return 1.7e9 + self.t
    def wait(self, event, timeout): return event.is_set()

clock = FastForward()
backend = SimulatedBackend(n_gpus=8, seed=1, t0=1.7e9)
sampler = Sampler(backend, interval_s=1.0, window_s=3600.0, clock=clock)
backend.open()
sampler._read_slow()
rss = {}
for hour in range(1, 25):
    for _ in range(3600):
        clock.t += 1.0
        sampler.tick()
    if hour in (1, 24):
        rss[hour] = psutil.Process().memory_info().rss
print(json.dumps({"rss_1h": rss[1], "rss_24h": rss[24], "samples": len(sampler.history),
                  "capacity": sampler.history.capacity, "bytes_held": sampler.history.bytes_held}))
"""

MIB = 1 << 20
# The bound stated in docs/reliability.md.
RSS_BOUND_MIB = 150
GROWTH_BOUND_MIB = 8


def test_a_day_at_1_hz_stays_within_the_configured_history():
    out = subprocess.run([sys.executable, "-c", FAST_FORWARD], capture_output=True, text=True, check=True, timeout=300)
    r = json.loads(out.stdout)
    assert r["samples"] == r["capacity"] == 3601 + 10  # the hour, and 10 s of margin for readers
    # 8 GPUs x 22 columns x 3611 doubles + the timestamps, allocated once: 4.88 MiB. The four GPM
    # series (issue 15: SM active, occupancy, tensor, DRAM) added 0.88 MiB to the 3.99 MiB before;
    # still under the 5 MiB stated, so the bound stays (a 23rd column would pass it: decide then).
    assert r["bytes_held"] == r["capacity"] * 8 * (1 + 8 * 22), r
    assert r["bytes_held"] < 5 * MIB
    assert r["rss_24h"] - r["rss_1h"] < GROWTH_BOUND_MIB * MIB, r
    assert r["rss_24h"] < RSS_BOUND_MIB * MIB, r
