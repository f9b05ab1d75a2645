"""Answers gzipped once and shared (service/gzipped.py): valid gzip whatever the tail, made once
for many requests, and through real HTTP with auth on the same JSON as without, far smaller."""
from __future__ import annotations

import asyncio
import gzip
import json
import os
import threading
import time
import zlib

import pytest

from gpu_widgets.service import gzipped
from gpu_widgets.service.gzipped import SharedBody, accepts_gzip

from .test_history_api import fill_window, service_of
from .test_server_api import PREFIX, wait_for

BODIES = [b"", b"{", b'{"a":[1,2,3]' * 2000, os.urandom(5000), bytes(range(256)) * 300]
TAILS = [b"", b"}", b',"server_time":1765151234.25}', os.urandom(3000)]


@pytest.mark.parametrize("raw", BODIES, ids=lambda b: f"{len(b)}B")
@pytest.mark.parametrize("tail", TAILS, ids=lambda b: f"tail{len(b)}B")
def test_the_shared_part_and_any_tail_are_one_gzip_member(raw, tail):
    head, end = SharedBody(raw).gzip(tail)
    data = head + end
    assert gzip.decompress(data) == raw + tail
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)  # exactly one member, nothing after it
    assert d.decompress(data) == raw + tail and d.eof and d.unused_data == b""


