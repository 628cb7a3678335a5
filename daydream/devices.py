"""The device table: hardware facts every model in daydream takes its factors from.

Each row is one GPU as a process sees it (an MI250/MI250X is two dies, each its own device:
its row holds one die's half of the package), with the vendor's figures and where they come
from (`source`; the whole table, rendered, is docs/devices.md). Peaks are dense (no
sparsity): where a vendor lists only sparse tensor figures, the dense figure is half. The
figures are used as *ratios* between two devices (or two precisions of one), never as
absolute predictions of a kernel's time, because real kernels do not run at peak.

A name as traces spell it ("Tesla V100-SXM2-32GB", "AMD Instinct MI300X VF", ROCm's
generic "AMD Radeon Graphics" with its gfx architecture) is matched by `find_device`.
"""

from __future__ import annotations

import difflib
import re
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from daydream.errors import InputError

if TYPE_CHECKING:
    from daydream.trace import Trace


@dataclass(slots=True, frozen=True)
class Device:
    name: str  # the vendor's name of this variant
    fp32_tflops: float  # SIMT / vector fp32
    tf32_tflops: float | None  # tensor-core tf32 (None: no such path; fp32 work stays on fp32)
    # tensor-core (matrix-core) fp16 with fp32 accumulation (what AMP training uses)
    fp16_tflops: float
    memory_bandwidth_gbs: float
    memory_gib: float  # memory size as the vendor states it (GB)
    # GPU-to-GPU link bandwidth, one direction (NVLink, Infinity Fabric, or PCIe)
    interconnect_gbs: float
    interconnect: str
    key: str = ""  # the table's name for the row ("H100 SXM")
    vendor: str = "nvidia"
    fp64_tflops: float | None = None  # vector fp64
    # fp32 on matrix cores (AMD); None: fp32 GEMMs run on fp32_tflops
    fp32_matrix_tflops: float | None = None
    # tensor-core bf16 (None: no bf16 tensor path; bf16 runs at fp32)
    bf16_tflops: float | None = None
    fp8_tflops: float | None = None  # tensor-core fp8 (None: fp8 work runs at fp16)
    sm_count: int | None = None  # SMs (NVIDIA) or compute units (AMD)
    boost_mhz: int | None = None
    source: str = ""  # where the figures come from
    # measured maximum-achievable BF16 matmul / dense peak (None: not measured)
    matmul_efficiency: float | None = None

    @property
    def amp_compute_factor_from_fp32(self) -> float:
        """Speed-up of a compute-bound kernel moving from fp32 SIMT to fp16 tensor cores."""
        return self.fp16_tflops / self.fp32_tflops

    @property
    def amp_compute_factor_from_tf32(self) -> float:
        """Speed-up of a compute-bound kernel already on tf32 tensor cores moving to fp16."""
        return (self.fp16_tflops / self.tf32_tflops if self.tf32_tflops
                else self.amp_compute_factor_from_fp32)

    @property
    def achievable_fraction(self) -> float:
        """The share of its dense matrix peak a large, well-shaped GEMM
        reaches on this device: the measured one, or, where nobody has
        measured it, the median of the measured rows of the same vendor."""
        if self.matmul_efficiency is not None:
            return self.matmul_efficiency
        return VENDOR_MATMUL_EFFICIENCY.get(self.vendor, 1.0)

    def achievable_matrix_tflops(self, precision: str) -> float:
        """`matrix_tflops` times `achievable_fraction`: what compute-bound kernels run against when
        two GPUs are compared (vendors' libraries reach different shares of the datasheet peak:
        about 80% on an H100, about 51% on an MI300X)."""
        return self.matrix_tflops(precision) * self.achievable_fraction

    def matrix_tflops(self, precision: str) -> float:
        """The dense peak a GEMM, convolution or attention kernel of
        `precision` runs against on this device."""
        fp32 = max(self.fp32_tflops, self.fp32_matrix_tflops or 0.0)
        if precision in ("fp8", "int8"):
            return self.fp8_tflops or self.fp16_tflops
        if precision == "fp16":
            return self.fp16_tflops
        if precision == "bf16":
            return self.bf16_tflops or fp32
        if precision == "tf32":
            return self.tf32_tflops or fp32
        if precision == "fp64":
            return self.fp64_tflops or self.fp32_tflops / 2
        return fp32


_NV_V100 = ("NVIDIA Tesla V100 GPU datasheet (SXM2: 7.8 FP64, 15.7 FP32, 125 tensor TFLOPS, 900 "
            "GB/s, 300 GB/s NVLink); Volta architecture whitepaper (80 SMs, 1530 MHz)")
