"""The device table: hardware facts every model in daydream takes its factors from.

Peak numbers are the vendors' published dense (no sparsity) figures for the SXM /
reference variants. They are used as *ratios* (fp16 tensor-core peak over fp32 peak,
memory bandwidth over memory bandwidth), never as absolute predictions of a kernel's
time, because real kernels do not run at peak.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from daydream.errors import InputError


@dataclass(slots=True, frozen=True)
class Device:
    name: str
    fp32_tflops: float  # SIMT fp32
    tf32_tflops: float | None  # tensor-core tf32 (None before Ampere)
    fp16_tflops: float  # tensor-core fp16/bf16 with fp32 accumulation (what AMP training uses)
    memory_bandwidth_gbs: float
    memory_gib: float
    interconnect_gbs: float  # per-GPU NVLink (or PCIe) bandwidth, one direction
    interconnect: str

    @property
    def amp_compute_factor_from_fp32(self) -> float:
        """Speed-up of a compute-bound kernel moving from fp32 SIMT to fp16 tensor cores."""
        return self.fp16_tflops / self.fp32_tflops

    @property
    def amp_compute_factor_from_tf32(self) -> float:
        """Speed-up of a compute-bound kernel already on tf32 tensor cores moving to fp16."""
        return self.fp16_tflops / self.tf32_tflops if self.tf32_tflops else self.amp_compute_factor_from_fp32


DEVICES: dict[str, Device] = {
    "V100": Device("Tesla V100-SXM2", 15.7, None, 125.0, 900.0, 32.0, 150.0, "NVLink 2"),
    "A100": Device("NVIDIA A100-SXM4", 19.5, 156.0, 312.0, 2039.0, 80.0, 300.0, "NVLink 3"),
    "H100": Device("NVIDIA H100 SXM5", 67.0, 494.7, 989.4, 3350.0, 80.0, 450.0, "NVLink 4"),
    "H200": Device("NVIDIA H200 SXM", 67.0, 494.7, 989.4, 4800.0, 141.0, 450.0, "NVLink 4"),
    "B200": Device("NVIDIA B200", 75.0, 1100.0, 2250.0, 8000.0, 180.0, 900.0, "NVLink 5"),
    "RTX 2080 Ti": Device("NVIDIA GeForce RTX 2080 Ti", 13.4, None, 53.8, 616.0, 11.0, 16.0, "PCIe 3.0 x16"),
}

#: Daydream's published constants, used for a GPU the table does not know.
FALLBACK_COMPUTE_FACTOR = 3.0
FALLBACK_MEMORY_FACTOR = 2.0

_ALIASES = [
    (re.compile(r"V100", re.I), "V100"),
    (re.compile(r"A100", re.I), "A100"),
    (re.compile(r"H100", re.I), "H100"),
    (re.compile(r"H200", re.I), "H200"),
    (re.compile(r"B200", re.I), "B200"),
    (re.compile(r"2080\s*Ti", re.I), "RTX 2080 Ti"),
]


def find_device(name: str | None) -> Device | None:
    """The table entry for a GPU name as traces spell it ("Tesla V100-SXM2-32GB"), or None."""
    if not name:
        return None
    if name in DEVICES:
        return DEVICES[name]
    for pattern, key in _ALIASES:
        if pattern.search(name):
            return DEVICES[key]
    return None


def device(name: str) -> Device:
    """Like `find_device`, but an unknown name is an input error."""
    found = find_device(name)
    if found is None:
        raise InputError(f"unknown device {name!r} — known: {', '.join(DEVICES)}")
    return found
