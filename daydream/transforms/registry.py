"""The registry of what-ifs: each `Optimization` (its parameters, its
time model in code and in words) under its name.

An optimization's `apply(graph, params, context)` changes the graph in place and returns notes for
people (what it did, with numbers); `describe()` states its model: which tasks it touches, by what
factor, where the factor comes from. The families of optimizations register themselves from their
own modules (transforms/__init__.py imports them); memory models are listed by name on the memory
side (daydream.memory.whatif.MEMORY_MODELS).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daydream.cost import CostModel
from daydream.devices import Device
from daydream.graph import Graph


@dataclass(slots=True, frozen=True)
class Context:
    """What an optimization may consult besides the graph."""

    device: Device | None = None
    device_name: str | None = None
    #: Gradient bytes of each layer's own parameters (module path ->
    #: bytes), where the trace records them.
    gradient_bytes: dict[str, int] = field(default_factory=dict)
    #: How many trainable parameter tensors those are, where the recording counts them (0: unknown).
    gradient_tensors: int = 0
    world_size: int = 0  # ranks of the job the trace comes from (0: unknown)
    #: Ranks of the job simulated together with this one (their
    #: recorded differences are in the job's time).
    simulated_ranks: int = 1
    #: Bytes of the model's buffers (BatchNorm statistics) by dtype, in the
    #: model's order, where a daydream recording lists them (empty: none or
    #: unknown; "": bytes of a recording that did not note their dtypes).
    buffers: dict[str, int] = field(default_factory=dict)
    #: The host daydream trace recorded (cpus, intra_op_threads); empty for other traces.
    host: dict[str, int] = field(default_factory=dict)
    #: Facts that take a pass over the trace, computed the first time an optimization asks for one
    #: (name -> how); see the properties below.
    derive: dict[str, Callable[[], Any]] = field(default_factory=dict)
    _derived: dict[str, Any] = field(default_factory=dict)

    @property
    def buffer_bytes(self) -> int:
        return sum(self.buffers.values())

    def made(self, name: str) -> Any:
        """Fact `name` if an optimization has asked for it, else None (without making it)."""
        return self._derived.get(name)

    def _fact(self, name: str) -> Any:
        if name not in self._derived:
            self._derived[name] = self.derive[name]() if name in self.derive else None
        return self._derived[name]

    @property
    def launch_blocks(self) -> np.ndarray | None:
        """Per trace row, the thread blocks its kernel launched (grid
        x*y*z; -1 where not recorded)."""
        return self._fact("launch_blocks")

    @property
    def gemm_shapes(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Per trace row, (FLOPs, elements read and written) of the matrix multiply whose op
        launched the kernel, from the op's recorded input shapes (NaN where not known)."""
        return self._fact("gemm_shapes")

    def elementwise_speed(self, on_gpu: bool) -> Any:
        """The trace's streaming elementwise ops' speed (transforms/distributed/copies.CopySpeed),
        timed by their kernels (`on_gpu`) or on the CPU; None without enough of them."""
        return self._fact("elementwise_gpu" if on_gpu else "elementwise_cpu")

    @property
    def costs(self) -> CostModel | None:
        """The cost stage's model of this trace (daydream/cost): what
        added or re-shaped work takes, host and device."""
        return self._fact("costs")

    @property
    def module_calls(self) -> Any:
        """Per module path, the start times (ns, in order) of its recorded forward calls (the
        `daydream.layer::PATH` ranges of a daydream recording); None where not derived."""
        return self._fact("module_calls")

    @property
    def compiler_view(self) -> Any:
        """The forward's and backward's top-level CPU ops as torch.compile sees them
        (cost/compiled.CompilerView)."""
        return self._fact("compiler_view")

    @property
    def forward_ops(self) -> Any:
        """Per iteration, the recorded forward's top-level ops with
        their inputs, and their spans (transforms/amp.py)."""
        return self._fact("forward_ops")

    @property
    def autocast_ops(self) -> Any:
        """`forward_ops` with the ops of no layer the training loop runs between the model's calls
        in forward (amp.forward_regions): what autocast decides on."""
        return self._fact("autocast_ops")

    @property
    def backward_gemms(self) -> Any:
        """The backward's matrix-multiply and convolution CPU ops: (row, name, inputs, duration ns,
        start ns, track, arguments) each."""
        return self._fact("backward_gemms")

    @property
    def backward_memory_ops(self) -> Any:
        """The backward's elementwise and normalization CPU ops (aten::*_backward): (row, duration
        ns, start ns, track, layer) each."""
        return self._fact("backward_memory_ops")

    @property
    def batch_ops(self) -> Any:
        """batch -> the trace's batch size (that one where above 0) and the CPU ops that carry it
        (transforms/batch.BatchOps); None where not derived."""
        return self._fact("batch_ops")

    @property
    def layer_parameters(self) -> Any:
        """Per layer (path), its type and own parameters' shapes as a daydream recording lists them
        (mapping/parameters.LayerParameters); None where not derived."""
        return self._fact("layer_parameters")

    @property
    def step_ops(self) -> Any:
        """The step's CPU ops with recorded shapes, each one's phase, and the parameters' shapes
        (transforms/width.StepOps); None where not derived."""
        return self._fact("step_ops")

    @property
    def layer_work(self) -> Any:
        """Per layer of the trace's attribution (the graph's `layers`), its forward's and backward's
        work and its forward's start (mapping.attribution.LayerWork); None without a trace."""
        return self._fact("layer_work")

    @property
    def large_host_blocks(self) -> Any:
        """Per iteration, the CPU blocks of 128 KiB or more the trace's ops asked for
        (cost/heap.LargeBlocks); None without CPU memory events."""
        return self._fact("large_host_blocks")

    @property
    def saved_tensors(self) -> Callable[[np.ndarray], Any] | None:
        """rows (host tasks' events: top-level CPU ops or launch calls) -> the tensors autograd
        saves for backward under each, and its ops the table does not know
        (cost/saved.SavedTensors); None without a trace."""
        return self._fact("saved_tensors")

    @property
    def launching_op(self) -> np.ndarray | None:
        """Per trace row, the CPU op whose launch made that GPU work
        (mapping/linking.py), -1 where none."""
        return self._fact("launching_op")

    @property
    def update_loop(self) -> np.ndarray | None:
        """Trace rows of a hand-written optimizer: the per-parameter in-place
        updates after backward (for a GPU trace, the kernels they launched),
        outside any optimizer step; None or empty where there is none."""
        return self._fact("update_loop")

    @property
    def stepped_optimizer(self) -> Any:
        """The torch.optim class the trace's optimizer steps name, and the shapes of the
        parameters one iteration's backward accumulated gradients for
        (cost/optimizer.SteppedOptimizer); None where either is missing."""
        return self._fact("stepped_optimizer")

    @property
    def loader_ranges(self) -> Any:
        """The trace's DataLoader `__next__` ranges
        (transforms/loading.LoaderRanges); None where not derived."""
        return self._fact("loader_ranges")

    @property
    def gpu_contention(self) -> tuple[float, int] | None:
        """(factor, kernels) of compute kernels slowed beside the
        trace's own collectives (None: no evidence)."""
        return self._fact("gpu_contention")