_NV_A100 = ("NVIDIA A100 Tensor Core GPU datasheet (9.7 FP64, 19.5 FP32, TF32 156, BF16/FP16 312 "
            "dense; 40GB 1,555 GB/s, 80GB PCIe 1,935 GB/s, 80GB SXM 2,039 GB/s; NVLink 600 GB/s, "
            "PCIe Gen4 64 GB/s); Ampere whitepaper (108 SMs, 1410 MHz)")
_NV_H100 = ("NVIDIA H100 Tensor Core GPU datasheet (SXM / PCIe / NVL; sparse tensor figures "
            "halved) and Hopper architecture whitepaper (SXM5 132 SMs at 1980 MHz, PCIe 114 SMs at "
            "1755 MHz)")
_NV_HGX = ("NVIDIA HGX B200 / B300 platform specifications, per GPU (8 GPUs per baseboard; sparse "
           "tensor figures halved)")
_AMD_MI200 = ("AMD Instinct MI200 series data sheets (MI210: 22.6 FP32 vector, 45.3 FP32 matrix, "
              "181 FP16/BF16; MI250: 45.3 / 90.5 / 362.1; MI250X: 47.9 / 95.7 / 383, 3.2 TB/s, 128 "
              "GB; Infinity Fabric up to 300 GB/s (MI210) and 800 GB/s (MI250/MI250X) per "
              "package); an MI250/MI250X row is one of its two dies")
_AMD_MI300 = ("AMD Instinct MI300X / MI325X data sheets (163.4 FP32, 653.7 TF32, 1307.4 FP16/BF16, "
              "2614.9 FP8 dense; MI300X 192 GB 5.3 TB/s, MI325X 256 GB 6 TB/s; 304 CUs at 2100 "
              "MHz; 7 Infinity Fabric links, 896 GB/s)")
_MAMF = ("achievable BF16 matmul: ml-engineering (S. Bekman), compute/accelerator/README.md, "
         "\"Maximum Achievable Matmul FLOPS comparison table\" (mean of 100 iterations of the best "
         "shape found by mamf-finder.py)")
_AMD_MI355 = ("AMD Instinct MI355X data sheet (157.3 FP32, 2.5 PF FP16/BF16, 5 PF FP8 dense; 288 "
              "GB HBM3E, 8 TB/s; 256 CUs at 2400 MHz; Infinity Fabric 1,075 GB/s)")


def _row(key: str, name: str, fp32: float, tf32: float | None, fp16: float, bandwidth: float,
         memory: float, link: float, link_name: str, source: str, *, vendor: str = "nvidia",
         fp64: float | None = None, fp32_matrix: float | None = None, bf16: float | None = None,
         fp8: float | None = None, sms: int | None = None, mhz: int | None = None,
         mamf: float | None = None) -> tuple[str, Device]:
    """One row; `mamf` is the measured maximum-achievable BF16 matmul
    TFLOPS (its source is `_MAMF`)."""
    efficiency = None
    if mamf is not None:
        efficiency = round(mamf / (bf16 or fp16), 3)
        source = f"{source}; {_MAMF} ({mamf:g} TFLOPS measured)"
    return key, Device(name, fp32, tf32, fp16, bandwidth, memory, link, link_name, key=key,
                       vendor=vendor, fp64_tflops=fp64, fp32_matrix_tflops=fp32_matrix,
                       bf16_tflops=bf16, fp8_tflops=fp8, sm_count=sms, boost_mhz=mhz, source=source,
                       matmul_efficiency=efficiency)


