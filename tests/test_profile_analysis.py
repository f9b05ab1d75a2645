"""The profile analysis (issue 26): each verdict from synthetic Kineto traces of CUDA loops
(tests/kineto_traces.py, checked against a real trace here), and from real CPU profiles made in
this process; the breakdown, the top ops and the NVML notes; and every bad input's message."""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from gpu_widgets.profiling import VERDICTS, TraceError, analyze_trace, read_trace, trace_file
from gpu_widgets.profiling.result import BREAKDOWN
from .kineto_traces import A100, LOADER, P100, KinetoTrace

ELEMENTWISE = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
               "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)")
SGEMM = "ampere_sgemm_128x64_tn"
BF16_GEMM = "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel"
V100 = {"name": "Tesla V100-SXM2-16GB", "computeMajor": 7, "computeMinor": 0, "numSms": 80,
        "totalGlobalMem": 16_945_512_448}


def analyse(b: KinetoTrace, tmp_path: Path, **kw):
    p = analyze_trace(b.write(tmp_path / "synthetic.pt.trace.json"), **kw)
    assert list(p.breakdown) == list(BREAKDOWN)
    assert math.isclose(sum(p.breakdown.values()), 1.0, abs_tol=1e-6), p.breakdown
    assert all(v >= -1e-9 for v in p.breakdown.values()), p.breakdown
    assert p.verdict in VERDICTS and p.sentence.endswith(".") and p.status == "done"
    assert json.loads(json.dumps(p.as_dict()))["evidence"] == p.evidence  # a live profile sends it as JSON
    return p


def rows(n=10, **fields):
    """NVML samples of the profiled window, as a run's gpu.jsonl holds them."""
    return [{"t": 1.0e9 + i, "gpu": 0, **{k: (v(i) if callable(v) else v) for k, v in fields.items()}}
            for i in range(n)]


# --- the scenarios: what the host does each step (the builder simulates the GPU's stream) -------

def sync_loop(b: KinetoTrace, *, steps=4, busy=False, runtime_sync=True, tail_us=16_000.0, loader_us=0.0,
              copy_us=0.0, frames=("<built-in method item of Tensor object at 0x7f3a2c1e9b70>",)) -> None:
    """A step that launches its work, calls loss.item() in train.py(52): train_step, then runs
    Python (logging: ``tail_us``) while the GPU has nothing queued. ``busy``: the step queues
    19 ms of kernels, so the sync only waits for queued work and the next step follows at once.
    ``frames``: the Python frames between train_step and the op, outermost first."""
    t = 0.0
    b.py("train.py(80): <module>", -10, 1e9)
    for k in range(steps):
        s0 = t
        if loader_us:
            b.loader(t, loader_us)
            t += loader_us
        if copy_us:
            t = b.memcpy(t + 10, "HtoD", int(copy_us * 12_000), copy_us)  # pageable: 12 GB/s
        frame = b.py("train.py(52): train_step", t + 10, 0)  # its end is set below
        ext = b.op("aten::linear", t + 20, 300)
        for i in range(10 if busy else 1):
            b.launch(t + 30 + 20 * i, ELEMENTWISE, 1_900.0 if busy else 3_700.0, ext=ext)
        t += 400
        opened = [b.py(name, t + i, 0) for i, name in enumerate(frames)]
        end = b.item(t + len(frames), runtime_sync=runtime_sync)
        for i, frame_id in enumerate(reversed(opened)):
            b.close(python_id=frame_id, end=end + 1 + i)
        t = end + 5
        if not busy:
            b.py("train.py(60): log_metrics", t, tail_us)
            t += tail_us
        b.close(python_id=frame, end=t + 10)
        t += 20
        b.step(k + 1, s0, t - s0)


def copy_loop(b: KinetoTrace, *, steps=4, copy_us=6_000.0, compute_us=3_700.0, pinned=False) -> None:
    t = 0.0
    for k in range(steps):
        s0 = t
        ext = b.op("aten::copy_", t + 10, 0)
        end = b.memcpy(t + 20, "HtoD", int(copy_us * 12_000), copy_us, ext=ext, pinned=pinned)
        b.close(ext=ext, end=end + 2)  # the op's span covers its runtime call
        t = end + 10
        t = b.launch(t, ELEMENTWISE, compute_us) + compute_us + 100
        b.step(k + 1, s0, t - s0)


