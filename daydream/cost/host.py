"""Host cost of ops, from the trace's own measurements.

Every host-side what-if needs to know what an op costs on *this* trace's host: a cast autocast
inserts, the wrapper of a checkpointed call. `HostCosts` reads it off the trace:

- `unit_ns`: the speed of this host's dispatcher, the median *exclusive* time (nested ops and API
  calls taken out) of the cheap ops every PyTorch trace runs (`aten::empty`, `aten::view`, ...). A
  cost the trace cannot show (the work a what-if adds that the recorded code never ran) is recorded
  once, elsewhere, in these units (`RECORDED_HOST_UNITS`) and converted with this host's unit, so a
  slower host pays proportionally more;
- `launch_ns`: the median host time of a kernel launch call.

    costs = HostCosts.of(trace)
    costs.unit_ns, costs.launch_ns, costs.recorded_ns("checkpoint.forward.cuda")
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from daydream.mapping.linking import innermost_enclosing
from daydream.trace import API_KINDS, EventKind, Trace, TrackKind, runtime_api

#: Cheap dispatcher ops that nearly every PyTorch trace runs: their
#: median exclusive time is the host's speed unit.
UNIT_OPS = ("aten::empty", "aten::view", "aten::t", "aten::detach", "aten::as_strided",
            "aten::empty_strided", "aten::transpose", "aten::reshape", "aten::expand",
            "aten::resolve_conj", "aten::resolve_neg", "aten::unsqueeze", "aten::select",
            "aten::slice", "aten::permute", "aten::alias", "detach")
#: Without any of them: the unit measured on the H200 host of
#: examples/h200 (median of its UNIT_OPS), ns.
DEFAULT_UNIT_NS = 1_500

#: Host costs a trace cannot show, in host units (`HostCosts.unit_ns`), per kind of trace ("cuda": a
#: GPU trace, "cpu": a CPU-only one), each with where it was measured. The checkpoint wrapper's own
#: work (torch.utils.checkpoint, use_reentrant=False: the RNG-state stash, the frames around the
#: recomputation; the saved-tensor hooks, which grow with the tensors the call's ops save for
#: backward, cost/saved.py), beyond the recomputed ops themselves: per checkpointed call
#: ("checkpoint.forward", "checkpoint.backward") and per saved tensor ("..._tensor"), forward and
#: backward apart.
#: cpu: `python scripts/host_costs.py --fit --with-call DIR/round-* RESNET/round-* --examples
#: mlp,cnn,transformer,resnet,speech,detection,dcgan,a2c` over five interleaved rounds of real
#: baseline / checkpoint pairs (`whatif_truth.py --device cpu --examples all --rounds 5 --keep DIR`,
#: 2026-12-05, traced with the heap reserve; RESNET the second run of resnet alone; 2.8 to 585
#: tensors saved per call): the least-squares line through the examples' medians, the recomputation
#: subtracted up to each call's last pack (early stop); its intercept the part per call, its slope
#: the part per tensor. (`--measure` times the wrapper alone, warm, on this machine: 68-111 units
#: forward and 179-230 backward per call, about a third of what the small blocks of the training
#: runs paid, 230-420 and 430-880; held at those, every model of few tensors per call came out
#: short, a2c by 19%. Its slope per tensor, 28.8-36.3 forward and 9.1-17.5 backward, put three
#: times the real cost forward and half of it backward: a GRU's 585 saved tensors cost about 9 and
#: 18 units each.)
#: cuda: `python scripts/host_costs.py examples/h200 examples/h200/realistic/round-1
#: examples/h200/realistic/round-2` (torch 2.11 + CUDA 13, H200 host, under daydream trace): the
#: median of nine pairs (the three small examples; cnn, a BERT-base-sized transformer and ResNet-50,
#: two runs each), each pair read in its baseline's unit, the recomputation up to each call's last
#: pack subtracted, per call forward 233-631 and backward 250-1251 units, their saved tensors
#: included (8 to 32 per call: the cost per call shows no growth with them over this spread, so no
#: per-tensor part is added on a GPU trace).
RECORDED_HOST_UNITS: dict[str, float] = {
    "checkpoint.forward.cuda": 408.2,
    "checkpoint.backward.cuda": 506.3,
    "checkpoint.forward_tensor.cuda": 0.0,
    "checkpoint.backward_tensor.cuda": 0.0,
    "checkpoint.forward.cpu": 110.7,
    "checkpoint.backward.cpu": 533.7,
    "checkpoint.forward_tensor.cpu": 9.4,
    "checkpoint.backward_tensor.cpu": 17.5,
    # Receiving a ready batch from a DataLoader worker, on the training thread
    # (transforms/loading.py): the index and batch queues and the batch's unpickling, per batch and
    # per tensor in it (each a shared-memory handle rebuilt).
    # cpu: `OMP_NUM_THREADS=1 python scripts/host_costs.py --loader` (torch 2.13 CPU, the 2-core
    # development host, 2026-12-02; the median of five runs: 1353-2570 units per batch and 444-925
    # per tensor, units of 701-1319 ns, in time 1.74-1.88 ms per batch and 0.57-0.65 ms per tensor).
    # No GPU measurement yet: a GPU trace uses the same.
    "dataloader.receive.batch": 1573.0,
    "dataloader.receive.tensor": 477.0,
    # The wrapper of one call of a torch.compile'd module (transforms/compiler.py), beyond its
    # compiled graph: forward, dynamo's cache lookup (guards) and AOTAutograd's runtime wrappers;
    # backward, each CompiledFunctionBackward node around its graph. A call that finds the host's
    # caches cold (the first of its module in a phase and iteration) and a warm one (within
    # transforms/compiler.py `WARM_WITHIN_NS` of the module's last call: a2c's rollout calls its
    # policy 17 times a step, 337 µs the first, then about 141). cpu: `python
    # scripts/compile_costs.py DIR` (torch 2.13 CPU, the 2-core development host, 2026-12-06: the
    # five rounds of all nine models of docs/validation-compile-cpu.md, 2026-12-06, in the host
    # units of each pair's eager trace, the ATen ops a call runs outside its graph taken out: the
    # medians over pairs; the warm ones from a2c's and dcgan's pairs, the only ones with any).
    "compile.forward.cpu": 647.0,
    "compile.backward.cpu": 235.0,
    "compile.forward_warm.cpu": 196.0,
    "compile.backward_warm.cpu": 152.0,
    # FSDP2's own host work (transforms/distributed/fsdp.py), beyond the copies and collectives it
    # times itself: per call of a unit, its pre-/post-forward and pre-/post-backward hooks; per unit
    # and iteration, its reduce (the post-backward reduce and its share of the root's callback); per
    # collective, the call's own work; per copy into or out of a collective's buffer (on a CPU), the
    # op's own work; per optimizer op, DTensor's dispatch.
    # cpu: `python scripts/fsdp_costs.py DIR` (torch 2.13 CPU, gloo, the 2-core development host,
    # 2026-12-02: three calibration rounds of examples/transformer.py and examples/suite/a2c.py
    # --fsdp, both ranks, the medians; units of each round's one-process trace, while the two ranks
    # shared the host's two cores, so the hooks' cost carries that sharing). No GPU measurement yet:
    # a GPU trace uses the same.
    "fsdp.pre_forward": 464.0,
    "fsdp.post_forward": 42.0,
    "fsdp.pre_backward": 393.0,
    "fsdp.post_backward": 50.0,
    "fsdp.reduce": 360.0,
    "fsdp.copy": 50.0,
    "fsdp.collective": 61.0,
    "fsdp.optimizer_op": 20.0,
    # A forward call's hooks where nothing is gathered (its unit kept from an earlier call,
    # reshard_after_forward=False) and nothing resharded: `python scripts/fsdp_costs.py DIR --idle`
    # on the same calibration rounds' reshard=0 ranks (the idle pre-forward hooks of suite/a2c,
    # which calls its units 17 times a step; the post-forward hooks of both).
    "fsdp.pre_forward_idle": 76.0,
    "fsdp.post_forward_idle": 14.0,
    # DTensor's own host work under tensor parallelism (transforms/distributed/tp.py): per call of a
    # split linear layer, forward and backward (its parallel style's hooks, the dispatch of its ops
    # on DTensors, the conversions to and from local tensors and their backward nodes), and per
    # optimizer op (on average over all of them, the split layers' parameters being DTensors). cpu:
    # `python scripts/tp_costs.py DIR --run 3` (torch 2.13 CPU, gloo, the 2-core development host,
    # 2026-12-03: three calibration rounds of examples/transformer.py --tp, both ranks, the medians;
    # units of each round's one-process trace, the two ranks sharing the host's two cores). No GPU
    # measurement yet: a GPU trace uses the same.
    "tp.forward": 298.0,
    "tp.backward": 511.0,
    "tp.optimizer_op": 6.0,
}


@dataclass(slots=True)
class HostCosts:
    """This trace's host unit and median launch call (ns)."""

    unit_ns: int = DEFAULT_UNIT_NS
    unit_from: str = "default"  # "trace" when this trace's own ops gave the unit
    launch_ns: int = 0  # median host time of a kernel launch call (0: none recorded)

    @classmethod
    def of(cls, trace: Trace) -> HostCosts:
        rows, exclusive = exclusive_host_ns(trace)
        names = trace.name[rows]
        costs = cls()
        unit = []
        for op in UNIT_OPS:
            mine = exclusive[names == trace.string_index(op)]
            if mine.size >= 3:
                unit.append(float(np.median(mine)))
        if unit:
            costs.unit_ns, costs.unit_from = max(1, int(statistics.median(unit))), "trace"
        launch_names = [i for i, name in enumerate(trace.strings)
                        if runtime_api.LAUNCH.search(name)]
        launches = exclusive[np.isin(names, launch_names)]
        costs.launch_ns = int(statistics.median(launches.tolist())) if launches.size else 0
        return costs

    def recorded_ns(self, what: str) -> int:
        """A host cost the trace cannot show (a key of
        RECORDED_HOST_UNITS), on this trace's host, ns."""
        return int(round(RECORDED_HOST_UNITS[what] * self.unit_ns))


def exclusive_host_ns(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(rows, exclusive ns) of the CPU ops and API calls on host threads: each one's duration less
    that of the ops and calls directly nested in it on its thread."""
    host_track = np.array([t.kind is TrackKind.HOST for t in trace.tracks], dtype=bool)
    rows = np.flatnonzero(trace.mask(EventKind.CPU_OP, *API_KINDS) & host_track[trace.track])
    own = trace.dur_ns[rows].astype(np.int64)
    parent = innermost_enclosing(trace, rows, rows)
    nested = parent >= 0
    np.subtract.at(own, np.searchsorted(rows, parent[nested]), trace.dur_ns[rows[nested]])
    return rows, np.maximum(own, 0)