DEVICES: dict[str, Device] = dict([
    _row("V100 SXM2 16GB", "Tesla V100-SXM2-16GB", 15.7, None, 125.0, 900.0, 16, 150.0, "NVLink 2",
         _NV_V100, fp64=7.8, sms=80, mhz=1530),
    _row("V100 SXM2 32GB", "Tesla V100-SXM2-32GB", 15.7, None, 125.0, 900.0, 32, 150.0, "NVLink 2",
         _NV_V100, fp64=7.8, sms=80, mhz=1530),
    _row("A100 PCIe 40GB", "NVIDIA A100-PCIE-40GB", 19.5, 156.0, 312.0, 1555.0, 40, 32.0,
         "PCIe 4.0 x16", _NV_A100, fp64=9.7, bf16=312.0, sms=108, mhz=1410, mamf=252.9),
    _row("A100 PCIe 80GB", "NVIDIA A100 80GB PCIe", 19.5, 156.0, 312.0, 1935.0, 80, 32.0,
         "PCIe 4.0 x16", _NV_A100, fp64=9.7, bf16=312.0, sms=108, mhz=1410, mamf=252.9),
    _row("A100 SXM 40GB", "NVIDIA A100-SXM4-40GB", 19.5, 156.0, 312.0, 1555.0, 40, 300.0,
         "NVLink 3", _NV_A100, fp64=9.7, bf16=312.0, sms=108, mhz=1410, mamf=271.2),
    _row("A100 SXM 80GB", "NVIDIA A100-SXM4-80GB", 19.5, 156.0, 312.0, 2039.0, 80, 300.0,
         "NVLink 3", _NV_A100, fp64=9.7, bf16=312.0, sms=108, mhz=1410, mamf=271.2),
    _row("H100 PCIe", "NVIDIA H100 PCIe", 51.0, 378.0, 756.0, 2000.0, 80, 64.0, "PCIe 5.0 x16",
         _NV_H100, fp64=26.0, bf16=756.0, fp8=1513.0, sms=114, mhz=1755),
    _row("H100 SXM", "NVIDIA H100 80GB HBM3", 67.0, 494.7, 989.4, 3350.0, 80, 450.0, "NVLink 4",
         _NV_H100, fp64=34.0, bf16=989.4, fp8=1978.9, sms=132, mhz=1980, mamf=794.5),
    _row("H100 NVL", "NVIDIA H100 NVL", 60.0, 417.5, 835.5, 3900.0, 94, 300.0, "NVLink 4 (bridge)",
         _NV_H100, fp64=30.0, bf16=835.5, fp8=1670.5, sms=132),
    _row("H200", "NVIDIA H200", 67.0, 494.7, 989.4, 4800.0, 141, 450.0, "NVLink 4",
         "NVIDIA H200 Tensor Core GPU datasheet (SXM: FP32 67, TF32 989, BF16/FP16 1,979, FP8 "
         "3,958 TFLOPS with sparsity; 141 GB HBM3e at 4.8 TB/s; NVLink 900 GB/s); GH100 as in the "
         "H100 SXM (132 SMs, 1980 MHz)",
         fp64=34.0, bf16=989.4, fp8=1978.9, sms=132, mhz=1980, mamf=794.5),
    _row("B200", "NVIDIA B200", 75.0, 1125.0, 2250.0, 8000.0, 180, 900.0, "NVLink 5",
         _NV_HGX + " (HGX B200: FP32 600 TF, TF32 18 PF, FP16/BF16 36 PF, FP8 72 PF sparse, FP64 "
                   "296 TF, 1.4 TB; "
                   "NVLink 1.8 TB/s per GPU; 8 TB/s HBM3e per GPU; 148 SMs)",
         fp64=37.0, bf16=2250.0, fp8=4500.0, sms=148, mamf=1745.0),
    _row("B300", "NVIDIA B300 SXM6 AC", 75.0, 1125.0, 2250.0, 8000.0, 288, 900.0, "NVLink 5",
         _NV_HGX + " (HGX B300: FP32 600 TF, TF32 18 PF, FP16/BF16 36 PF, FP8 72 PF sparse, FP64 "
                   "10 TF, 2.3 TB; "
                   "NVLink 1.8 TB/s per GPU; 8 TB/s HBM3e per GPU)",
         fp64=1.25, bf16=2250.0, fp8=4500.0, mamf=1769.0),
    _row("L4", "NVIDIA L4", 30.3, 60.0, 121.0, 300.0, 24, 32.0, "PCIe 4.0 x16",
         "NVIDIA L4 Tensor Core GPU datasheet (FP32 30.3, TF32 120, FP16/BF16 242, FP8 485 TFLOPS "
         "with sparsity; 24 GB at 300 GB/s; PCIe Gen4 x16 64 GB/s); Ada whitepaper (58 SMs, 2040 "
         "MHz)",
         bf16=121.0, fp8=242.5, sms=58, mhz=2040),
    _row("L40S", "NVIDIA L40S", 91.6, 183.0, 366.5, 864.0, 48, 32.0, "PCIe 4.0 x16",
         "NVIDIA L40S GPU datasheet (FP32 91.6, TF32 366, FP16/BF16 733, FP8 1,466 TFLOPS with "
         "sparsity; 48 GB at 864 GB/s; PCIe Gen4 x16); 142 SMs at 2520 MHz",
         bf16=366.5, fp8=733.0, sms=142, mhz=2520),
    _row("A10", "NVIDIA A10", 31.2, 62.5, 125.0, 600.0, 24, 32.0, "PCIe 4.0 x16",
         "NVIDIA A10 Tensor Core GPU datasheet (FP32 31.2, TF32 62.5, BF16/FP16 125 TFLOPS dense; "
         "24 GB at 600 GB/s; PCIe Gen4 64 GB/s); GA102 (72 SMs, 1695 MHz)",
         bf16=125.0, sms=72, mhz=1695),
    _row("T4", "Tesla T4", 8.1, None, 65.0, 320.0, 16, 16.0, "PCIe 3.0 x16",
         "NVIDIA T4 Tensor Core GPU datasheet (FP32 8.1, mixed FP16/FP32 65 TFLOPS; 16 GB at 320 "
         "GB/s; PCIe Gen3 x16); Turing whitepaper (40 SMs, 1590 MHz)",
         sms=40, mhz=1590),
    _row("RTX 2080 Ti", "NVIDIA GeForce RTX 2080 Ti", 13.4, None, 53.8, 616.0, 11, 16.0,
         "PCIe 3.0 x16", "NVIDIA Turing GPU architecture whitepaper (RTX 2080 Ti: 13.4 FP32, 53.8 "
                         "FP16 tensor TFLOPS with FP32 accumulate; "
                         "11 GB at 616 GB/s; 68 SMs, 1545 MHz)",
         sms=68, mhz=1545),
    _row("RTX 3090", "NVIDIA GeForce RTX 3090", 35.6, 35.6, 71.0, 936.0, 24, 32.0, "PCIe 4.0 x16",
         "NVIDIA Ampere GA102 GPU architecture whitepaper (RTX 3090: 35.6 FP32, 35.6 TF32, 71 "
         "FP16/BF16 tensor TFLOPS with FP32 accumulate, dense; 24 GB at 936 GB/s; 82 SMs, "
         "1695 MHz)",
         bf16=71.0, sms=82, mhz=1695),
    _row("RTX 4090", "NVIDIA GeForce RTX 4090", 82.6, 82.6, 165.2, 1008.0, 24, 32.0, "PCIe 4.0 x16",
         "NVIDIA Ada GPU architecture whitepaper (RTX 4090: 82.6 FP32, 82.6 TF32, 165.2 FP16/BF16 "
         "and 330.3 FP8 tensor TFLOPS with FP32 accumulate, dense; 24 GB at 1,008 GB/s; 128 SMs, "
         "2520 MHz)",
         bf16=165.2, fp8=330.3, sms=128, mhz=2520),
    _row("RTX 5090", "NVIDIA GeForce RTX 5090", 104.8, 104.8, 209.5, 1792.0, 32, 64.0,
         "PCIe 5.0 x16", "NVIDIA RTX Blackwell GPU architecture whitepaper (RTX 5090: 104.8 FP32, "
                         "104.8 TF32, 209.5 FP16/BF16 and 419 FP8 "
         "tensor TFLOPS with FP32 accumulate, dense; 32 GB at 1,792 GB/s; 170 SMs, 2407 MHz)",
         bf16=209.5, fp8=419.0, sms=170, mhz=2407),
    _row("MI210", "AMD Instinct MI210", 22.6, None, 181.0, 1638.0, 64, 150.0, "Infinity Fabric",
         _AMD_MI200, vendor="amd", fp64=22.6, fp32_matrix=45.3, bf16=181.0, sms=104, mhz=1700),
    _row("MI250", "AMD Instinct MI250", 22.65, None, 181.05, 1638.0, 64, 200.0, "Infinity Fabric",
         _AMD_MI200, vendor="amd", fp64=22.65, fp32_matrix=45.25, bf16=181.05, sms=104, mhz=1700),
    _row("MI250X", "AMD Instinct MI250X", 23.95, None, 191.5, 1638.0, 64, 200.0, "Infinity Fabric",
         _AMD_MI200, vendor="amd", fp64=23.95, fp32_matrix=47.85, bf16=191.5, sms=110, mhz=1700,
         mamf=147.0),
    _row("MI300X", "AMD Instinct MI300X", 163.4, 653.7, 1307.4, 5300.0, 192, 448.0,
         "Infinity Fabric", _AMD_MI300, vendor="amd", fp64=81.7, fp32_matrix=163.4, bf16=1307.4,
         fp8=2614.9, sms=304, mhz=2100, mamf=668.4),
    _row("MI325X", "AMD Instinct MI325X", 163.4, 653.7, 1307.4, 6000.0, 256, 448.0,
         "Infinity Fabric", _AMD_MI300, vendor="amd", fp64=81.7, fp32_matrix=163.4, bf16=1307.4,
         fp8=2614.9, sms=304, mhz=2100, mamf=784.9),
    _row("MI355X", "AMD Instinct MI355X", 157.3, None, 2516.6, 8000.0, 288, 537.6,
         "Infinity Fabric", _AMD_MI355, vendor="amd", fp64=78.6, fp32_matrix=157.3, bf16=2516.6,
         fp8=5033.2, sms=256, mhz=2400, mamf=1565.0),
])

