"""`gpu:target=NAME`: the same step on another GPU, kernel by kernel.

Every GPU task is re-timed from the trace's GPU (the device table row of the recorded
deviceProperties, or --device where the trace does not say) to the target's row:

- compute-bound work (GEMM, convolution, attention) by the ratio of the two devices'
  achievable matrix throughput at the kernel's precision (read from its name, mapping/classes.py;
  a name that does not say follows the trace's majority): the dense peak (tensor/matrix cores for
  tf32, bf16, fp16 and fp8, the fp32 vector or, on AMD, matrix peak for fp32, and fp32 where a
  device has no tensor path for the precision, bf16 on a V100) times the share of it a large GEMM
  reaches on that device as measured (maximum-achievable matmul FLOPS, docs/devices.md: about 80%
  on an H100, 51% on an MI300X; a row nobody measured takes its vendor's median). `peaks=1` uses
  the datasheet peaks alone;
- GEMMs whose op recorded no shapes but whose launch bounds their arithmetic intensity below
  both devices' ridge points by the memory-bandwidth ratio (`bandwidth_bound`): a tile side of
  at most 16 (a decode step's few tokens, an expert's share of a batch), a grid of fewer blocks
  than the source has SMs or CUs, matrix-vector products and split-K reductions;
- memory-bound work (normalization, elementwise, reduction, copies on the device, sets,
  embeddings, the optimizer, the rest) by the ratio of memory bandwidths;
- collectives by the ratio of GPU-to-GPU link bandwidths; host-to-device copies unchanged
  (the host link is not in the table);
- with `waves=1`, compute-bound kernels whose grid is recorded also by wave quantization: a
  kernel of B blocks keeps B / (ceil(B / units) * units) of a device's SMs or CUs busy, one
  block resident per unit (large tiles). Off by default: on the H100/MI300X pairs of the
  corpus it moved the mean error from 10.7% to 11.7% (small decode GEMMs hold several blocks
  per unit, which the trace does not say);
- a fixed part of every kernel (`fixed` µs: its launch on the device and its tail) does
  not scale, so a 3 µs elementwise kernel does not become 1 µs on a GPU with three times the
  bandwidth;
- host work unchanged, or ÷`host` for a host CPU that is that many times faster. Launch
  latency and kernel gaps stay as the trace calibrated them: no vendor publishes them. Where
  the GPU is busy less than half of the recorded iterations the note says the step is bound
  by a host whose speed on the other machine the trace cannot say.

The note says which model each class got and how much GPU time each class moved.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from daydream.devices import Device, device
from daydream.errors import InputError
from daydream.graph import Graph, TaskKind
from daydream.mapping.classes import CLASSES, PRECISIONS, streaming_of, tiles_of
from daydream.transforms.kernels import kernel_classes, kernel_precisions
from daydream.transforms.primitives import HOST_WORK, scale, select
from daydream.transforms.registry import FACTOR_RANGE, Context, Optimization, Parameter, register

COMPUTE_CLASSES = ("gemm", "convolution", "attention")
#: How the note names the GEMMs its launch bounds below both ridge points (`bandwidth_bound`).
BANDWIDTH_GEMM = "gemm, bandwidth-bound"


def ratios(source: Device, target: Device, classes: np.ndarray, precisions: np.ndarray,
           achievable: bool = True) -> np.ndarray:
    """Per kernel: how many times faster its scalable part runs on `target` than on `source` (class
    and precision as indices into CLASSES and PRECISIONS); compute-bound kernels by the achievable
    matrix throughput (`achievable`) or by the datasheet peaks."""
    result = np.full(classes.size, target.memory_bandwidth_gbs / source.memory_bandwidth_gbs,
                     dtype=np.float64)
    compute = np.isin(classes, [CLASSES.index(c) for c in COMPUTE_CLASSES])
    for index, precision in enumerate(PRECISIONS):
        chosen = compute & (precisions == index)
        if chosen.any():
            if achievable:
                result[chosen] = target.achievable_matrix_tflops(
                    precision) / source.achievable_matrix_tflops(precision)
            else:
                result[chosen] = target.matrix_tflops(precision) / source.matrix_tflops(precision)
    communication = classes == CLASSES.index("communication")
    result[communication] = target.interconnect_gbs / source.interconnect_gbs
    return result


def _majority_precision(graph: Graph, kernels: np.ndarray, precisions: np.ndarray) -> int:
    """The precision that holds most of the named kernels' time (fp32 when no name says)."""
    unknown = PRECISIONS.index("unknown")
    named = precisions != unknown
    if not named.any():
        return PRECISIONS.index("fp32")
    time = np.bincount(precisions[named], weights=graph.tasks["duration_ns"][kernels[named]],
                       minlength=len(PRECISIONS))
    return int(time.argmax())