def matmul_loop(b: KinetoTrace, kernel: str, *, steps=4, gemm_us=9_000.0) -> None:
    t = 0.0
    for k in range(steps):
        s0 = t
        zero = b.op("aten::zero_", t, 8)  # the optimizer's zero_grad: a memset
        b.memset(t + 2, 1 << 20, 4.0, ext=zero)
        ext = b.op("aten::mm", t + 10, 40)
        b.launch(t + 15, kernel, gemm_us, ext=ext, grid=(8, 16, 1), block=(256, 1, 1))
        t = b.sync(t + 60) + 30
        b.step(k + 1, s0, t - s0)


def tiny_ops_loop(b: KinetoTrace, *, steps=3, ops=2_000, kernel=ELEMENTWISE, copy_us=0.0) -> None:
    """Thousands of element-wise ops a step, each 10 µs of dispatch around a 2 µs kernel."""
    t = 0.0
    for k in range(steps):
        s0 = t
        if copy_us:
            t = b.memcpy(t + 10, "HtoD", int(copy_us * 12_000), copy_us)
        for _ in range(ops):
            ext = b.op("aten::add", t, 10.0, seq=k)
            b.launch(t + 3, kernel, 2.0, ext=ext)
            t += 12.0
        t += 100
        b.step(k + 1, s0, t - s0)


# --- the verdicts --------------------------------------------------------------------------------

def test_a_sync_the_gpu_idles_after_is_sync_bound_and_names_the_op_and_frame(tmp_path):
    b = KinetoTrace()
    sync_loop(b)
    p = analyse(b, tmp_path)
    assert p.verdict == "sync-bound", p.sentence
    assert "aten::item" in p.sentence and "train.py(52): train_step" in p.sentence, p.sentence
    assert p.evidence["syncs_per_step"] == 1.0
    assert p.evidence["sync_op"] == "aten::item" and p.evidence["sync_frame"] == "train.py(52): train_step"
    assert 0.75 <= p.evidence["gpu_idle_after_sync_share"] <= 0.85, p.evidence
    assert p.steps == 4 and 19.5 <= p.evidence["step_ms"] <= 21
    assert 0.16 <= p.breakdown["gpu_kernels"] <= 0.2  # 3.7 ms of kernels in a 20 ms step
    assert p.breakdown["idle"] >= 0.7  # the Python after the sync, the GPU idle


def test_a_sync_inside_torch_and_library_frames_names_the_users_frame(tmp_path):
    b = KinetoTrace()  # print(loss): the sync happens deep inside torch's tensor printing
    sync_loop(b, frames=("logging/__init__.py(1489): info", "<built-in function print>",
                         "torch/_tensor.py(568): __repr__", "torch/_tensor_str.py(722): _str",
                         "torch/_tensor_str.py(643): _str_intern"))
    p = analyse(b, tmp_path)
    assert p.verdict == "sync-bound" and p.evidence["sync_frame"] == "train.py(52): train_step", p.evidence


def test_a_sync_while_the_gpu_stays_busy_is_not_sync_bound(tmp_path):
    b = KinetoTrace()
    sync_loop(b, busy=True)
    p = analyse(b, tmp_path)
    assert p.verdict == "compute-bound", p.sentence
    assert p.evidence["syncs_per_step"] == 1.0  # the sync is there ...
    assert p.evidence["gpu_idle_after_sync_share"] < 0.05, p.evidence  # ... but the GPU goes straight on
    assert p.breakdown["gpu_kernels"] >= 0.95


def test_item_and_a_device_to_host_copy_without_a_runtime_sync_is_sync_bound(tmp_path):
    b = KinetoTrace()
    sync_loop(b, runtime_sync=False)
    assert not [e for e in b.doc()["traceEvents"] if e.get("name") == "cudaStreamSynchronize"]
    p = analyse(b, tmp_path)
    assert p.verdict == "sync-bound", p.sentence
    assert p.evidence["syncs_per_step"] == 1.0  # item() holds _local_scalar_dense: one sync, not two
    assert "aten::item" in p.sentence and "train.py(52): train_step" in p.sentence


def test_an_item_on_a_cpu_tensor_is_no_sync(tmp_path):
    b = KinetoTrace()
    t = 0.0
    for k in range(3):
        s0 = t
        b.launch(t + 10, ELEMENTWISE, 2_000)
        b.op("aten::item", t + 50, 6)
        b.op("aten::_local_scalar_dense", t + 52, 2)
        t += 10_000
        b.step(k + 1, s0, t - s0)
    p = analyse(b, tmp_path)
    assert p.evidence["syncs_per_step"] == 0 and p.verdict == "compute-bound"