#: Per vendor, the median measured matmul efficiency: the share of peak
#: assumed for a row nobody has measured.
VENDOR_MATMUL_EFFICIENCY = {
    vendor: float(statistics.median({d.matmul_efficiency for d in DEVICES.values()
                                     if d.vendor == vendor and d.matmul_efficiency is not None}))
    for vendor in {d.vendor for d in DEVICES.values()}
}

#: Short names a person types (--device, gpu:target=) for the row they most often mean.
SHORT_NAMES = {"V100": "V100 SXM2 32GB", "A100": "A100 SXM 80GB", "H100": "H100 SXM"}

#: Daydream's published constants, used for a GPU the table does not know.
FALLBACK_COMPUTE_FACTOR = 3.0
FALLBACK_MEMORY_FACTOR = 2.0

#: A name as a trace records it -> the row; the first that matches wins, so the specific come first.
_BY_NAME = [
    (r"B300", "B300"), (r"B200", "B200"), (r"H200", "H200"),
    (r"H100.*NVL", "H100 NVL"), (r"H100.*PCIe", "H100 PCIe"), (r"H100", "H100 SXM"),
    (r"A100.*PCIe.*80|A100.*80GB.*PCIe", "A100 PCIe 80GB"), (r"A100.*PCIe", "A100 PCIe 40GB"),
    (r"A100.*40GB", "A100 SXM 40GB"), (r"A100", "A100 SXM 80GB"),
    (r"V100.*16GB", "V100 SXM2 16GB"), (r"V100", "V100 SXM2 32GB"),
    (r"L40S", "L40S"), (r"\bL4\b", "L4"), (r"\bA10\b", "A10"), (r"\bT4\b", "T4"),
    (r"5090", "RTX 5090"), (r"4090", "RTX 4090"), (r"3090", "RTX 3090"),
    (r"2080\s*Ti", "RTX 2080 Ti"), (r"MI355", "MI355X"), (r"MI325", "MI325X"), (r"MI300", "MI300X"),
    (r"MI250X", "MI250X"), (r"MI250", "MI250"), (r"MI210", "MI210"),
]
_PATTERNS = [(re.compile(pattern, re.I), key) for pattern, key in _BY_NAME]
_GENERIC_AMD = re.compile(r"AMD Radeon Graphics|^AMD Instinct\s*$|^gfx", re.I)


