"""The denominator of MFU: one worker's peak dense FLOP/s.

`pretrain.peak_tflops` wins when set. Unset, a GPU's peak comes from its name
(torch.cuda.get_device_name) in `DEVICE_PEAK_TFLOPS`: the vendor's dense bf16 tensor
peak (fp16 for V100 and T4, which have no bf16), without 2:4 sparsity, since that is
what a bf16 training step can reach. A CPU has no such figure (it depends on the cores,
the vector units and the clock), so without pretrain.peak_tflops a CPU run logs no MFU
rather than a made-up one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# substring of the device name (case-insensitive) -> dense bf16 TFLOP/s. Matched longest
# first, so "A100" is not taken for "A10", nor "L40S" for "L4", nor "H100 PCIe" for "H100".
DEVICE_PEAK_TFLOPS: dict[str, float] = {
    "B200": 2250.0, "B100": 1750.0,
    "GH200": 989.0, "H200": 989.0, "H100 PCIe": 756.0, "H100 NVL": 835.0, "H100": 989.0, "H800": 989.0,
    "A100": 312.0, "A800": 312.0, "A30": 165.0, "A10G": 70.0, "A10": 125.0,
    "L40S": 362.0, "L40": 181.0, "L4": 121.0,
    "RTX 6000 Ada": 364.0, "RTX A6000": 155.0, "RTX 4090": 165.0, "RTX 3090": 71.0,
    "V100": 125.0, "T4": 65.0,  # fp16: no bf16 tensor cores
    "MI300X": 1307.0, "MI250X": 383.0,
}


@dataclass(frozen=True)
class PeakFlops:
    """tflops: one worker's peak (None: no MFU); source: where it came from, in words
    (named by the MFU-above-100% warning); note: what to tell the user, or None."""

    tflops: float | None
    source: str
    note: str | None = None


def lookup_peak_tflops(device_name: str) -> float | None:
    """The table's peak for a device name such as "NVIDIA H100 80GB HBM3"; None if unknown."""
    name = device_name.lower()
    for key in sorted(DEVICE_PEAK_TFLOPS, key=len, reverse=True):
        if key.lower() in name:
            return DEVICE_PEAK_TFLOPS[key]
    return None


def resolve_peak(configured: float | None, device_type: str, device_name: str | None) -> PeakFlops:
    """The peak for MFU: `configured` (pretrain.peak_tflops), else the table's for a GPU
    named `device_name`; None on a CPU or an unknown GPU (with a note saying how to get MFU)."""
    if configured is not None:
        return PeakFlops(configured, f"pretrain.peak_tflops={configured:g}")
    if device_type == "cpu" or not device_name:
        return PeakFlops(None, "none", None)  # the usual CPU run: nothing to say
    tflops = lookup_peak_tflops(device_name)
    if tflops is None:
        return PeakFlops(None, "none", f"[pretrain] no MFU: the peak FLOP/s of {device_name!r} is not known; "
                                       "set pretrain.peak_tflops to its dense bf16 TFLOP/s to log it")
    return PeakFlops(tflops, f"the {device_name} bf16 peak of {tflops:g} TFLOP/s (pretrain.peak_tflops unset)")


def device_peak(configured: float | None, device: torch.device) -> PeakFlops:
    """`resolve_peak` for the engine's device."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return resolve_peak(configured, device.type, name)
