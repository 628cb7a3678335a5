"""Stage 3, cost: how long an op or kernel takes at given shapes, dtypes and device.

The one model every what-if that adds or re-shapes work asks, host side
and device side, in two tiers:

- *measured* (`measure.py`): where torch is importable and the trace ran on this machine's kind of
  device (a CPU trace here), each distinct op signature a what-if creates or changes is run here,
  warm-up and repetitions, and cached on disk by (signature, device, torch version); torch.compile's
  runs of fused ops are compiled here with inductor and timed against their eager ops (`fused.py`);
- *modelled* (`roofline.py`, `host.py`): a kernel's time from its FLOPs and
  bytes at the efficiency this trace's own kernels of that class and precision
  achieved, with wave quantization from the device table; host work from this
  trace's own ops, and what the trace lacks in units of its host's speed.

Recorded shapes come from `shapes.py` (the trace's `Input Dims` / `Input type`). Each answer says
which tier gave it (`Tier`), so a prediction can say how much of its changed work each tier timed.

    costs = CostModel.of(trace, device)
    costs.host.unit_ns  # this host's dispatcher speed, ns
    costs.cast((2048, 512), "float", "c10::BFloat16")  # a cast: Timed(host_ns, device_ns, tier)
"""

from daydream.cost.host import HostCosts
from daydream.cost.measure import COMPILE_BUDGET_S
from daydream.cost.model import CostModel, CostOptions, Tier, Timed
from daydream.cost.roofline import Roofline, gemm_waves
from daydream.cost.shapes import OpShapes

__all__ = ["COMPILE_BUDGET_S", "CostModel", "CostOptions", "HostCosts", "OpShapes", "Roofline",
           "Tier", "Timed", "gemm_waves"]
