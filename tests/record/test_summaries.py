"""Tensor summaries: exact statistics on known tensors, NaN/Inf handling, and checksums that tell bits apart."""

import math

import pytest
import torch

from disttrace.tracer.record.summaries import MAX_VALUES, summarize


def test_known_values_and_statistics():
    s = summarize(torch.tensor([[-1.0, 5.0], [2.0, 2.0]]), full=True)
    assert s["values"] == [[-1.0, 5.0], [2.0, 2.0]]
    assert (s["numel"], s["min"], s["max"], s["mean"], s["nan"], s["inf"]) == (4, -1.0, 5.0, 2.0, 0, 0)
    assert s["norm"] == pytest.approx(math.sqrt(1 + 25 + 4 + 4))


def test_nan_and_inf_are_counted_and_left_out_of_the_statistics():
    s = summarize([torch.tensor([1.0, float("nan")]), torch.tensor([float("inf"), 3.0, -float("inf")])], full=False)
    assert (s["numel"], s["nan"], s["inf"], s["min"], s["max"], s["mean"]) == (5, 1, 2, 1.0, 3.0, 2.0)
    assert "values" not in s
    none_finite = summarize(torch.tensor([float("nan")]), full=True)
    assert none_finite["min"] is None and none_finite["max"] is None and none_finite["mean"] is None


def test_checksum_equal_bits_equal_sums_and_one_bit_differs():
    a = torch.randn(1000)
    b = a.clone()
    assert summarize(a, False)["checksum"] == summarize(b, False)["checksum"]
    b.view(torch.int32)[17] ^= 1  # the last bit of one mantissa
    assert summarize(a, False)["checksum"] != summarize(b, False)["checksum"]


@pytest.mark.parametrize("t, lo, hi", [
    (torch.tensor([3, -7, 2], dtype=torch.int64), -7, 3),
    (torch.tensor([True, False, True]), 0, 1),
    (torch.tensor([1.5, -2.5], dtype=torch.bfloat16), -2.5, 1.5),
    (torch.tensor([1.0 + 2.0j]), 1.0, 2.0),
])
def test_dtypes(t, lo, hi):
    s = summarize(t, full=True)
    assert (s["min"], s["max"]) == (lo, hi)


def test_values_only_for_small_tensors_and_lists_keep_their_shape():
    assert "values" not in summarize(torch.zeros(MAX_VALUES + 1), full=True)
    s = summarize([[torch.ones(2)], [torch.zeros(2)]], full=True)
    assert s["values"] == [[[1.0, 1.0]], [[0.0, 0.0]]] and s["numel"] == 4
    assert summarize([torch.ones(3)], full=True)["values"] == [1.0, 1.0, 1.0]  # c10d's [tensor] shows as the tensor
    assert summarize([], full=True) is None


@pytest.mark.parametrize("t", [
    torch.randn(1000), torch.tensor([1.0, float("nan"), float("inf"), -2.0]), torch.arange(7),
    torch.tensor([3e38, 3e38]), torch.randn(6).half(), torch.tensor([True, False]),
    torch.randn(3, dtype=torch.complex64), torch.randn(10)[1:], torch.randn(4, 6).t(), torch.tensor([float("nan")]),
])
def test_the_device_path_computes_what_the_cpu_path_does(t):
    """CUDA summaries come from _stats_tensor (branch-free, float64 sums); run here on CPU tensors, it must
    agree with the CPU path (float32 sums) to float32 precision, and exactly on the counts and checksum."""
    from disttrace.tracer.record import summaries

    cpu = summaries._as_dict(summaries._stats_cpu([t, t[:2]]))
    dev = summaries._as_dict(summaries._from_device(summaries._stats_tensor([t, t[:2]]).tolist()))
    assert cpu.keys() == dev.keys()
    for k in ("numel", "nan", "inf", "checksum", "min", "max"):
        assert cpu[k] == dev[k], k
    # to float32 precision of the data's scale (its rms), not of the result: the mean of 1,000 randn values is
    # near 0, and a float32 sum's rounding (~1e-8 of the rms here) failed a relative bound in 1 run of 100
    scale = dev["norm"] / dev["numel"] ** 0.5 if dev["norm"] is not None and dev["numel"] else 0.0
    for k in ("mean", "norm"):
        assert cpu[k] == pytest.approx(dev[k], rel=1e-5, abs=1e-6 * scale) if dev[k] is not None else cpu[k] is None