def test_pageable_host_to_device_copies_are_copy_bound(tmp_path):
    b = KinetoTrace()
    copy_loop(b)
    p = analyse(b, tmp_path)
    assert p.verdict == "copy-bound", p.sentence
    assert "pageable" in p.sentence and "pin_memory=True" in p.sentence and "non_blocking=True" in p.sentence
    assert 0.57 <= p.breakdown["copies"] <= 0.62, p.breakdown  # 6 ms of a 9.9 ms step
    assert 0.34 <= p.breakdown["gpu_kernels"] <= 0.39
    assert p.evidence["h2d_copies"] == 4 and p.evidence["pageable_copies"] == 4
    assert p.evidence["copy_overlap_share"] == 0


def test_pinned_copies_not_overlapped_with_compute_are_copy_bound_too(tmp_path):
    b = KinetoTrace()
    copy_loop(b, pinned=True)
    p = analyse(b, tmp_path)
    assert p.verdict == "copy-bound" and "not overlapped with compute" in p.sentence and "pageable" not in p.sentence
    assert p.evidence["pageable_copies"] == 0 and p.breakdown["copies"] >= 0.5  # the host runs ahead: shorter steps


def test_fp32_matmuls_on_an_ampere_gpu_with_idle_tensor_cores(tmp_path):
    b = KinetoTrace(devices=(A100,))
    matmul_loop(b, SGEMM)
    p = analyse(b, tmp_path, gpu_rows=rows(tensor_active_percent=0.0, utilization_gpu_percent=99.0,
                                           sm_active_percent=90.0))
    assert p.verdict == "fp32-matmul", p.sentence
    assert p.evidence["fp32_matmul_share"] == 1.0 and p.evidence["tensor_active_percent"] == 0
    assert "tensor activity 0 %" in p.sentence and "torch.bfloat16" in p.sentence and "allow_tf32" in p.sentence
    assert p.breakdown["gpu_kernels"] >= 0.98 and 0 < p.breakdown["copies"] < 0.001  # the memsets
    assert p.top_ops[0] == {"name": SGEMM, "kind": "gpu", "self_ms_per_step": pytest.approx(9.0),
                            "count_per_step": 1.0}


@pytest.mark.parametrize("kernel, devices, tensor", [
    (BF16_GEMM, (A100,), 45.0),  # already on the tensor cores
    (SGEMM, (P100,), None),  # a Pascal GPU has none
    (SGEMM, (A100,), 35.0),  # GPM says the tensor cores work (TF32)
])
def test_matmuls_that_are_not_fp32_on_idle_tensor_cores_are_compute_bound(tmp_path, kernel, devices, tensor):
    b = KinetoTrace(devices=devices)
    matmul_loop(b, kernel)
    p = analyse(b, tmp_path, gpu_rows=rows(tensor_active_percent=tensor) if tensor is not None else ())
    assert p.verdict == "compute-bound", p.sentence
    assert "The GPU runs kernels 9" in p.sentence


def test_fp32_matmuls_on_a_volta_gpu_are_told_float16(tmp_path):
    b = KinetoTrace(devices=(V100,))
    matmul_loop(b, "volta_sgemm_128x64_nn")
    p = analyse(b, tmp_path)  # no GPM rows: the kernels' names decide
    assert p.verdict == "fp32-matmul" and "torch.float16" in p.sentence and "bfloat16" not in p.sentence