#: Bytes per element of each precision (a GEMM's operands and result move at it).
ELEMENT_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1,
                 "unknown": 4}


def roofline_ns(device: Device, precision: str, flops: np.ndarray, elements: np.ndarray,
                achievable: bool = True) -> np.ndarray:
    """The time a kernel of `flops` moving `elements` of `precision` takes at `device`'s roofline:
    the slower of its arithmetic at the (achievable) matrix peak and its operands and result through
    memory at full bandwidth."""
    peak = (device.achievable_matrix_tflops(precision) if achievable
            else device.matrix_tflops(precision))
    return np.maximum(flops / peak * 1e-3,
                      elements * ELEMENT_BYTES[precision] / device.memory_bandwidth_gbs)


#: A tile no wider than this many rows or columns is chosen for a matrix that narrow (a decode
#: step's tokens, one expert's share of a batch): below one tensor-core instruction's N (8 or 16),
#: nothing larger would be tiled so.
SKINNY_TILE = 16


def bandwidth_bound(tiles: np.ndarray, blocks: np.ndarray, streaming: np.ndarray,
                    precisions: np.ndarray, devices: tuple[Device, Device],
                    achievable: bool = True) -> np.ndarray:
    """Per GEMM kernel: whether its operands, not its arithmetic, set its time on both `devices`,
    from what its launch says without the op's shapes. A GEMM of C = A (m x k) B (k x n) in e-byte
    elements does 2mnk FLOPs and moves at least e(mk + kn) bytes, so its intensity is at most 2mn /
    (e(m + n)) <= min(m, n) * 2 / e and <= sqrt(mn) / e. It is bandwidth-bound where that bound is
    under both devices' ridge points (achievable matrix FLOPs per byte of bandwidth) and the launch
    bounds min(m, n) or mn: a tile side of at most SKINNY_TILE (min(m, n) <= the side), or a grid of
    fewer thread blocks than the source has SMs or CUs, one tile each (mn <= blocks x tile; a
    persistent kernel launches at least one block per unit). Matrix-vector products and split-K
    reductions (`streaming`) are."""
    result = streaming.copy()
    side = tiles.min(axis=1).astype(np.float64)
    root_area = np.sqrt(np.maximum(blocks, 0).astype(np.float64) * tiles[:, 0] * tiles[:, 1])
    below_one_wave = (blocks > 0) & (blocks < (devices[0].sm_count or 0))
    for index, precision in enumerate(PRECISIONS):
        chosen = (precisions == index) & (tiles[:, 0] > 0)
        if not chosen.any():
            continue
        element = ELEMENT_BYTES[precision]
        ridge = min((d.achievable_matrix_tflops(precision) if achievable
                     else d.matrix_tflops(precision)) * 1000
                    / d.memory_bandwidth_gbs for d in devices)
        skinny = (side <= SKINNY_TILE) & (side * 2 / element < ridge)
        small_grid = below_one_wave & (root_area / element < ridge)
        result |= chosen & (skinny | small_grid)
    return result


def wave_utilization(blocks: np.ndarray, units: int) -> np.ndarray:
    """The share of a device's `units` (SMs or CUs) a kernel of `blocks` thread
    blocks keeps busy over its waves, one block resident per unit (large
    GEMM/attention tiles): 132 blocks on 132 SMs 1.0, 133 blocks 0.5."""
    waves = np.ceil(blocks / units)
    return blocks / (waves * units)


