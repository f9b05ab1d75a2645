"""CUDA_VISIBLE_DEVICES mapped to NVML indices, following CUDA's own rules."""
from gpu_widgets.sampling.visibility import cuda_visible_indices, shown_setting

UUIDS = ["GPU-aaaa1111-0000", "GPU-bbbb2222-0000", "GPU-bbbb3333-0000", "GPU-cccc4444-0000"]


def test_unset_means_every_gpu_and_empty_means_none():
    assert cuda_visible_indices(None, UUIDS) is None
    assert cuda_visible_indices("", UUIDS) == []


def test_indices_in_the_given_order():
    assert cuda_visible_indices("2,0", UUIDS) == [2, 0]
    assert cuda_visible_indices(" 1 , 3 ", UUIDS) == [1, 3]


def test_uuids_and_unique_prefixes():
    assert cuda_visible_indices("GPU-cccc4444-0000,GPU-aaaa", UUIDS) == [3, 0]
    assert cuda_visible_indices("gpu-AAAA1111-0000", UUIDS) == [0]


def test_cuda_stops_at_the_first_entry_it_cannot_resolve():
    assert cuda_visible_indices("0,7,1", UUIDS) == [0]  # 7 does not exist
    assert cuda_visible_indices("1,GPU-bbbb,0", UUIDS) == [1]  # ambiguous prefix
    assert cuda_visible_indices("-1,0", UUIDS) == []
    assert cuda_visible_indices("0,0,1", UUIDS) == [0]  # a repeated device ends the list
    assert cuda_visible_indices("MIG-1234,0", UUIDS) == []  # no such MIG instance


MIG = [[], ["MIG-11111111-aaaa", "MIG-22222222-bbbb"], [], ["MIG-33333333-cccc"]]


def test_a_mig_instance_maps_to_its_gpu_and_is_the_only_device():
    assert cuda_visible_indices("MIG-22222222-bbbb", UUIDS, MIG) == [1]
    assert cuda_visible_indices("mig-3333", UUIDS, MIG) == [3]  # a unique prefix, any case
    # CUDA uses one MIG instance per process: what follows it is not seen.
    assert cuda_visible_indices("MIG-33333333-cccc,MIG-11111111-aaaa,0", UUIDS, MIG) == [3]
    assert cuda_visible_indices("2,MIG-1111", UUIDS, MIG) == [2, 1]
    # CUDA 11's first form names the GPU and the instance numbers.
    assert cuda_visible_indices("MIG-GPU-cccc4444-0000/1/0", UUIDS, MIG) == [3]


def test_a_mig_entry_that_names_nothing_ends_the_list():
    assert cuda_visible_indices("MIG-", UUIDS, MIG) == []  # every instance matches: ambiguous
    assert cuda_visible_indices("MIG-99", UUIDS, MIG) == []
    assert cuda_visible_indices("0,MIG-99,1", UUIDS, MIG) == [0]
    assert cuda_visible_indices("MIG-GPU-cccc4444-0000", UUIDS, MIG) == []  # no instance numbers
    assert cuda_visible_indices("MIG-1111", UUIDS) == []  # MIG instances unknown (no NVML answer)


def test_an_index_too_long_for_any_machine_names_no_gpu_and_never_raises():
    # int() of 4300+ digits raises ValueError; CUDA just finds no such device and stops there.
    assert cuda_visible_indices("9" * 5000, UUIDS) == []
    assert cuda_visible_indices("2," + "9" * 5000 + ",0", UUIDS) == [2]
    assert cuda_visible_indices("0" * 5000 + "1", UUIDS) == [1]  # leading zeros: still GPU 1
    assert cuda_visible_indices("--1,0", UUIDS) == [] and cuda_visible_indices("\u00b2", UUIDS) == []
    assert shown_setting("9" * 5000) == f"{'9' * 40!r}... (5000 characters)"
    assert shown_setting("0,1") == "'0,1'"