def test_thousands_of_tiny_kernels_are_launch_bound_with_nvml_notes(tmp_path):
    b = KinetoTrace()
    tiny_ops_loop(b)
    gpu_rows = rows(10, utilization_gpu_percent=98.0, sm_active_percent=6.0,
                    throttle_reasons=lambda i: ["sw_power_cap"] if i < 4 else [])
    p = analyse(b, tmp_path, gpu_rows=gpu_rows)
    assert p.verdict == "launch-bound", p.sentence
    assert "2,000 small ops" in p.sentence and "torch.compile" in p.sentence and "idles between kernels" in p.sentence
    assert "power cap 40%" in p.sentence and "busy 98 % but SM active 6 %" in p.sentence, p.sentence
    ev = p.evidence
    assert ev["ops_per_step"] == 2000 and ev["kernels_per_step"] == 2000 and ev["op_mean_us"] == 10.0
    assert ev["power_cap_share"] == 0.4 and ev["nvml_samples"] == 10
    assert 0.15 <= p.breakdown["gpu_kernels"] <= 0.18  # 2 µs of every 12
    assert 0.62 <= p.breakdown["cpu_ops"] <= 0.7  # the rest of each 10 µs op: 8 of every 12 µs
    add = next(o for o in p.top_ops if o["name"] == "aten::add")
    assert add["kind"] == "cpu" and add["count_per_step"] == 2000 and add["self_ms_per_step"] == pytest.approx(20.0)
    kern = next(o for o in p.top_ops if o["kind"] == "gpu")
    assert kern["name"] == ELEMENTWISE and kern["count_per_step"] == 2000
    assert kern["self_ms_per_step"] == pytest.approx(4.0)


def test_lost_nvml_rows_are_left_out_and_few_capped_samples_say_nothing(tmp_path):
    b = KinetoTrace()
    matmul_loop(b, BF16_GEMM)
    gpu_rows = rows(10, throttle_reasons=lambda i: ["sw_power_cap"] if i < 1 else []) + [{"lost": True}] * 5
    p = analyse(b, tmp_path, gpu_rows=gpu_rows)
    assert p.evidence["nvml_samples"] == 10 and p.evidence["power_cap_share"] == 0.1
    assert "NVML" not in p.sentence


# --- precedence: a pair of causes that both hold, the first of VERDICTS wins --------------------

def test_input_comes_before_sync(tmp_path):
    both, alone = KinetoTrace(), KinetoTrace()
    sync_loop(both, loader_us=12_000, tail_us=8_000)
    sync_loop(alone, tail_us=8_000)
    p, q = analyse(both, tmp_path), analyse(alone, tmp_path)
    assert p.verdict == "input-bound" and p.evidence["gpu_idle_after_sync_share"] >= 0.3, p.evidence
    assert 0.5 <= p.breakdown["data_wait"] <= 0.6 and "DataLoader workers" in p.sentence
    assert q.verdict == "sync-bound"


def test_sync_comes_before_copy(tmp_path):
    both, alone = KinetoTrace(), KinetoTrace()
    sync_loop(both, copy_us=9_000, tail_us=9_000)
    copy_loop(alone, copy_us=9_000, compute_us=3_700)
    p, q = analyse(both, tmp_path), analyse(alone, tmp_path)
    assert p.verdict == "sync-bound" and p.evidence["copy_share"] >= 0.3, p.evidence
    assert q.verdict == "copy-bound"


def test_copy_comes_before_launch(tmp_path):
    both, alone = KinetoTrace(), KinetoTrace()
    tiny_ops_loop(both, ops=1_500, copy_us=9_000)
    tiny_ops_loop(alone, ops=1_500)
    p, q = analyse(both, tmp_path), analyse(alone, tmp_path)
    assert p.verdict == "copy-bound" and p.evidence["ops_per_step"] == 1500, p.evidence
    assert p.breakdown["cpu_ops"] + p.breakdown["idle"] >= 0.3
    assert q.verdict == "launch-bound"


def test_launch_comes_before_fp32_matmul(tmp_path):
    both, alone = KinetoTrace(), KinetoTrace()
    tiny_ops_loop(both, kernel="ampere_sgemm_32x32_sliced1x4_tn")
    matmul_loop(alone, SGEMM)
    p, q = analyse(both, tmp_path), analyse(alone, tmp_path)
    assert p.verdict == "launch-bound" and p.evidence["fp32_matmul_share"] == 1.0, p.evidence
    assert q.verdict == "fp32-matmul"


def test_the_monitors_data_wait_stands_in_for_a_loop_without_a_dataloader(tmp_path):
    b = KinetoTrace()
    sync_loop(b, tail_us=16_000)  # 4 steps of ~20 ms, the GPU idle ~80 % (where the wait can be)
    p = analyse(b, tmp_path, data_wait_s=0.040)
    assert p.verdict == "input-bound" and 0.48 <= p.breakdown["data_wait"] <= 0.52, p.breakdown
    assert 0.16 <= p.breakdown["gpu_kernels"] <= 0.2  # the GPU's share is not the wait's to take
    busy = KinetoTrace()
    matmul_loop(busy, BF16_GEMM)  # the GPU busy 99 %: a wait would have been hidden behind it
    q = analyse(busy, tmp_path, data_wait_s=0.018)
    assert q.verdict == "compute-bound" and q.breakdown["data_wait"] <= 0.02, q.breakdown


