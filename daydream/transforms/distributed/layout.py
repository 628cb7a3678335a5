"""`layout`: data, tensor and pipeline parallelism together (dp × tp ×
pp ranks), from one rank's trace.

One rank's step under the layout, the what-ifs applied in the order the work nests:

1. `tp:degree=TP` splits each block's linear pairs TP ways (skipped for tp=1);
2. `pp:stages=PP` cuts the model into stages and micro-batches (skipped for pp=1), tp's collectives
   carried into each micro-batch at 1/M of their bytes;
3. `ddp:world=DP` all-reduces each rank's gradients among the DP replicas: the split layers'
   gradients are 1/TP of theirs (skipped for dp=1). Under pp>1 the stages' all-reduces share one
   channel here, where each stage's group has its own in a real job, and stage 0's optimizer is the
   one that waits for them: a bound the note states.

Each DP replica takes the trace's batch: the job's batch is DP × the
trace's. `daydream whatif T --opt layout --sweep dp=1,2,4,tp=1,2,pp=1,2
--world 8` predicts every layout of 8 ranks (api.layout_sweep).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from daydream.errors import InputError
from daydream.graph import Graph
from daydream.transforms.distributed.contention import CONTENTION_PARAMETER
from daydream.transforms.distributed.fabric import LINK_PARAMETERS
from daydream.transforms.distributed.tp import plan_split
from daydream.transforms.registry import (
    MAX_WORLD,
    OPTIMIZATIONS,
    Context,
    Optimization,
    Parameter,
    register,
)

#: The link parameters layout hands on to each what-if it applies.
_LINK_KEYS = (*LINK_PARAMETERS, "contention")


def layout_specs(params: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The what-ifs (name, parameters) `params` stands for, in the order they apply."""
    dp, tp, pp = int(params["dp"]), int(params["tp"]), int(params["pp"])
    link = {key: params[key] for key in _LINK_KEYS if key in params}
    steps: list[tuple[str, dict[str, Any]]] = []
    if tp > 1:
        steps.append(("tp", {"degree": tp, "sequence_parallel": params["sequence_parallel"],
                             "layers": "", **link}))
    if pp > 1:
        steps.append(("pp", {"stages": pp, "microbatches": params["microbatches"],
                             "schedule": params["schedule"], "memory_stage": -1, **link}))
    if dp > 1:
        steps.append(("ddp", {"world": dp, "params": params.get("params", ""), **link}))
    return [(name, {**OPTIMIZATIONS[name].defaults(), **values}) for name, values in steps]


def _layout(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    dp, tp, pp = int(params["dp"]), int(params["tp"]), int(params["pp"])
    notes = ([f"layout: dp={dp} × tp={tp} × pp={pp} = {dp * tp * pp} ranks; the job's batch is "
              f"{dp} × the trace's"])
    gradients = context.gradient_bytes
    if tp > 1:  # what each rank all-reduces for DP: 1/TP of the split layers' gradients
        split = plan_split(graph, context, "").layers
        names = {graph.layers[k] for k in split}
        gradients = {path: size // tp if path in names else size
                     for path, size in gradients.items()}
    for name, values in layout_specs(params):
        if name == "ddp":
            notes += OPTIMIZATIONS[name].apply(graph, values,
                                               replace(context, gradient_bytes=gradients))
            if pp > 1:
                notes.append("layout: under pp the stages' DP all-reduces share one channel here "
                             "(a real job's stage groups each have their own) and stage 0's "
                             "optimizer waits for them: an upper bound")
        else:
            notes += OPTIMIZATIONS[name].apply(graph, values, context)
    return notes


def check_layout(dp: int, tp: int, pp: int, world: int) -> None:
    """Refuse a layout whose ranks are not `world`."""
    if dp * tp * pp != world:
        raise InputError(f"layout: dp={dp} × tp={tp} × pp={pp} is {dp * tp * pp} ranks, not the "
                         f"world of {world} — choose degrees whose product is the world")


register(Optimization(
    "layout", "data × tensor × pipeline parallelism (dp × tp × pp ranks) from a one-rank trace",
    "tp:degree=TP, then pp:stages=PP (tp's collectives per micro-batch at 1/M of their bytes), "
    "then ddp:world=DP (the split layers' gradients 1/TP of theirs); each as that what-if alone "
    "models it; degrees of 1 skip their step",
    _layout,
    {"dp": Parameter(int, 1, "data-parallel replicas (each takes the trace's batch)", 1, MAX_WORLD),
     "tp": Parameter(int, 1, "tensor-parallel degree", 1, MAX_WORLD),
     "pp": Parameter(int, 1, "pipeline stages", 1, 1024),
     "microbatches": Parameter(int, 4, "with pp > 1: micro-batches per step", 1, 65536),
     "schedule": Parameter(str, "1f1b", "with pp > 1: gpipe or 1f1b"),
     "sequence_parallel": Parameter(int, 0, "with tp > 1: Megatron's sequence parallelism", 0, 1),
     "params": Parameter(str, "", "with dp > 1, where the trace does not list each layer's "
                                  "parameters: the model's trainable parameter bytes for DP's "
                                  "all-reduces (e.g. 97MB)"),
     **LINK_PARAMETERS, "contention": CONTENTION_PARAMETER},
))

__all__ = ["check_layout", "layout_specs"]