Apply = Callable[[Graph, dict[str, Any], Context], list[str]]


@dataclass(slots=True, frozen=True)
class Parameter:
    """One parameter of an optimization: how its text becomes a value, and the values it may take.

    `type` turns the text into a value (int, float, str, or a converter such as `bandwidth`);
    numbers must be finite and, where given, within `low`..`high` (inclusive).
    """

    type: Callable[[str], Any]
    default: Any
    help: str
    low: float | None = None
    high: float | None = None


#: The largest data-parallel job a what-if may model: ranks are simulated one by one.
MAX_WORLD = 65536
#: Bounds of a speed-up (or slow-down) factor: beyond them the prediction means nothing.
FACTOR_RANGE = {"low": 1e-3, "high": 1e6}
_RATE = (re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(?:([kKmMgGtT])(B|b|bit)(?:ps|"
                    r"/s)?)?\s*$"))
_RATE_SCALE = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def bandwidth(text: str) -> float:
    """A bandwidth in GB/s: '25' (GB/s), '25GB/s' or '25GBps' (bytes),
    '200Gbps', '200Gb/s' or '200Gbit/s' (bits)."""
    found = _RATE.match(str(text))
    if not found:
        raise ValueError(text)
    value, prefix, unit = float(found.group(1)), found.group(2), found.group(3)
    if prefix is None:
        return value
    return value * _RATE_SCALE[prefix.lower()] / (1 if unit == "B" else 8) / 1e9


@dataclass(slots=True, frozen=True)
class Optimization:
    """One what-if: its parameters and its time model (`apply`, a graph
    rewrite, and `model`, in words). Its memory model, where it has one,
    is in daydream.memory.whatif.MEMORY_MODELS under the same name."""

    name: str
    summary: str
    model: str  # the time model, in words: which tasks, what factor, where the factor comes from
    apply: Apply
    parameters: dict[str, Parameter] = field(default_factory=dict)

    def defaults(self) -> dict[str, Any]:
        """Every parameter at its default."""
        return {key: parameter.default for key, parameter in self.parameters.items()}

    def describe(self) -> str:
        params = ", ".join(f"{k}={p.default!r} ({p.help})" for k, p in self.parameters.items())
        return (f"{self.name}: {self.summary}\n  time: {self.model}"
                + (f"\n  parameters: {params}" if params else ""))


OPTIMIZATIONS: dict[str, Optimization] = {}
ALIASES = {"fused-adam": "fused-optimizer"}


def register(optimization: Optimization) -> Optimization:
    """Add `optimization` to OPTIMIZATIONS under its name."""
    OPTIMIZATIONS[optimization.name] = optimization
    return optimization