def retime(graph: Graph, source: Device, target: Device, fixed_ns: int,
           launch_blocks: np.ndarray | None = None, achievable: bool = True,
           gemm_shapes: tuple[np.ndarray, np.ndarray] | None = None,
           grids: np.ndarray | None = None) -> dict[str, tuple[int, int, float]]:
    """Re-time every GPU task of `graph` from `source` to `target` in place; per class: (tasks, ns
    moved, ratio). `launch_blocks` (per trace row, -1 unknown) adds wave quantization to
    compute-bound kernels; `gemm_shapes` (per trace row, FLOPs and elements of the launching matrix
    multiply, NaN unknown) puts those kernels on each device's roofline instead of the ratio of
    peaks; GEMMs without them move by bandwidth where their names and `grids` (thread blocks per
    trace row, -1 unknown) bound them below both ridge points (`bandwidth_bound`)."""
    tasks = graph.tasks
    work = select(graph, kind=(TaskKind.KERNEL, TaskKind.MEMSET, TaskKind.COLLECTIVE))
    device_copies = select(graph, kind=(TaskKind.MEMCPY,), name=r"(?i)DtoD|Device.?to.?Device")
    work = np.concatenate([work, device_copies])
    if work.size == 0:
        return {}
    classes, precisions = kernel_classes(graph, work), kernel_precisions(graph, work)
    classes[tasks["kind"][work] == TaskKind.COLLECTIVE] = CLASSES.index("communication")
    classes[tasks["kind"][work] == TaskKind.MEMSET] = CLASSES.index("memory")
    classes[np.isin(work, device_copies)] = CLASSES.index("memory")
    unknown = precisions == PRECISIONS.index("unknown")
    precisions[unknown] = _majority_precision(graph, work, precisions)
    factor = ratios(source, target, classes, precisions, achievable)
    compute = np.isin(classes, [CLASSES.index(c) for c in COMPUTE_CLASSES])
    events = tasks["event"][work]
    shaped = np.zeros(work.size, dtype=bool)
    if gemm_shapes is not None:
        shaped = _on_rooflines(factor, compute & (events >= 0), precisions, events, gemm_shapes,
                               (source, target), achievable)
    gemms = np.flatnonzero((classes == CLASSES.index("gemm")) & ~shaped)
    names = tasks["name"][work[gemms]]
    grid = np.full(gemms.size, -1, dtype=np.int64)
    if grids is not None:
        grid = np.where(events[gemms] >= 0, grids[np.maximum(events[gemms], 0)], -1)
    streamed = np.zeros(work.size, dtype=bool)
    streamed[gemms] = bandwidth_bound(tiles_of(names, graph.strings), grid,
                                      streaming_of(names, graph.strings), precisions[gemms],
                                      (source, target), achievable)
    factor[streamed] = target.memory_bandwidth_gbs / source.memory_bandwidth_gbs
    if launch_blocks is not None and source.sm_count and target.sm_count:
        blocks = np.where(events >= 0, launch_blocks[np.maximum(events, 0)], -1)
        waved = (blocks > 0) & compute & ~streamed
        factor[waved] *= (wave_utilization(blocks[waved], target.sm_count)
                          / wave_utilization(blocks[waved], source.sm_count))
    before = tasks["duration_ns"][work].copy()
    fixed = np.minimum(before, fixed_ns)
    tasks["duration_ns"][work] = np.rint(fixed + (before - fixed) / factor).astype(np.int64)
    moved: dict[str, tuple[int, int, float]] = {}
    labels = [(name, (classes == index) & ~streamed) for index, name in enumerate(CLASSES)]
    for name, mine in labels + [(BANDWIDTH_GEMM, streamed)]:
        if mine.any():
            change = int((tasks["duration_ns"][work[mine]] - before[mine]).sum())
            weights = (before - fixed)[mine]
            mean_ratio = (float(np.average(factor[mine], weights=weights)) if weights.sum() > 0
                          else float(factor[mine].mean()))
            moved[name] = (int(mine.sum()), change, mean_ratio)
    return moved


def _on_rooflines(factor: np.ndarray, candidates: np.ndarray, precisions: np.ndarray,
                  events: np.ndarray, gemm_shapes: tuple[np.ndarray, np.ndarray],
                  devices: tuple[Device, Device], achievable: bool) -> np.ndarray:
    """Set `factor` of the `candidates` whose launching multiply's shapes are recorded to the ratio
    of their roofline times on the two `devices`, in place; which those were."""
    flops = np.where(candidates, gemm_shapes[0][np.maximum(events, 0)], np.nan)
    elements = np.where(candidates, gemm_shapes[1][np.maximum(events, 0)], np.nan)
    shaped: np.ndarray = candidates & np.isfinite(flops) & np.isfinite(elements) & (flops > 0)
    source, target = devices
    for index, precision in enumerate(PRECISIONS):
        chosen = shaped & (precisions == index)
        if chosen.any():
            work, moved = flops[chosen], elements[chosen]
            factor[chosen] = (roofline_ns(source, precision, work, moved, achievable)
                              / roofline_ns(target, precision, work, moved, achievable))
    return shaped


#: Below this share of GPU-busy time in the recorded iterations, a step
#: on another GPU is set by its host.
HOST_BOUND_SHARE = 0.5


def gpu_busy_share(graph: Graph) -> float | None:
    """GPU work's share of the recorded iterations' time (summed over streams, so overlap can pass
    1); None without iterations."""
    if not graph.iteration_markers:
        return None
    tasks = graph.tasks
    markers = np.array(graph.iteration_markers, dtype=np.int64)
    starts = tasks["measured_start_ns"]
    span = int((starts[markers[:, 1]] - starts[markers[:, 0]]).sum())
    work = select(graph,
                  kind=(TaskKind.KERNEL, TaskKind.MEMSET, TaskKind.MEMCPY, TaskKind.COLLECTIVE))
    work = work[tasks["iteration"][work] >= 0]
    return float(tasks["duration_ns"][work].sum()) / span if span > 0 else None


