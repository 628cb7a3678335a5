#!/usr/bin/env python3
"""docs/devices.md from the device table (daydream/devices.py): every row, its figures and its source.

    python scripts/devices_doc.py            # writes docs/devices.md
    python scripts/devices_doc.py --out -
"""

from __future__ import annotations

import sys

from _generated import page_options, publish

from daydream.devices import SHORT_NAMES, markdown_table

HEADER = """# The device table

What `gpu:target=`, `amp`, `--memory` (capacity) and the distributed what-ifs take their figures from:
one row per GPU as a process sees it (an MI250 or MI250X is two dies, each its own device, so its
row holds one die: half the package). Written by `python scripts/devices_doc.py` from
`daydream/devices.py`; a test keeps the two the same.

- Peaks are **dense** TFLOPS (no sparsity). Where a vendor lists only sparse tensor figures, the
  dense one is half. FP16 and BF16 are tensor (matrix) core figures with FP32 accumulation, what
  mixed-precision training uses; "—" means the device has no such path (a V100 runs bf16 at its
  FP32 rate; a device without FP8 runs fp8 work at FP16).
- FP32 matrix: AMD's FP32 on matrix cores; an fp32 GEMM on NVIDIA runs at the FP32 (SIMT) figure.
- Memory is as the vendor states it (GB); the link is GPU-to-GPU, one direction (NVLink, Infinity
  Fabric, or PCIe where the card has nothing faster).
- The figures are used as ratios between two rows, never as a kernel's time: real kernels do not
  run at peak, and do not reach the same share of it on every GPU (docs/validation-cross-gpu.md).
- Matmul efficiency: the share of the dense BF16 peak that the best large matrix multiply reaches
  on that GPU as measured with `mamf-finder.py` (maximum-achievable matmul FLOPS, the source is
  cited in the row), from 51% on an MI300X to 87% on an A100 SXM. `gpu:target=` compares GEMM,
  convolution and attention kernels by peak × this share (`peaks=1`: by the peaks alone). In
  parentheses where nobody has published a measurement: the median of the vendor's measured rows.
  Vendor libraries improve, so these shares move with the software (the MI300X's went from about
  35% to 51–60% across ROCm releases); a measurement of your own stack is better than the table's.

Names are matched as traces record them (`Tesla V100-SXM2-32GB`, `NVIDIA H100 80GB HBM3`,
`AMD Instinct MI300X VF`, ROCm's generic `AMD Radeon Graphics` by its gfx architecture:
gfx942 is an MI300X, or an MI325X above 210 GB; gfx950 an MI355X; gfx90a one die of an MI250X
with 110 CUs, else of an MI250, whose figures an MI210 shares). Where rows differ only in
memory (A100 SXM 40GB and 80GB), the recorded memory size picks the row. Short names: """
HEADER += ", ".join(f"{short} = {row}" for short, row in SHORT_NAMES.items()) + ".\n"


def page() -> str:
    return HEADER + "\n" + markdown_table()


def main() -> int:
    options = page_options(__doc__.splitlines()[0], "devices.md", corpus=False).parse_args()
    publish(page(), options.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
