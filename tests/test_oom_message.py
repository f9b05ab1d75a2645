"""PyTorch's out-of-memory messages read into numbers: today's wording, the older one, a private
pool, several processes, and messages in neither form (what they do say is still read)."""
from __future__ import annotations

import pytest

from gpu_widgets.memory.oom_message import parse_oom

GIB, MIB = 1 << 30, 1 << 20
# As c10's CUDA caching allocator words it (PyTorch 2.1+), two processes on the GPU
NOW = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.19 GiB of which "
       "512.00 MiB is free. Process 4242 has 30.00 GiB memory in use. Process 77 has 1.50 GiB memory in use. "
       "Including non-PyTorch memory, this process has 47.10 GiB memory in use. Of the allocated memory "
       "40.00 GiB is allocated by PyTorch, with 1.00 GiB allocated in private pools (e.g., CUDA Graphs), and "
       "7.50 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
       "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
       "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
OLD = ("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 11.17 GiB total capacity; 10.57 GiB already "
       "allocated; 11.81 MiB free; 10.68 GiB reserved in total by PyTorch) If reserved memory is >> allocated "
       "memory try setting max_split_size_mb to avoid fragmentation.")


def test_todays_message():
    facts = parse_oom(NOW)
    assert facts["gpu"] == 1 and facts["requested_bytes"] == 2 * GIB
    assert facts["total_bytes"] == round(79.19 * GIB) and facts["free_bytes"] == 512 * MIB
    assert facts["allocated_bytes"] == 40 * GIB and facts["reserved_unallocated_bytes"] == round(7.5 * GIB)
    assert facts["this_process_bytes"] == round(47.1 * GIB)
    assert facts["processes"] == [{"pid": 4242, "used_memory_bytes": 30 * GIB},
                                  {"pid": 77, "used_memory_bytes": round(1.5 * GIB)}]


def test_the_older_message_gives_the_same_facts():
    facts = parse_oom(OLD)
    assert (facts["gpu"], facts["requested_bytes"], facts["free_bytes"]) == (0, 20 * MIB, round(11.81 * MIB))
    assert facts["total_bytes"] == round(11.17 * GIB) and facts["allocated_bytes"] == round(10.57 * GIB)
    # reserved in total less allocated: what the newer message calls reserved but unallocated
    assert facts["reserved_unallocated_bytes"] == round(10.68 * GIB) - round(10.57 * GIB)
    assert facts["processes"] == [] and facts["this_process_bytes"] is None


@pytest.mark.parametrize("message", ["", "out of memory", "CUDA error: an illegal memory access", None, 42,
                                     "x" * 1_000_000])
def test_a_message_in_neither_form_gives_nones(message):
    facts = parse_oom(message)
    assert facts["processes"] == [] and {k: v for k, v in facts.items() if k != "processes"} == dict.fromkeys(
        ("requested_bytes", "total_bytes", "free_bytes", "allocated_bytes", "reserved_unallocated_bytes",
         "reserved_bytes", "this_process_bytes", "gpu"))


def test_a_cut_message_still_gives_what_it_says():
    facts = parse_oom("CUDA out of memory. Tried to allocate 512 bytes. GPU 3 has a total capacity of 4.00 GiB of wh")
    assert (facts["gpu"], facts["requested_bytes"], facts["total_bytes"], facts["free_bytes"]) == (3, 512, 4 * GIB, None)