def test_gpu_side_step_annotations_are_not_steps(tmp_path):
    b = KinetoTrace()
    matmul_loop(b, BF16_GEMM)
    names = [(e["cat"], e["name"]) for e in b.doc()["traceEvents"] if str(e.get("name")).startswith("ProfilerStep")]
    assert ("gpu_user_annotation", "ProfilerStep#1") in names and ("user_annotation", "ProfilerStep#1") in names
    assert analyse(b, tmp_path).steps == 4


def test_steps_written_as_cpu_ops_by_older_torch_are_steps_not_ops(tmp_path):
    b = KinetoTrace()
    tiny_ops_loop(b, ops=1_000)
    doc = b.doc()
    for e in doc["traceEvents"]:
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"):
            e["cat"] = "cpu_op"
    p = analyze_trace(_write(tmp_path, json.dumps(doc)))
    assert p.steps == 3 and p.evidence["ops_per_step"] == 1_000 and p.verdict == "launch-bound"
    assert not [o for o in p.top_ops if o["name"].startswith("ProfilerStep#")]


# --- real CPU profiles, in this process --------------------------------------------------------

def _profile_cpu(tmp_path: Path, body, steps=4):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule
    path = tmp_path / "cpu.pt.trace.json"
    with profile(activities=[ProfilerActivity.CPU], with_stack=True,
                 schedule=schedule(wait=0, warmup=1, active=steps, repeat=1)) as prof:
        for _ in body(torch, steps + 1):
            prof.step()
    prof.export_chrome_trace(str(path))
    return path


def test_a_real_loader_that_sleeps_is_input_bound(tmp_path):
    def body(torch, n):
        class Slow(torch.utils.data.Dataset):
            def __len__(self):
                return 64

            def __getitem__(self, i):
                time.sleep(0.015)
                return torch.ones(16)
        model = torch.nn.Linear(16, 4)
        for i, x in enumerate(torch.utils.data.DataLoader(Slow(), batch_size=1)):
            model(x).sum().backward()
            yield
            if i + 1 >= n:
                return
    p = analyze_trace(_profile_cpu(tmp_path, body))
    assert p.verdict == "input-bound", p.sentence
    assert p.steps == 4 and p.breakdown["data_wait"] >= 0.6 and p.evidence["gpu_activity"] is False
    assert math.isclose(sum(p.breakdown.values()), 1.0, abs_tol=1e-6)


def test_a_real_cpu_loop_is_compute_bound_on_the_cpu(tmp_path):
    def body(torch, n):
        torch.manual_seed(0)
        x, w = torch.randn(320, 320), torch.randn(320, 320, requires_grad=True)  # ms of work an op
        for _ in range(n):
            (x @ w).relu().sum().backward()
            yield
    p = analyze_trace(_profile_cpu(tmp_path, body))
    assert p.verdict == "compute-bound" and "computes on the CPU" in p.sentence, p.sentence
    # the ops' own work dominates (a loaded machine's preemptions between ops count as idle)
    assert p.breakdown["cpu_ops"] >= 0.4 and p.breakdown["data_wait"] == 0, (p.breakdown, p.evidence)
    assert any(o["name"] == "aten::mm" and o["kind"] == "cpu" and o["count_per_step"] >= 1 for o in p.top_ops)
    # the machine's GPUs held by their power cap are not this CPU loop's story: no NVML note
    capped = analyze_trace(_profile_cpu(tmp_path, body), gpu_rows=rows(10, throttle_reasons=["sw_power_cap"],
                                                                      utilization_gpu_percent=99, sm_active_percent=3))
    assert capped.evidence["power_cap_share"] == 1.0 and "NVML" not in capped.sentence, capped.sentence


def test_a_real_loop_of_tiny_ops_is_launch_bound_on_the_cpu(tmp_path):
    def body(torch, n):
        x = torch.ones(8)
        for _ in range(n):
            for _ in range(1_200):
                x = x + 1e-3
            yield
    p = analyze_trace(_profile_cpu(tmp_path, body, steps=2))
    assert p.verdict == "launch-bound" and "on the CPU" in p.sentence, p.sentence
    assert p.evidence["ops_per_step"] >= 1_200