def test_each_answer_gets_its_own_tail_from_one_compression():
    body = SharedBody(b'{"timestamps":[' + b",".join(str(1.7e9 + i).encode() for i in range(20000)))
    calls = []
    real = zlib.compressobj

    def counting(*args, **kwargs):
        calls.append(args[2] if len(args) > 2 else kwargs.get("wbits"))
        return real(*args, **kwargs)

    zlib.compressobj = counting
    try:
        with_threads = []
        threads = [threading.Thread(target=lambda i=i: with_threads.append(
            (i, body.gzip(f'],"n":{i}}}'.encode())))) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        zlib.compressobj = real
    assert calls.count(31) == 1, calls  # the shared part's compressor (with the gzip header), once
    heads = {id(head) for _, (head, _) in with_threads}
    assert len(heads) == 1  # every answer sends the same bytes, not a copy
    for i, (head, end) in with_threads:
        assert json.loads(gzip.decompress(head + end))["n"] == i
    assert len(head) < len(body.raw) / 3


@pytest.mark.parametrize("header,accepted", [
    ("gzip, deflate, br, zstd", True), ("GZIP", True), ("br;q=1.0, gzip;q=0.5", True), ("*", True),
    ("gzip;q=0", False), ("gzip;q=0.0", False), ("gzip;q=x", False), ("identity", False), ("br", False), ("", False),
])
def test_accept_encoding_is_read_as_http_says(header, accepted):
    assert accepts_gzip({"Accept-Encoding": header}) is accepted


def test_small_bodies_are_not_worth_it():
    assert not SharedBody(b"x" * (gzipped.GZIP_MIN_BYTES - 1)).worth_compressing()
    assert SharedBody(b"x" * gzipped.GZIP_MIN_BYTES).worth_compressing()


EIGHT = {"backend": "simulated", "interval_s": 0.1, "window_s": 600.0}


@pytest.fixture
def eight_gpus(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setenv("GPU_WIDGETS_SIMULATED_GPUS", "8")
    return 8


async def _get(jp_fetch, *path, encoding: str | None, params=None):
    headers = {} if encoding is None else {"Accept-Encoding": encoding}
    return await jp_fetch(*PREFIX, *path, params=params or {}, headers=headers, decompress_response=False)


def _without_clock(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in ("server_time", "sample_age_s")}


@pytest.mark.parametrize("gw_config", [EIGHT])
async def test_a_gzip_client_gets_the_same_history_far_smaller(eight_gpus, jp_fetch, jp_serverapp, gw_config):
    await wait_for(jp_fetch, lambda s: len(s["devices"]) == eight_gpus, path=("samples", "latest"))
    service = service_of(jp_serverapp)
    service.sampler.stop()  # no new sample between the requests compared
    fill_window(service)
    since = str(service.sampler.history.since(None)["timestamps"][0] + 60)  # inside the window
    query = {"since": since, "max_points": "300"}
    plain = await _get(jp_fetch, "samples", encoding="identity", params=query)
    first = await _get(jp_fetch, "samples", encoding="gzip, deflate", params=query)
    time.sleep(0.01)
    second = await _get(jp_fetch, "samples", encoding="gzip", params=query)
    assert plain.headers.get("Content-Encoding") is None
    assert first.headers["Content-Encoding"] == "gzip" and "Accept-Encoding" in first.headers["Vary"]
    assert int(first.headers["Content-Length"]) == len(first.body)
    docs = [json.loads(plain.body), json.loads(gzip.decompress(first.body)), json.loads(gzip.decompress(second.body))]
    assert _without_clock(docs[0]) == _without_clock(docs[1]) == _without_clock(docs[2])
    assert docs[1]["server_time"] < docs[2]["server_time"]  # each answer's own clock, in its own tail
    assert len(docs[1]["timestamps"]) > 100 and len(docs[1]["devices"]) == eight_gpus
    assert len(first.body) * 5 < len(plain.body), (len(first.body), len(plain.body))
    # A client that refuses gzip gets it plain.
    refused = await _get(jp_fetch, "samples", encoding="gzip;q=0", params=query)
    assert refused.headers.get("Content-Encoding") is None and json.loads(refused.body)["devices"]


@pytest.mark.parametrize("gw_config", [EIGHT])
async def test_latest_processes_and_metrics_are_gzipped_and_the_small_answers_not(eight_gpus, jp_fetch, gw_config):
    await wait_for(jp_fetch, lambda s: len(s["devices"]) == eight_gpus, path=("samples", "latest"))
    latest = await _get(jp_fetch, "samples", "latest", encoding="gzip")
    assert latest.headers["Content-Encoding"] == "gzip"
    doc = json.loads(gzip.decompress(latest.body))
    assert len(doc["devices"]) == eight_gpus and doc["status"] == "ok" and doc["sample_age_s"] >= 0
    plain = json.loads((await _get(jp_fetch, "samples", "latest", encoding=None)).body)
    assert set(plain) == set(doc)
    # The few-kilobyte answers made on the loop: the spec cards, the metric catalogue.
    for route in (("devices",), ("metrics",)):
        packed = await _get(jp_fetch, *route, encoding="gzip")
        plain_body = (await _get(jp_fetch, *route, encoding=None)).body
        assert packed.headers["Content-Encoding"] == "gzip" and len(packed.body) < len(plain_body)
        assert json.loads(gzip.decompress(packed.body)) == json.loads(plain_body)
    status = await _get(jp_fetch, "status", encoding="gzip")
    assert status.headers.get("Content-Encoding") is None and json.loads(status.body)["backend"] == "simulated"
    scrape = await jp_fetch("gpu-widgets", "metrics", headers={"Accept-Encoding": "gzip"}, decompress_response=False)
    assert scrape.headers["Content-Encoding"] == "gzip"
    assert scrape.headers["Content-Type"].startswith("text/plain; version=")
    text = gzip.decompress(scrape.body).decode()
    assert "DCGM_FI_DEV_GPU_UTIL" in text and "gpu_widgets_up" in text
    assert "gpu_widgets_last_sample_age_seconds" in text  # the fresh tail, after the shared part


@pytest.mark.parametrize("gw_config", [{"backend": "simulated", "interval_s": 0.2}])
async def test_after_a_scrape_the_next_samples_exposition_is_made_before_the_next_scrape(jp_fetch, jp_serverapp, gw_config):
    from gpu_widgets.server.metrics_handler import SCRAPES_KEY

    await wait_for(jp_fetch, lambda s: s["device_count"] == 2)
    first = await jp_fetch("gpu-widgets", "metrics", headers={"Accept-Encoding": "gzip"}, decompress_response=False)
    assert first.code == 200
    scrapes = jp_serverapp.web_app.settings[SCRAPES_KEY]
    service = service_of(jp_serverapp)
    seen = service.latest()
    deadline = time.monotonic() + 10
    while service.latest() is seen and time.monotonic() < deadline:  # the next sample
        await asyncio.sleep(0.02)
    snap = service.latest()
    while scrapes.exposition.cached(snap) is None and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    made = scrapes.exposition.cached(snap)
    assert made is not None, "the sample after a scrape was not rendered ahead of the next one"
    while not (scrapes._shared and scrapes._shared[0] is made and scrapes._shared[1].deflated) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert scrapes._shared[1].deflated  # and gzipped, as the last scraper asked
    scrapes.stop()
    assert scrapes._unsubscribe is None