def _share(device: Device) -> str:
    """`device`'s achievable share of its peak, as the note gives it."""
    measured = "" if device.matmul_efficiency else " (vendor median, not measured)"
    return f"{device.achievable_fraction:.0%}{measured}"


def _gpu(graph: Graph, params: dict[str, Any], context: Context) -> list[str]:
    name = str(params["target"]).strip()
    if not name:
        raise InputError("--opt gpu: name the GPU to predict, e.g. gpu:target=H100 (the rows of "
                         "docs/devices.md)")
    target = device(name)
    if not graph.has_device_work():
        return ["gpu: the trace has no GPU work (a CPU trace); nothing to move to the "
                f"{target.key} — trace the script on a GPU to predict another"]
    source = context.device
    if source is None:
        recorded = context.device_name or "not recorded"
        raise InputError(f"--opt gpu:target={name}: the trace's GPU ({recorded}) is not in the "
                         "device table, so there is nothing to scale from — name the row it ran on "
                         "with --device (docs/devices.md)")
    busy = gpu_busy_share(graph)
    blocks = context.launch_blocks if params["waves"] else None
    achievable = not params["peaks"]
    moved = retime(graph, source, target, int(round(float(params["fixed"]) * 1000)), blocks,
                   achievable, context.gemm_shapes, context.launch_blocks)
    host = float(params["host"])
    host_note = "host unchanged"
    if host != 1.0:
        scale(graph, select(graph, kind=HOST_WORK), factor=1 / host, gaps=True)
        host_note = f"host work and gaps ÷{host:g}"
    compute = "achievable peak" if achievable else "peak"
    models = {"gemm": compute, "convolution": compute, "attention": compute,
              "communication": "link"}
    parts = [f"{cls} ×{ratio:.2f} by {models.get(cls, 'bandwidth')} ({tasks} tasks, "
             f"{change / 1e6:+.2f} ms)"
             for cls, (tasks, change, ratio) in sorted(moved.items(), key=lambda item: item[1][1])]
    shares = (f"compute at the achievable share of each peak: {source.key} {_share(source)}, "
              f"{target.key} {_share(target)}" if achievable else "compute at the datasheet peaks")
    if context.gemm_shapes is not None:
        kernels = select(graph, kind=(TaskKind.KERNEL,))
        events = graph.tasks["event"][kernels]
        shaped = int(np.isfinite(context.gemm_shapes[0][events[events >= 0]]).sum())
        shares += (f"; {shaped} GEMM kernels on each device's roofline from their op's recorded "
                   "shapes")
    if busy is not None and busy < HOST_BOUND_SHARE and host == 1.0:
        host_note += (f"; the GPU is busy {busy:.0%} of the recorded iterations, so the step is "
                      f"bound by the host, whose speed on the {target.key}'s machine the trace "
                      "cannot say (host=F gives it)")
    return [f"gpu: {source.key} → {target.key}: " + "; ".join(parts),
            f"gpu: {shares}",
            f"gpu: {params['fixed']:g} µs of every kernel kept; launch latency and kernel gaps as "
            f"calibrated on the {source.key}; {host_note}"]


register(Optimization(
    "gpu", "the same step on another GPU (gpu:target=H100; rows in docs/devices.md)",
    "every GPU task re-timed from the trace's GPU to the target's device-table row: GEMM, "
    "convolution and attention kernels by the ratio of achievable matrix throughput at the "
    "kernel's precision (dense peak on tensor/matrix cores, fp32 where a device has no tensor "
    "path, × the measured matmul efficiency; on each device's roofline where the op recorded its "
    "shapes; by bandwidth where the kernel's tile or grid bounds it below both ridge points), all "
    "other kernels, sets and on-device copies by the memory-bandwidth ratio, collectives by the "
    "link-bandwidth ratio; `fixed` µs of each kernel does not scale; host work unchanged unless "
    "`host`",
    _gpu,
    {"target": Parameter(str, "", "the GPU to predict: a row of docs/devices.md (H100 SXM, MI300X, "
                                  "L4, ...)"),
     "host": Parameter(float, 1.0, "the target machine's host CPU speed relative to the trace's",
                       **FACTOR_RANGE),
     "fixed": Parameter(float, 2.0, "µs of each kernel that does not scale (its launch on the "
                                    "device, its tail)", 0.0, 1e6),
     "waves": Parameter(int, 0, "1: wave quantization of GEMM/conv/attention kernels by SM/CU "
                                "count (grid sizes)", 0, 1),
     "peaks": Parameter(int, 0, "1: compare compute by datasheet peaks, not by the measured "
                                "achievable share of them",
                        0, 1)},
))