def test_builder_matches_a_real_cpu_trace(tmp_path):
    """The synthetic traces' keys, categories and args are a superset of what torch writes here."""
    def body(torch, n):
        class Data(torch.utils.data.Dataset):
            def __len__(self):
                return 16

            def __getitem__(self, i):
                return torch.ones(4)
        for i, x in enumerate(torch.utils.data.DataLoader(Data(), batch_size=2)):
            (x * 2).sum().item()
            yield
            if i + 1 >= n:
                return
    real = json.loads(_profile_cpu(tmp_path, body, steps=2).read_text())
    fake = KinetoTrace(cuda=False)
    fake.loader(0, 100)
    fake.py("train.py(52): train_step", 100, 50)
    fake.op("aten::mul", 110, 5, seq=1)
    fake.step(1, 0, 200)
    doc = fake.doc()
    assert set(real) <= set(doc), set(real) - set(doc)
    assert [k for k in doc if k in real] == list(real)

    def shapes(d):
        out: dict = {}
        for e in d["traceEvents"]:
            out.setdefault((e.get("ph"), e.get("cat")), set()).update(e)
            if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "python_function", "user_annotation"):
                out.setdefault(("args", e["cat"]), set()).update(e.get("args", {}))
        return out
    r, f = shapes(real), shapes(doc)
    for key in [("X", "cpu_op"), ("X", "python_function"), ("X", "user_annotation"), ("X", "Trace"), ("M", None),
                ("args", "python_function"), ("args", "user_annotation")]:
        assert r[key] <= f[key], (key, r[key] - f[key])
    assert {"External id", "Record function id", "Ev Idx"} <= f[("args", "cpu_op")] <= r[("args", "cpu_op")] | {
        "Sequence number", "Fwd thread id"}
    names = {e["name"] for e in real["traceEvents"] if e.get("cat") == "user_annotation"}
    assert LOADER in names and "ProfilerStep#1" in names
    assert isinstance(real["traceEvents"][-1]["ts"], float) and real["displayTimeUnit"] == doc["displayTimeUnit"]


# --- bad input ---------------------------------------------------------------------------------

def _write(tmp_path, text, name="t.pt.trace.json"):
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no such trace file: .*nope\.json"):
        analyze_trace(tmp_path / "nope.json")
    d = tmp_path / "traces"
    d.mkdir()
    with pytest.raises(IsADirectoryError, match=r"traces is a directory, not a trace file: .*no \*\.pt\.trace\.json"):
        analyze_trace(d)
    (d / "host_1.1700000.pt.trace.json").write_text("{}")
    with pytest.raises(IsADirectoryError, match=r"the latest trace in it: host_1\.1700000\.pt\.trace\.json"):
        analyze_trace(d)


@pytest.mark.parametrize("text, message", [
    ("not json at all", r"t\.pt\.trace\.json: not a profiler trace \(not JSON: Expecting value"),
    (b"\xff\xfe\x00garbage", r"not a profiler trace \(not JSON"),
    ("{}", r'not a profiler trace \(no "traceEvents" list; torch\.profiler\'s export_chrome_trace writes one\)'),
    ('{"traceEvents": {"ph": "X"}}', r'no "traceEvents" list'),
    ("42", r'no "traceEvents" list'),
    ('[1, "two", [3]]', r"not a profiler trace \(none of its 3 entries is a trace event"),
    ('{"traceEvents": [{"name": "x"}, {"ph": 3}]}', r"none of its 2 entries is a trace event"),
    ("[" * 100_000 + "]" * 100_000, r"not a profiler trace \(JSON nested too deeply\)"),
])
def test_json_that_is_not_a_trace(tmp_path, text, message):
    with pytest.raises(TraceError, match=message):
        analyze_trace(_write(tmp_path, text))