def _by_architecture(arch: str | None, compute_capability: str | None, memory_bytes: int | None,
                     sm_count: int | None) -> str | None:
    """ROCm's generic name: the row from the gfx architecture (or the
    compute capability ROCm maps it to)."""
    gfx = (arch or "").split(":")[0].lower()
    if not gfx and compute_capability:
        gfx = {"9.4": "gfx942", "9.5": "gfx950", "9.0": "gfx90a"}.get(compute_capability, "")
    if gfx in ("gfx940", "gfx941", "gfx942"):
        return "MI325X" if memory_bytes and memory_bytes > 210e9 else "MI300X"
    if gfx == "gfx950":
        return "MI355X"
    if gfx == "gfx90a":  # one die of an MI250X has 110 CUs; of an MI250, like the MI210's one, 104
        return "MI250X" if sm_count == 110 else "MI250"
    return None


def _nearest_memory(row: Device, memory_bytes: int | None) -> Device:
    """Among `row` and its variants that differ only in memory (A100
    SXM 40GB and 80GB), the one whose size is nearest the recorded
    memory ("NVIDIA A100-PG509-200" with 42 GB is the 40GB one)."""
    if not memory_bytes:
        return row
    variants = [d for d in DEVICES.values()
                if (d.vendor, d.fp32_tflops, d.fp16_tflops, d.interconnect)
                == (row.vendor, row.fp32_tflops, row.fp16_tflops, row.interconnect)]
    return min(variants, key=lambda d: abs(d.memory_gib * 1e9 - memory_bytes))


