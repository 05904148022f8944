"""MFU's denominator: pretrain.peak_tflops when set, else the GPU's known bf16 peak by its
name; no MFU on a CPU without a peak; an MFU above 100% warns, naming where the peak came
from. Device names are strings here: no GPU needed."""

from __future__ import annotations

import warnings

import pytest

from stages.pretrain.config import PretrainConfig
from stages.pretrain.metrics import Throughput
from stages.pretrain.peak_flops import lookup_peak_tflops, resolve_peak


@pytest.mark.parametrize("name, tflops", [
    ("NVIDIA H100 80GB HBM3", 989.0), ("NVIDIA H200", 989.0), ("NVIDIA A100-SXM4-80GB", 312.0),
    ("NVIDIA A100 80GB PCIe", 312.0), ("NVIDIA A10", 125.0), ("NVIDIA A10G", 70.0), ("NVIDIA L4", 121.0),
    ("NVIDIA L40S", 362.0), ("NVIDIA H100 PCIe", 756.0), ("Tesla V100-SXM2-16GB", 125.0),
    ("NVIDIA GeForce RTX 4090", 165.0), ("AMD Instinct MI300X", 1307.0), ("Some Future GPU", None),
])
def test_known_devices_by_name_longest_match_first(name, tflops):
    assert lookup_peak_tflops(name) == tflops


def test_a_configured_peak_wins_and_a_cpu_has_none_unless_given():
    assert resolve_peak(200.0, "cuda", "NVIDIA H100 80GB HBM3").tflops == 200.0
    assert resolve_peak(None, "cuda", "NVIDIA H100 80GB HBM3").tflops == 989.0
    cpu = resolve_peak(None, "cpu", None)
    assert cpu.tflops is None and cpu.note is None
    assert resolve_peak(0.5, "cpu", None).tflops == 0.5
    unknown = resolve_peak(None, "cuda", "Some Future GPU")
    assert unknown.tflops is None and "pretrain.peak_tflops" in unknown.note


def test_no_peak_no_mfu_key():
    rates = Throughput(samples_per_step=8, tokens_per_sample=32, flops_per_sample=10**9,
                       peak_flops=None).rates(steps=3, seconds=1.5)
    assert rates == pytest.approx({"samples_per_s": 16.0, "tokens_per_s": 512.0})


def test_mfu_above_100_percent_warns_naming_the_peak():
    peak = resolve_peak(1.0, "cuda", "NVIDIA H100 80GB HBM3")  # a forgotten CPU-sized peak on a GPU
    throughput = Throughput(samples_per_step=8, tokens_per_sample=32, flops_per_sample=10**12,
                            peak_flops=peak.tflops * 1e12, peak_source=peak.source)
    with pytest.warns(RuntimeWarning, match=r"MFU above 100%.*pretrain\.peak_tflops=1"):
        assert throughput.rates(steps=1, seconds=1.0)["mfu"] == pytest.approx(8.0)
    quiet = Throughput(samples_per_step=8, tokens_per_sample=32, flops_per_sample=10**12,
                       peak_flops=1e12, warn=False)  # a rank other than 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet.rates(steps=1, seconds=1.0)
        # and below 100% nothing is said
        Throughput(8, 32, 10**9, peak_flops=1e12).rates(steps=1, seconds=1.0)


def test_peak_tflops_is_unset_by_default_and_stays_out_of_the_fingerprint_dump():
    section = PretrainConfig()
    assert section.peak_tflops is None and "peak_tflops" not in section.model_dump(mode="json")
    assert PretrainConfig(peak_tflops=989).model_dump(mode="json")["peak_tflops"] == 989