def test_gzip_good_and_damaged(tmp_path):
    b = KinetoTrace()
    matmul_loop(b, BF16_GEMM)
    good = b.write(tmp_path / "t.pt.trace.json.gz", gz=True)
    assert good.read_bytes()[:2] == b"\x1f\x8b" and analyze_trace(good).verdict == "compute-bound"
    data = good.read_bytes()
    damaged = data[:len(data) // 2] + bytes(b ^ 0x5A for b in data[len(data) // 2:len(data) // 2 + 64]) + \
        data[len(data) // 2 + 64:]
    with pytest.raises(TraceError, match=r"not a profiler trace \(a damaged gzip file: "):
        analyze_trace(_write(tmp_path, damaged, "d.pt.trace.json.gz"))
    with pytest.raises(TraceError, match=r"a damaged gzip file: Compressed file ended"):
        analyze_trace(_write(tmp_path, data[:len(data) // 2], "cut.pt.trace.json.gz"))


def test_size_and_event_limits(tmp_path, monkeypatch):
    b = KinetoTrace()
    matmul_loop(b, BF16_GEMM)
    plain, packed = b.write(tmp_path / "a.pt.trace.json"), b.write(tmp_path / "b.pt.trace.json.gz", gz=True)
    monkeypatch.setattr(trace_file, "MAX_BYTES", 4_000)
    assert packed.stat().st_size < 4_000 < plain.stat().st_size
    for p in (plain, packed):  # read, or once decompressed
        with pytest.raises(TraceError, match=r"over 4,000 bytes of JSON; profile fewer steps"):
            analyze_trace(p)
    monkeypatch.setattr(trace_file, "MAX_BYTES", 1 << 30)
    monkeypatch.setattr(trace_file, "MAX_EVENTS", 20)
    n = len(b.doc()["traceEvents"])
    with pytest.raises(TraceError, match=rf"a\.pt\.trace\.json: {n} events, more than 20; profile fewer steps"):
        analyze_trace(plain)


def test_events_of_the_wrong_types_are_skipped_and_counted(tmp_path):
    b = KinetoTrace()
    matmul_loop(b, BF16_GEMM)
    doc = b.doc()
    bad = [{"ph": "X", "cat": "kernel", "name": 5, "ts": 1.0, "dur": 1.0},
           {"ph": "X", "cat": "kernel", "name": "k", "ts": "1", "dur": 1.0},
           {"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0, "dur": -3},
           {"ph": "X", "cat": ["kernel"], "name": "k", "ts": 1.0, "dur": 1.0},
           {"ph": "X", "cat": "kernel", "name": "k", "ts": True, "dur": 1.0},
           {"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0, "dur": float("nan")},  # json writes NaN
           "not an event", None]
    doc["traceEvents"] += bad
    path = _write(tmp_path, json.dumps(doc))
    assert "NaN" in path.read_text()
    trace = read_trace(path)
    assert trace.skipped == 8
    assert analyze_trace(path).verdict == "compute-bound"  # the rest still reads


def test_nothing_profiled_is_a_clear_value_error(tmp_path):
    with pytest.raises(ValueError, match=r"the trace has no host events and no ProfilerStep#: nothing was profiled"):
        analyze_trace(_write(tmp_path, '{"traceEvents": []}'))
    with pytest.raises(ValueError, match="nothing was profiled"):
        analyze_trace(_write(tmp_path, "[]"))
    zero = KinetoTrace()
    zero.op("aten::add", 10, 5)
    zero.step(1, 0, 0)
    zero.step(2, 0, 0)
    with pytest.raises(ValueError, match=r"the trace's 2 ProfilerStep# spans last no time: profile at least one whole"):
        analyze_trace(zero.write(tmp_path / "z.pt.trace.json"))
    instant = KinetoTrace(cuda=False)
    instant.op("aten::add", 10, 0)
    with pytest.raises(ValueError, match=r"the trace's profiled steps last no time"):
        analyze_trace(instant.write(tmp_path / "i.pt.trace.json"))


# --- scale -------------------------------------------------------------------------------------

def test_a_trace_of_100k_events_analyses_in_seconds(tmp_path):
    b = KinetoTrace()
    tiny_ops_loop(b, steps=5, ops=4_000)  # 20k ops: op + launch + kernel + 2 flows each
    path = b.write(tmp_path / "big.pt.trace.json")
    n = len(json.loads(path.read_text())["traceEvents"])
    t0 = time.perf_counter()
    p = analyze_trace(path)
    took = time.perf_counter() - t0
    print(f"\n{n:,} events analysed in {took:.2f} s")
    assert n >= 100_000 and p.verdict == "launch-bound" and p.evidence["ops_per_step"] == 4_000
    assert took < 60, "the analysis must stay linear-ish"  # minutes would mean a quadratic step
