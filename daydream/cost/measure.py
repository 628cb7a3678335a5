"""The measured tier: run an op here at the recorded shapes and dtypes, and cache what it took.

Where torch is importable and the trace ran on this machine's kind of device (for now: a CPU
trace, measured on this CPU with the trace's own intra-op thread count), each distinct
signature a what-if asks about (op, input shapes, dtypes) is run with warm-up and repetitions
and its median kept. Results are cached on disk, one JSON file per (device, torch version,
threads) under the trace cache folder (`cost/`), written atomically and validated on read: a
damaged file is ignored and rewritten. A budget (seconds per what-if) caps the time spent
measuring; past it, or for an op it cannot run (unsupported, shapes missing, an error while
running), the caller falls back to the modelled tier. It never touches a GPU. Repetitions start
with emptied caches (`FLUSH_BYTES`), as an op of a training step that streams through memory, or
hot (`hot=`), as an op whose operands were just written (autocast's casts). While it measures, the
C heap keeps freed memory (trace/collect/heap.py), so an op's temporaries are not fresh pages each
repetition.

    measurer = Measurer.for_cpu(threads=1, budget_s=5.0)
    measurer.op_ns("aten::mm", [((64, 512), "float"), ((512, 512), "float")],
                   as_type="c10::BFloat16")
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daydream._files import write_atomically
from daydream.cost.shapes import Tensor, elements
from daydream.trace.collect.heap import BLOCK, RESERVE_LEAST, keep_freed, reserve
from daydream.trace.collect.speed import cpu_clock, drift_beyond_spread, speed_probe_ns
from daydream.trace.collect.usage import minor_faults
from daydream.trace.store import cache_dir

#: Warm-up runs and timed repetitions of each signature (the median of the repetitions is kept).
WARMUP = 3
REPETITIONS = 7
#: A signature whose first run takes longer than this (a bf16 convolution on a CPU's slow path can
#: take half a second) is warmed up once and timed `SLOW_REPETITIONS` times: the budget then reaches
#: the model's other ops, and so long a run varies little.
SLOW_NS = 20_000_000
SLOW_REPETITIONS = 3
#: Bytes written before each timed repetition, more than a CPU's last-level cache: each run starts
#: with cold caches, as an op inside a training step does (its operands were evicted by the ops
#: between). Timed hot, a small GEMM of examples/mlp.py grew 1.78x at twice the batch, cold 1.57x;
#: in the real run at twice the batch about 1.65x. The speed probe does not empty them: it times the
#: core, not what another process does to memory meanwhile (trace/collect/speed.py).
FLUSH_BYTES = 64 * 2**20
#: A core's own cache, bytes, where Linux does not list this CPU's (its level 2: 1 MiB on this
#: project's machine, 512 KiB to 2 MiB on server CPUs since 2017).
CORE_CACHE_BYTES = 1 << 20
CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


CPU_INFO = Path("/proc/cpuinfo")


@functools.cache
def cpu_identity(info: Path = CPU_INFO, caches: Path = CPU_CACHES) -> str:
    """This CPU, as far as an op's time depends on it: a short digest of its model name, its
    instruction-set flags and its caches' sizes (what Linux lists; the machine's architecture
    alone where it lists none). Cached times are kept per identity: a home folder shared by
    machines of different CPUs (a cluster's nodes, a virtual machine moved to other hardware)
    never hands one CPU's times to another, even where both call themselves the same model
    ("Intel(R) Xeon(R) Processor" in many virtual machines). Read once per process."""
    fields: dict[str, str] = {}
    try:
        for line in info.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "flags", "Features", "CPU part") and key not in fields:
                fields[key] = " ".join(sorted(value.split())) if key != "model name" else value
    except OSError:
        pass
    sizes = []
    for index in sorted(caches.glob("index*")):
        try:
            sizes.append(f"{(index / 'level').read_text().strip()}:"
                         f"{(index / 'size').read_text().strip()}")
        except OSError:
            continue
    described = "|".join([platform.machine(), *(f"{k}={v.strip()}" for k, v in
                                                 sorted(fields.items())), *sizes])
    return hashlib.sha1(described.encode()).hexdigest()[:10]


def core_cache_bytes(caches: Path = CPU_CACHES) -> int:
    """This CPU's level-2 cache (data or unified), bytes, as Linux lists it; `CORE_CACHE_BYTES`
    where it does not."""
    for index in sorted(caches.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        if level == "2" and kind in ("Data", "Unified"):
            scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
            digits = size.rstrip("KMB")
            if digits.isdigit():
                return int(digits) * scale
    return CORE_CACHE_BYTES


#: The most seconds compiling and timing torch.compile's fused runs may take per what-if, by default
#: (cost/fused.py): compiling one run takes one to a few seconds on a CPU, the first in a process
#: tens (inductor's start).
COMPILE_BUDGET_S = 180.0
#: No single measured op may be larger than this many elements in any
#: input (the budget's guard against giants).
MAX_ELEMENTS = 1 << 26

#: Ops the measured tier calls again with their recorded arguments
#: (compute-bound ones, whose time is their
#: arithmetic: convolutions, attention and their backward). Others are left out on purpose: a
#: recorded size list can ask for any allocation, and elementwise ops timed alone do not behave as
#: they do inside a training step.
CALLED_AGAIN = frozenset(f"aten::{op}" for op in (
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "convolution", "_convolution", "convolution_backward", "mkldnn_convolution",
    # attention, whose time is its arithmetic too
    "scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
    # a whole LSTM layer on oneDNN (nn.LSTM on a CPU), forward and backward
    "mkldnn_rnn_layer", "mkldnn_rnn_layer_backward"))
#: Elementwise ops the measured tier calls again with their recorded arguments where a what-if asks
#: for them by name (`width`, for the optimizer's work on the widened parameters): the updates of
#: torch.optim's loops. Their time is their bytes, but not at one speed per byte: on
#: examples/mlp.py, Adam's `lerp_` on a [512, 512] parameter took 113.6 us in the step, on a
#: [1024, 1024] one 624.8 us in the wider step (5.5 times; the bytes 4 times), as a state that
#: outgrows the caches streams from memory; measured here after the caches were emptied, 212 and
#: 760 us.
POINTWISE_AGAIN = frozenset(f"aten::{op}" for op in (
    "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "lerp_", "addcmul_", "addcdiv_",
    "sqrt", "sqrt_", "rsqrt", "maximum", "clamp_", "neg", "sign"))
#: Normalizations the measured tier calls again with their recorded arguments where a what-if asks
#: for them by name (`amp`, in the reduced type): a CPU's batch norm takes another path per type,
#: so its bytes do not time it. On this project's machine, alone, a [16, 16, 32, 32] training-mode
#: batch norm took 389 µs in fp32 and 109 µs on a bf16 input; in examples/cnn.py's real steps, 402
#: and 124.
NORMALIZATION_AGAIN = frozenset(f"aten::{op}" for op in (
    "batch_norm", "native_batch_norm", "native_batch_norm_backward"))
#: Every op the measured tier calls again with its recorded arguments.
RUN_AGAIN = CALLED_AGAIN | POINTWISE_AGAIN | NORMALIZATION_AGAIN
#: Where the backward of a oneDNN LSTM layer (`aten::mkldnn_rnn_layer_backward`'s arguments) finds
#: what its forward made: the output, the last hidden and cell states and the workspace.
#: The workspace is laid out per type (8,736,768 bytes for a [35, 20, 200] LSTM layer in fp32,
#: 6,217,728 in bf16), so a recorded one does not fit a run in another type: it is made again by
#: running the forward once on the same inputs (`_rnn_forward_state`).
RNN_SAVED = (7, 8, 9, 22)

TORCH_TYPES = {"float": "float32", "double": "float64", "c10::BFloat16": "bfloat16",
                "c10::Half": "float16", "long int": "int64", "int": "int32", "bool": "bool",
                "unsigned char": "uint8"}


#: The matrix multiplies the measured tier runs from their tensor
#: inputs alone (no other argument changes their work).
MULTIPLIES = ("aten::mm", "aten::bmm", "aten::matmul", "aten::addmm", "aten::baddbmm",
              "aten::linear")
#: Ratios are cached as integers: parts per million.
RATIO_SCALE = 1_000_000
#: Processes whose times of one signature the cache keeps, and hands on the median of
#: (`Measurer.cached`): in a truth run of the three examples on this project's machine, 273
#: signatures were measured in three processes, and for 69 of them the first process's time lay
#: more than 10% from the median of the three (for 27, more than 20%).
SAMPLES = 3
#: The share of its budget a prediction may spend measuring again the signatures the cache holds
#: from fewer than `SAMPLES` processes; the rest is left for signatures it holds no time of.
RESAMPLE_SHARE = 0.5
#: What measuring one signature needs: its cache key, how to make its
#: runner, the tensors it runs on. What a measured op runs on, per
#: tensor: (shape, type) or (shape, type, memory order) (`_make`).
Operand = tuple[Any, ...]
_Signature = tuple[str, Callable[[], Callable[[Any, list[Any]], Any] | None], list[Operand]]


def _runner(name: str) -> Callable[[Any, list[Any]], Any] | None:
    """How to call op `name` on tensors built from its recorded inputs
    (None: not one the tier runs this way)."""
    if name not in MULTIPLIES:
        return None
    import torch

    op = getattr(torch.ops.aten, name.split("::", 1)[1])
    return lambda _t, xs: op(*xs)


class Measurer:
    """Runs ops on this CPU and remembers what they took (ns);
    `spent_s` counts against `budget_s`."""

    def __init__(self, threads: int, budget_s: float, folder: Path | None = None,
                 compile_budget_s: float = COMPILE_BUDGET_S) -> None:
        import torch

        self.threads = max(1, threads)
        self.budget_s = budget_s
        self.spent_s = 0.0
        # compiling fused runs (cost/fused.py) has a budget of its own
        self.compile_budget_s = compile_budget_s
        self.compile_spent_s = 0.0
        self.failed: dict[str, str] = {}  # signature -> why it could not run
        self.ran: list[str] = []  # signatures run in this process (not from the cache)
        folder = folder if folder is not None else cache_dir() / "cost"
        self.path = (folder / f"cpu-{cpu_identity()}-torch{torch.__version__}"
                     f"-threads{self.threads}.json")
        # per signature, each process's time and that process's speed probe (0: not known;
        # trace/collect/speed.py), oldest first, at most `SAMPLES`
        self.samples = _read_cache(self.path)
        # per signature, the median of its processes' times, as measured
        self.cache = {key: _median([value for value, _ in kept])
                      for key, kept in self.samples.items()}
        self._here: set[str] = set()  # signatures measured in this process
        # the probe of the trace the times are asked for (its host facts), None where it has none
        self.speed_at: int | None = None
        self._probe: int | None = None
        self._dirty = False

    @classmethod
    def for_cpu(cls, threads: int, budget_s: float,
                compile_budget_s: float = COMPILE_BUDGET_S) -> Measurer | None:
        """A measurer for a CPU trace, or None where torch cannot be imported."""
        try:
            import torch  # noqa: F401
        except ImportError:
            return None
        return cls(threads, budget_s, compile_budget_s=compile_budget_s)

    def remember(self, key: str, value: int, ran: bool = True) -> None:
        """Cache `value` under `key`, measured in this process (`ran`: listed in `ran`, as one
        signature run; the other half of a pair is not), with this process's speed probe: beside
        the times other processes kept of it (replacing this process's own; the oldest dropped
        past `SAMPLES`)."""
        kept = self.samples.setdefault(key, [])
        if key in self._here:
            kept.pop()
        kept.append((value, self.probe_ns()))
        del kept[:-SAMPLES]
        self._here.add(key)
        self.cache[key] = _median([time for time, _ in kept])
        if ran:
            self.ran.append(key)
        self._dirty = True

    def probe_ns(self) -> int:
        """How fast this CPU runs in this process (trace/collect/speed.py), measured once, counted
        against the budget."""
        if self._probe is None:
            started = time.perf_counter()
            self._probe = speed_probe_ns(self.threads) or 1
            self.spent_s += time.perf_counter() - started
        return self._probe

    def cached(self, key: str) -> int:
        """The cached time under `key`, ns, at the speed of the trace it is asked for: the median,
        over the processes that measured it, of each one's time × the trace's probe / that
        process's, beyond the spread two probes show without any drift (`drift_beyond_spread`),
        where both are known (a time kept hours before on a machine whose speed drifts carries
        less of the drift into a trace recorded now); as measured otherwise."""
        speed_at = self.speed_at
        return _median([value if speed_at is None or not probe
                        else max(1, int(round(value * drift_beyond_spread(speed_at, probe))))
                        for value, probe in self.samples[key]])

    def settled(self, key: str, compiling: bool = False) -> bool:
        """Whether `key`'s cached time is handed on without measuring it again: cached, and kept
        from `SAMPLES` processes, or measured in this one, or not to be measured again here (it
        failed, or the share of the budget for measuring again is spent: `RESAMPLE_SHARE`; of the
        compile budget where `compiling`)."""
        if key not in self.cache:
            return False
        spent, budget = ((self.compile_spent_s, self.compile_budget_s) if compiling
                         else (self.spent_s, self.budget_s))
        return (len(self.samples[key]) >= SAMPLES or key in self._here or key in self.failed
                or spent >= budget * RESAMPLE_SHARE)

    def kept(self, key: str) -> int | None:
        """The cached time under `key` (`cached`), None where there is none: what a signature that
        could not be measured again now hands on."""
        return self.cached(key) if key in self.cache else None

    def within(self, timed: Callable[[], int]) -> int:
        """`timed()` run as the measured tier runs ops: this process's threads set to the trace's,
        the heap keeping freed memory."""
        import torch

        keep_freed()
        previous = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            return timed()
        finally:
            torch.set_num_threads(previous)

    def op_ns(self, name: str, inputs: list[Tensor | None],
              as_type: str | None = None) -> int | None:
        """The median time of op `name` on tensors of the recorded `inputs` (floating ones turned
        into `as_type` where given), ns; None where it cannot be measured here."""
        return self._cached_or_run(*self._op(name, inputs, as_type))

    def call_ns(self, name: str, arguments: list[Any], as_type: str | None = None) -> int | None:
        """The median time of op `name` called again with its recorded `arguments`
        (cost/shapes.OpShapes.arguments: tensors rebuilt at their shapes, floating
        ones in `as_type` where given; scalars and lists as recorded), ns; None
        for ops outside `RUN_AGAIN` or that cannot run here."""
        if name not in RUN_AGAIN:
            return None
        return self._cached_or_run(*self._call(name, arguments, as_type))

    def op_ratio(self, name: str, new: list[Tensor | None],
                 old: list[Tensor | None], hot: bool = False) -> float | None:
        """Op `name`'s time on tensors of `new` over its time on `old`, both run here in turns (so
        that what the machine does meanwhile slows both alike); None where either cannot run.
        `hot`: each timed run follows an untimed one of its own, so it finds its operands in the
        caches, just written (`_median_ns`), instead of emptied."""
        return self._ratio(self._op(name, new, None), self._op(name, old, None), hot)

    def call_ratio(self, name: str, new: list[Any], old: list[Any],
                   hot: bool = False) -> float | None:
        """As `op_ratio`, for an op of `RUN_AGAIN` called with
        recorded arguments `new` and `old`."""
        if name not in RUN_AGAIN:
            return None
        return self._ratio(self._call(name, new, None), self._call(name, old, None), hot)

    def runs_ratio(self, key: str, new: Callable[[], Callable[[Any, list[Any]], Any] | None],
                   old: Callable[[], Callable[[Any, list[Any]], Any] | None],
                   tensors: list[Operand], repetitions: int = REPETITIONS) -> float | None:
        """The median time of the runner `new()` makes over that of `old()`'s, each on its own
        tensors of `tensors`, timed in turns `repetitions` times (cached under `key` as parts per
        million, measured again where not `settled`); where either cannot be made or run here
        (and why, in `failed`), the cached ratio, or None where there is none."""
        if self.settled(key):
            return self.cache[key] / RATIO_SCALE
        run_new = run_old = None
        if self._may_run(key, tensors):
            run_new, run_old = new(), old()
            if run_new is None or run_old is None:
                self.failed[key] = "not one the measured tier runs"
        if run_new is None or run_old is None:
            return self.cache[key] / RATIO_SCALE if key in self.cache else None

        def measure() -> int:
            times = self._median_ns([(run_new, tensors), (run_old, tensors)],
                                    repetitions=repetitions)
            return max(1, int(round(times[0] / times[1] * RATIO_SCALE)))

        if self._run(key, measure) is None and key not in self.cache:
            return None
        return self.cache[key] / RATIO_SCALE

    def op_pair_ns(self, name: str, new: list[Operand | None], old: list[Operand | None],
                   hot: bool = False, cold: bool = False) -> tuple[int, int] | None:
        """Op `name`'s median times on tensors of `new` and of `old` ((shape, type) or (shape,
        type, memory order) each), ns, both run here in turns; None where either cannot run.
        `hot`: each timed run follows an untimed one of its own (operands just written, as a
        cast leaves them; `_median_ns`), instead of emptied (`FLUSH_BYTES`). `cold`: emptied, and
        less what the emptying costs an op that touches no data (a view, timed in turns with
        them, as `cast_ns`): the op at its coldest, its code and address translations evicted
        too."""
        return self._pair(self._op(name, new, None), self._op(name, old, None), hot, cold)

    def call_pair_ns(self, name: str, new: list[Any], old: list[Any],
                     hot: bool = False, cold: bool = False) -> tuple[int, int] | None:
        """As `op_pair_ns`, for an op of `RUN_AGAIN` called with
        recorded arguments `new` and `old`."""
        if name not in RUN_AGAIN:
            return None
        return self._pair(self._call(name, new, None), self._call(name, old, None), hot, cold)

    def _op(self, name: str, inputs: list[Operand | None], as_type: str | None) -> _Signature:
        """Op `name` on `inputs`, (shape, type) or (shape, type, memory order) each; a memory order
        is part of the signature only where given (contiguous signatures keep their cache keys)."""
        tensors = [t for t in inputs if t is not None]
        if as_type is not None:
            tensors = [(t[0], as_type if t[1] in ("float", "c10::BFloat16", "c10::Half") else t[1],
                        *t[2:]) for t in tensors]
        listed = [[list(t[0]), t[1], *[list(order) for order in t[2:3]]] for t in tensors]
        key = f"{name}|{json.dumps(listed)}"
        return key, lambda: _runner(name), tensors

    def _call(self, name: str, arguments: list[Any], as_type: str | None) -> _Signature:
        floating = ("float", "c10::BFloat16", "c10::Half")
        # a tensor's memory order only where it is not contiguous:
        # contiguous signatures keep their cache keys
        chosen = [("tensor", a[1], as_type if as_type is not None and a[2] in floating else a[2],
                   *([a[3]] if len(a) > 3 and a[3] is not None else [])) if a[0] == "tensor" else a
                  for a in arguments]
        tensors = [(a[1], a[2], a[3] if len(a) > 3 else None) for a in chosen if a[0] == "tensor"]

        def runner() -> Callable[[Any, list[Any]], Any] | None:
            import torch

            packet = getattr(torch.ops.aten, name.split("::", 1)[1], None)
            if packet is None:
                return None
            op = overload_of(packet, chosen)
            keywords, defaults = keyword_only(op), unrecorded(op)

            prepare = PREPARED.get(name)
            # per list of tensors made: the arguments `prepare` made of them, once
            prepared: dict[int, tuple[list[Any], list[Any]]] = {}

            def run(_t: Any, xs: list[Any]) -> Any:
                if id(xs) in prepared and prepared[id(xs)][0] is xs:
                    return invoke(op, prepared[id(xs)][1], keywords)
                given = iter(xs)
                values = [next(given) if a[0] == "tensor"
                          else (defaults.get(i) if a[0] == "none" else a[1])
                          for i, a in enumerate(chosen)]
                if prepare is not None:
                    values = prepare(values)
                    prepared[id(xs)] = (xs, values)
                return invoke(op, values, keywords)

            return run

        listed = [[a[0], *[list(v) if isinstance(v, tuple) else v for v in a[1:]]] for a in chosen]
        key = f"{name}|call|{json.dumps(listed)}"
        return key, runner, tensors

    def _ratio(self, new: _Signature, old: _Signature, hot: bool = False) -> float | None:
        """The time of signature `new` over that of `old`, measured in turns (the pair's times,
        `_pair`; `hot`: caches not emptied between runs)."""
        pair = self._pair(new, old, hot=hot)
        return None if pair is None else pair[0] / pair[1]

    def _pair(self, new: _Signature, old: _Signature,
              hot: bool = False, cold: bool = False) -> tuple[int, int] | None:
        """The median times of signatures `new` and `old`, ns, measured in turns (cached as two
        entries; hot: caches not emptied between runs; cold: emptied, net of a view's time)."""
        if hot and cold:
            raise ValueError("a pair is measured hot or cold, not both")
        kind = "pair-primed" if hot else "pair-cold-net" if cold else "pair"
        keys = f"{kind}|{new[0]}|{old[0]}|new", f"{kind}|{new[0]}|{old[0]}|old"
        if keys[1] in self.cache and self.settled(keys[0]):
            return self.cached(keys[0]), self.cached(keys[1])
        run_new = run_old = None
        if self._may_run(keys[0], [*new[2], *old[2]]):
            run_new, run_old = new[1](), old[1]()
            if run_new is None or run_old is None:
                self.failed[keys[0]] = "not an op the measured tier runs"
        if run_new is None or run_old is None:
            return self._kept_pair(keys)
        measured: list[int] = []

        def measure() -> int:
            runs = [(run_new, new[2]), (run_old, old[2])]
            if cold:
                runs.append((_view, new[2]))
            times = self._median_ns(runs, flush=not hot)
            view = times[2] if cold else 0
            measured.extend(max(1, t - view) for t in times[:2])
            return measured[0]

        if self._run(keys[0], measure) is None:
            return self._kept_pair(keys)
        self.remember(keys[1], measured[1], ran=False)
        return self.cached(keys[0]), self.cached(keys[1])

    def _kept_pair(self, keys: tuple[str, str]) -> tuple[int, int] | None:
        """A pair's cached times, where both are cached (`kept`)."""
        new, old = self.kept(keys[0]), self.kept(keys[1])
        return None if new is None or old is None else (new, old)

    def cast_ns(self, shape: tuple[int, ...], to_type: str,
                from_type: str = "float", hot: bool = False) -> int | None:
        """A cast of a `from_type` tensor of `shape` to `to_type`, ns (None: not measured):
        autocast's casts down, and, in backward, the casts of their gradients back up.

        `hot`: its operand in the caches, as an activation or gradient the op before it has just
        written is where it fits in a core's cache, and timed in turns without emptying them: a GRU
        casts its [32, 192] state each time step, 4-7 µs a cast in its real bf16 run, where the
        cold time below, net of the view, gave 14 µs down and 45 µs up.

        Its operand cold (the caches emptied before each run, `FLUSH_BYTES`), less what the emptying
        costs an op that touches no data: a view of the same tensor, timed in turns with the cast.
        Emptying the caches also evicts the code and the address translations that a training
        step's ops find warm: a view took about 40 µs after it on this project's machine, a cast of
        192 elements 43-47 µs, while in a real bf16 step such a cast took 4.2 µs; net of the view,
        5-7 µs (a [32, 65, 192] activation: 107 µs net against 88-105 real)."""
        def runner() -> Callable[[Any, list[Any]], Any] | None:
            import torch

            if to_type not in TORCH_TYPES or from_type not in TORCH_TYPES:
                return None
            dtype = getattr(torch, TORCH_TYPES[to_type])
            return lambda _t, xs: xs[0].to(dtype)

        if hot:
            return self._cached_or_run(f"cast-hot|{list(shape)}|{from_type}|{to_type}", runner,
                                       [(shape, from_type)], flush=False)
        # an fp32 source keeps the key it has always had
        key = (f"cast-net|{list(shape)}|{to_type}" if from_type == "float"
               else f"cast-net|{list(shape)}|{from_type}|{to_type}")
        return self._cached_or_run(key, runner, [(shape, from_type)], net_of_view=True)

    def _cached_or_run(self, key: str,
                       runner_of: Callable[[], Callable[[Any, list[Any]], Any] | None],
                       tensors: list[Operand], net_of_view: bool = False,
                       flush: bool = True) -> int | None:
        """The cached time of signature `key`, measured now (within the budget) where it is not
        `settled`, or None (and why, in `failed`). `net_of_view`: less a view's time after the
        caches were emptied (`cast_ns`); `flush`: the caches emptied before each run."""
        if self.settled(key):
            return self.cached(key)
        runner = runner_of() if self._may_run(key, tensors) else None
        if runner is None:
            self.failed.setdefault(key, "not an op the measured tier runs")
            return self.kept(key)
        self._run(key, lambda: self._time(runner, tensors, net_of_view, flush))
        return self.kept(key)

    def _may_run(self, key: str, tensors: list[Operand]) -> bool:
        """Whether signature `key` may be measured now: not failed
        before, within the budget, not too large."""
        if key in self.failed:
            return False
        if self.spent_s >= self.budget_s:
            self.failed[key] = "over the measuring budget"
            return False
        if any(elements(tensor[0]) > MAX_ELEMENTS for tensor in tensors):
            self.failed[key] = "too large to run here"
            return False
        return True

    def _run(self, key: str, measure: Callable[[], int]) -> int | None:
        """`measure()` counted against the budget and cached under
        `key`; None (and why) where it raised."""
        started = time.perf_counter()
        try:
            value = measure()
        except Exception as exc:  # an op that cannot run at these shapes falls back to the model
            self.failed[key] = f"{type(exc).__name__}"
            return None
        finally:
            self.spent_s += time.perf_counter() - started
        self.remember(key, value)
        return value

    def _time(self, runner: Callable[[Any, list[Any]], Any], tensors: list[Operand],
              net_of_view: bool = False, flush: bool = True) -> int:
        if not net_of_view:
            return self._median_ns([(runner, tensors)], flush)[0]
        timed, view = self._median_ns([(runner, tensors), (_view, tensors)])
        return max(1, timed - view)

    def _median_ns(self, runs: list[tuple[Callable[[Any, list[Any]], Any], list[Operand]]],
                   flush: bool = True, repetitions: int = 0) -> list[int]:
        """Each (runner, tensors) warmed up, then all timed in turns `REPETITIONS` times (each
        after the caches were emptied, where `flush`; else each after an untimed run of its own,
        unless one is slow: `SLOW_NS`), or up to `repetitions` where given (`_repetitions`): their
        medians, ns.

        Hot, a run of a pair follows one of its own, so that it finds the caches holding its own
        operands, as an op of a training step finds those the op before it has just written. In
        strict turns each found them as the other signature left them, and the larger one's bytes
        evicted the smaller's operands: a bf16 multiply of [512, 64]ᵀ by [64, 512] took 103-107 µs
        after its fp32 twin (1.25 MB of operands and output) and 70-84 µs after itself on this
        project's machine, and 77-83 µs in examples/mlp.py's real bf16 step (cached as "primed")."""
        import torch

        # An op's temporaries come from memory the heap keeps, as in a training process that has run
        # a while: not from fresh pages each repetition, whose faults (tens of microseconds each in
        # a virtual machine that hands free memory back to its host) made a bf16 attention backward
        # measure 20.3 ms where the training step took 13.9 ms (trace/collect/heap.py)
        keep_freed()
        previous = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            with torch.no_grad():
                values = [[make_tensor(torch, *tensor) for tensor in tensors]
                          for _, tensors in runs]
                warmed = [_warmed_up(torch, runner, made)
                          for (runner, _), made in zip(runs, values)]
                slowest = max(first for first, _ in warmed)
                if _heap_room(sum(fresh for _, fresh in warmed)):
                    for (runner, _), made in zip(runs, values):
                        runner(torch, made)  # warm again, on the memory the heap now keeps
                times: list[list[int]] = [[] for _ in runs]
                emptied = torch.empty(FLUSH_BYTES // 4 if flush else 0, dtype=torch.float32)
                emptied.zero_()  # its pages faulted in before the first timed run
                clock = cpu_clock(self.threads)
                # a slow op's bytes outgrow the caches: priming it would only spend the budget
                primed = not flush and len(runs) > 1 and slowest <= SLOW_NS
                for _ in range(self._repetitions(repetitions, slowest,
                                                 sum(first for first, _ in warmed))):
                    for (runner, _), made, mine in zip(runs, values, times):
                        if flush:  # caches emptied of the operands, as in a
                            emptied.zero_()  # training step that streams through them
                        elif primed:
                            runner(torch, made)  # after a run of its own
                        start = clock()
                        runner(torch, made)
                        mine.append(clock() - start)
        finally:
            torch.set_num_threads(previous)
        return [max(1, int(statistics.median(mine))) for mine in times]

    def _repetitions(self, asked: int, slowest: int, turn_ns: int) -> int:
        """Turns to time: `REPETITIONS`, or `SLOW_REPETITIONS` after a first run over `SLOW_NS`;
        where `asked`, as many as the budget left holds at `turn_ns` a turn, from
        `SLOW_REPETITIONS` to `asked`."""
        if not asked:
            return REPETITIONS if slowest <= SLOW_NS else SLOW_REPETITIONS
        left_ns = (self.budget_s - self.spent_s) * 1e9
        return max(SLOW_REPETITIONS, min(asked, int(left_ns // max(1, turn_ns))))

    def save(self) -> None:
        """Write what was measured in this process to the cache
        (atomically); a cache that cannot be written is left."""
        if not self._dirty:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            document = {"version": CACHE_VERSION,
                        "ns": {key: [value for value, _ in kept]
                               for key, kept in self.samples.items()},
                        "probes": {key: [probe for _, probe in kept]
                                   for key, kept in self.samples.items()}}
            write_atomically(self.path, json.dumps(document, sort_keys=True).encode(),
                             cache=True)
            self._dirty = False
        except OSError:
            pass


#: 2: repetitions start with cold caches; 3: floating inputs require grad; 4: freed memory kept;
#: 5: blocks of 32 MiB and more from the heap's top, not fresh pages (`_heap_room`); 6: one thread
#: timed by its own CPU time (trace/collect/speed.cpu_clock), kept per CPU (`cpu_identity`), each
#: time with the speed probe of the process that measured it (`Measurer.cached`); 7: that probe
#: timed hot (trace/collect/speed.py); 8: the times of up to `SAMPLES` processes per signature, each
#: with its probe (0: not known); a version 7 cache is read as one process's
CACHE_VERSION = 8


#: Fewer fresh pages than this in a warmed-up run of an op are not worth growing the heap for.
FRESH_PAGES_LEAST = 256
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _heap_room(fresh: int) -> int:
    """Grow the heap where the last warm-up runs of an op still faulted `fresh` pages in: a block of
    32 MiB or more (the output of a [1400, 200] x [200, 10000] multiply, 56 MB) comes fresh from
    the kernel each call where the heap's top cannot hold it (glibc maps it), while in a training
    step traced under daydream's heap reserve the top holds it (trace/collect/heap.py): alone that
    multiply took 81 ms, faulting 13,672 pages a call, against 60 ms on memory the heap kept, and
    62 ms in the real step at that batch. By four times the memory they held, and at least as much
    as the trace's reserve (with less, the top was still found short now and then); the bytes
    reserved (0 where few pages came fresh, or the heap is not glibc's)."""
    if fresh < FRESH_PAGES_LEAST:
        return 0
    wanted = max(4 * fresh * PAGE_BYTES, RESERVE_LEAST)
    return reserve(-(-wanted // BLOCK) * BLOCK)


def _rnn_forward_state(values: list[Any]) -> list[Any]:
    """`aten::mkldnn_rnn_layer_backward`'s arguments with what its forward makes (`RNN_SAVED`)
    made by running `aten::mkldnn_rnn_layer` once on the same inputs and settings (with gradients
    on: under no_grad it makes no workspace)."""
    import torch

    (reverse, mode, hidden_size, layers, has_biases, train, bidirectional, batch_sizes,
     batch_first) = values[13:22]
    with torch.enable_grad():
        state = torch.ops.aten.mkldnn_rnn_layer(*values[:7], reverse, batch_sizes, mode,
                                                hidden_size, layers, has_biases, bidirectional,
                                                batch_first, train)
    ready = list(values)
    for position, value in zip(RNN_SAVED, state):
        ready[position] = value.detach()
    return ready


def _non_negative(values: list[Any]) -> list[Any]:
    """A square root's operand made non-negative, as an optimizer's second moment is: of a
    random normal one, half the results are NaN, which took a [512, 512] `sqrt` 2.5 ms here
    against 0.14 ms in a training step."""
    return [values[0].abs(), *values[1:]]


#: Ops of `RUN_AGAIN` whose recorded arguments are made ready before the op is timed (once per
#: set of tensors, outside the timed calls): op name -> arguments -> arguments.
PREPARED: dict[str, Callable[[list[Any]], list[Any]]] = {
    "aten::mkldnn_rnn_layer_backward": _rnn_forward_state,
    **{f"aten::{op}": _non_negative for op in ("sqrt", "sqrt_", "rsqrt")}}


def _view(_torch: Any, xs: list[Any]) -> Any:
    """An op that touches no data: what emptying the caches alone costs the op after it."""
    return xs[0].view(xs[0].shape)


def _warmed_up(torch: Any, runner: Callable[[Any, list[Any]], Any],
               made: list[Any]) -> tuple[int, int]:
    """`runner` warmed up on `made`: `WARMUP` runs, or one where that first run took longer than
    `SLOW_NS`; that first run's time, ns, and the pages the last run faulted in."""
    start = time.perf_counter_ns()
    before = minor_faults()
    runner(torch, made)
    first = time.perf_counter_ns() - start
    for _ in range(WARMUP - 1 if first <= SLOW_NS else 0):
        before = minor_faults()
        runner(torch, made)
    return first, minor_faults() - before



def invoke(op: Any, values: list[Any], keywords: dict[int, str]) -> Any:
    """`op` called with `values`, every argument in schema order as the profiler records them;
    those at the positions of `keywords` (`keyword_only`), after `*`, passed by name."""
    return op(*[v for i, v in enumerate(values) if i not in keywords],
              **{name: values[i] for i, name in keywords.items()})


def keyword_only(op: Any) -> dict[int, str]:
    """Position -> name of the keyword-only arguments of aten op `op`
    (an overload's schema, or a packet's default overload's)."""
    schema = _schema(op)
    if schema is None:
        return {}
    return {i: argument.name for i, argument in enumerate(schema.arguments) if argument.kwarg_only}


def overload_of(op: Any, arguments: list[Any]) -> Any:
    """The overload of `op` whose schema takes `arguments` as recorded (as many, tensors where
    tensors were recorded): `aten::add_` with two tensors and a scalar is `add_.Tensor`, whose
    `alpha` is passed by name; a list of tensors ("tensors") where the schema takes one; never an
    overload of named dimensions (`Dimname`), which no recorded argument is."""
    for name in op.overloads():
        overload = getattr(op, name)
        schema = overload._schema.arguments
        if len(schema) == len(arguments) and all(
                _fits(a[0], str(s.type)) for a, s in zip(arguments, schema) if a[0] != "none"):
            return overload
    return op


def _fits(kind: str, formal: str) -> bool:
    """Whether a recorded argument of `kind` ("tensor", "tensors", "value") fits a schema type."""
    if "Dimname" in formal:
        return False
    if kind == "tensors":
        return formal.startswith("List[") and "Tensor" in formal
    return (kind == "tensor") == (formal in ("Tensor", "Optional[Tensor]"))


def unrecorded(op: Any) -> dict[int, Any]:
    """Position -> the schema's default, for each argument of aten op `op` that cannot be None but
    has a default: where the profiler recorded nothing for it, its default is passed. The profiler
    records a string argument as it records an absent tensor (no type, no value): `aten::gelu`'s
    `approximate` reads as nothing, and passing None for it fails ("Expected a value of type
    'str'"), so an op of it could not be re-run; with its default it runs as most calls make it
    (a string argument picks a formula, and the formulas of one op cost about the same)."""
    schema = _schema(op)
    if schema is None:
        return {}
    return {i: argument.default_value for i, argument in enumerate(schema.arguments)
            if argument.has_default_value() and type(argument.type).__name__ != "OptionalType"}


def lacks_argument(op: Any, arguments: list[Any]) -> bool:
    """Whether aten op `op`, at the overload its recorded `arguments` fit, needs one the profiler
    recorded as nothing and that has no default: a list of optional tensors (`Tensor?[]`,
    aten::index's and index_put's indices), which the profiler does not record at all, so such a
    call cannot be made again (the indices' count sets the output's shape)."""
    schema = _schema(overload_of(op, arguments))
    if schema is None:
        return False
    return any(a[0] == "none" and type(s.type).__name__ != "OptionalType"
               and not s.has_default_value() for a, s in zip(arguments, schema.arguments))


def _schema(op: Any) -> Any:
    """The schema of aten op `op`: an overload's, or a packet's default
    overload's; None if neither."""
    return getattr(op, "_schema", None) or getattr(getattr(op, "default", None), "_schema", None)


def make_tensor(torch: Any, shape: tuple[int, ...], kind: str,
          order: tuple[int, ...] | None = None) -> Any:
    """A tensor of `shape` and `kind`, laid out in memory with its dims in
    `order` (outermost first; None: contiguous) as the recorded one was: a
    channels-last image is not the same convolution as a contiguous one.

    A floating one requires grad, as a training step's weights and activations do (ops run under
    no_grad, so no graph is built): ATen picks its path by it. A linear layer of a transposed 3D
    input (nn.MultiheadAttention's with batch_first=True) folds it into one matrix multiply where
    the weight requires grad, and runs batched multiplies of the broadcast weight where it does not:
    in bf16 on a CPU 4x slower (9.9 against 2.4 ms for a [65, 32, 192] input and a [576, 192]
    weight)."""
    dtype = getattr(torch, TORCH_TYPES.get(kind, "float32"))
    if order is not None and sorted(order) == list(range(len(shape))):
        made = make_tensor(torch, tuple(shape[i] for i in order), kind)
        made = made.permute([order.index(dim) for dim in range(len(shape))])
    elif dtype.is_floating_point:
        made = torch.randn(shape, dtype=torch.float32).to(dtype)
    else:
        return torch.randint(0, 2, shape, dtype=dtype)
    # the permuted view, made under no_grad, does not inherit it
    return made.requires_grad_() if made.is_floating_point() else made


def _read_cache(path: Path) -> dict[str, list[tuple[int, int]]]:
    """The cached times at `path`: per signature, each process's time and speed probe (0: not
    known), only well-formed entries (positive ints; a probe list of another length is not known);
    a version 7 cache's one time and probe per signature as one process's; a missing or damaged
    file gives none."""
    try:
        if not path.is_file() or path.stat().st_size > 64 * 2**20:
            return {}
        document = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if (not isinstance(document, dict) or document.get("version") not in (7, CACHE_VERSION)
            or not isinstance(document.get("ns"), dict)):
        return {}
    if document["version"] == 7:  # one time and one probe per signature
        document = {part: {k: [v] for k, v in (document.get(part) or {}).items()}
                    if isinstance(document.get(part), dict) else None for part in ("ns", "probes")}
    times, probes = (_positive(document.get(part)) for part in ("ns", "probes"))
    samples: dict[str, list[tuple[int, int]]] = {}
    for key, values in times.items():
        known = probes.get(key, [])
        known = known if len(known) == len(values) else [0] * len(values)
        samples[key] = list(zip(values, known))[-SAMPLES:]
    return samples


def _positive(entries: Any) -> dict[str, list[int]]:
    """The entries of a cache's map that are non-empty lists of positive ints under string keys."""
    if not isinstance(entries, dict):
        return {}
    return {k: v for k, v in entries.items() if isinstance(k, str) and isinstance(v, list) and v
            and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v)}


def _median(values: list[int]) -> int:
    """The median of `values`, a whole number (of two in the middle, their mean, rounded)."""
    return max(1, int(round(statistics.median(values))))


def measuring_enabled(choice: bool | None) -> bool:
    """--measure / --no-measure, or DAYDREAM_MEASURE=0|1; on by default."""
    if choice is not None:
        return choice
    return os.environ.get("DAYDREAM_MEASURE", "1") != "0"