def find_device(name: str | None, *, arch: str | None = None, compute_capability: str | None = None,
                memory_bytes: int | None = None, sm_count: int | None = None,
                vendor: str | None = None) -> Device | None:
    """The table row for a GPU name as traces spell it ("Tesla V100-SXM2-32GB", "AMD Instinct MI300X
    VF"), a row's name ("H100 SXM") or a short name ("H100"); None when the table does not know it.
    A GPU a ROCm trace leaves unnamed (`vendor` "AMD ROCm", or a gfx architecture) is told by its
    architecture, memory and CU count."""
    if not name or not name.strip():
        rocm = vendor == "AMD ROCm" or (arch or "").lower().startswith("gfx")
        row = _by_architecture(arch, compute_capability, memory_bytes, sm_count) if rocm else None
        return DEVICES[row] if row else None
    if name in DEVICES:
        return DEVICES[name]
    if name in SHORT_NAMES:
        return DEVICES[SHORT_NAMES[name]]
    for pattern, key in _PATTERNS:
        if pattern.search(name):
            return _nearest_memory(DEVICES[key], memory_bytes)
    if _GENERIC_AMD.search(name):
        row = _by_architecture(arch, compute_capability, memory_bytes, sm_count)
        return DEVICES[row] if row else None
    return None


def device(name: str) -> Device:
    """Like `find_device`, but an unknown name is an input error."""
    found = find_device(name)
    if found is None:
        close = difflib.get_close_matches(name, [*DEVICES, *SHORT_NAMES], n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise InputError(f"unknown device {name!r} — {hint}known: {', '.join(DEVICES)} "
                         "(docs/devices.md)")
    return found


def markdown_table() -> str:
    """docs/devices.md's table: every row with its figures and its source."""
    def number(value: float | int | None) -> str:
        return "—" if value is None else f"{value:g}"

    def efficiency(d: Device) -> str:
        return (f"{d.matmul_efficiency:.1%}" if d.matmul_efficiency is not None
                else f"({d.achievable_fraction:.1%})")

    lines = ["| device | FP64 | FP32 | FP32 matrix | TF32 | FP16 | BF16 | FP8 | memory GB | GB/s | "
             "SMs/CUs | MHz | link GB/s (one way) | matmul efficiency | source |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|"]
    for key, d in DEVICES.items():
        lines.append(f"| {key} | {number(d.fp64_tflops)} | {number(d.fp32_tflops)} | "
                     f"{number(d.fp32_matrix_tflops)} | {number(d.tf32_tflops)} | "
                     f"{number(d.fp16_tflops)} | {number(d.bf16_tflops)} | {number(d.fp8_tflops)} "
                     f"| {number(d.memory_gib)} | {number(d.memory_bandwidth_gbs)} | "
                     f"{number(d.sm_count)} | {number(d.boost_mhz)} | {number(d.interconnect_gbs)} "
                     f"{d.interconnect} | {efficiency(d)} | {d.source} |")
    return "\n".join(lines) + "\n"


def recorded_device(trace: Trace) -> tuple[Device | None, str | None]:
    """The device-table row of the GPU the trace says it ran on (None if it does not say or the
    table does not know it), and the name as recorded."""
    if trace.meta.gpus:
        gpu = trace.meta.gpus[0]
        return find_device(gpu.name, arch=gpu.arch, compute_capability=gpu.compute_capability,
                           memory_bytes=gpu.total_memory_bytes, sm_count=gpu.sm_count,
                           vendor=vendor_of(trace)), gpu.name
    name = trace.gpu_names[0] if trace.gpu_names else None
    return find_device(name), name


def vendor_of(trace: Trace) -> str | None:
    """"AMD ROCm" or "NVIDIA CUDA" as the envelope's runtime fields say, else from the runtime calls
    the trace holds (hipLaunchKernel, cudaLaunchKernel); None for neither."""
    recorded = trace.meta.runtime.get("vendor")
    if isinstance(recorded, str):
        return recorded
    from daydream.trace import API_KINDS

    calls = {trace.strings[i][:3] for i in set(trace.name[trace.indices(*API_KINDS)].tolist())}
    return ("AMD ROCm" if "hip" in calls else "NVIDIA CUDA" if "cud" in calls or "cuL" in calls
            else None)
