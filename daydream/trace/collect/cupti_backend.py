"""The CUPTI backend: NVIDIA's activity API (cupti-python) turned into a Kineto document.

    problem = unavailable_reason()          # None when CUPTI can be used here
    document, recorded, outcome = record(options, status)
    document = convert(records, spans, CaptureMeta(process_id=os.getpid()))

`record` runs the script under the global hooks (`hooks.install`), times every layer
and phase range on the host with `cupti.get_timestamp()` (the clock of the activity
records) and pushes a CUPTI external correlation id per range, so every runtime call
made inside a range, and the GPU work it launched, carries that range's id as
`External id`. Activity collection is enabled only for the recorded iterations.
`convert` is a pure function from activity records and host spans to the PyTorch
profiler's Chrome-trace JSON (what `daydream.trace.kineto` reads), so the rest of
daydream cannot tell the two backends apart.

Only one CUPTI activity subscriber works in a process (CUDA <= 13.2), so this backend
never runs together with torch.profiler: `record` refuses to start when the profiler is
already running in the script.

cupti-python facts relied on (checked against cupti-python 13.4.0; the attribute names
and enum values are asserted by tests/trace/test_cupti_conversion.py whenever
cupti-python is importable):

* `from cupti import cupti`; `cupti.activity_register_callbacks(requested, completed)`
  where `requested()` returns `(buffer size in bytes, max records or 0)` and
  `completed(activities)` gets a list of record objects (the samples shipped with
  cupti-python 13.4.0, `cupti_common.py`). The objects can point into CUPTI's buffer
  (`ptr`, `from_ptr`), so they are copied into plain namespaces (`snapshot`) inside the
  callback.
* `cupti.activity_enable(kind)`, `cupti.activity_disable(kind)`,
  `cupti.activity_flush_all(flag)` (1 = forced; CUPTI documents cuptiActivityFlushAll as
  blocking: the completed callback has run when it returns), `cupti.get_timestamp()`
  (ns), `cupti.activity_push_external_correlation_id(kind, id)`,
  `cupti.activity_pop_external_correlation_id(kind)`, `cupti.set_thread_id_type(type)`.
  Without a CUDA driver, enable, disable, get_timestamp and push raise
  `cupti._internal.utils.NotSupportedError` (a `RuntimeError`) "CUDA driver is not found".
* `cupti.ActivityKind`: MEMCPY 1, MEMSET 2, KERNEL 3, DRIVER 4, RUNTIME 5,
  CONCURRENT_KERNEL 10, MEMCPY2 22, CUDA_EVENT 36, SYNCHRONIZATION 38,
  EXTERNAL_CORRELATION 39. `cupti.ExternalCorrelationKind.CUSTOM0` = 3 (what Kineto
  pushes for CPU ops). `cupti.ActivityThreadIdType.SYSTEM` = 1 (thread ids are gettid()).
* Record classes and the attributes read (`RECORD_FIELDS`): `ActivityAPI` (cbid,
  correlation_id, start, end, process_id, thread_id); `ActivityKernel9`..`13` (name,
  device_id, context_id, stream_id, grid_x/y/z, block_x/y/z, registers_per_thread,
  static_shared_memory, dynamic_shared_memory); `ActivityMemcpy5`..`7` and
  `ActivityMemcpyPtoP4` (copy_kind, src_kind, dst_kind, bytes); `ActivityMemset4`/`5`
  (memory_kind, bytes); `ActivitySynchronization`/`2` (type, cuda_event_id; `2` adds
  cuda_event_sync_id); `ActivityExternalCorrelation` (external_kind, external_id,
  correlation_id); `ActivityCudaEvent`/`2` (event_id, stream_id; `2` adds device_id and
  cuda_event_sync_id). `kind` is an int on every record.
* `cupti.ActivityMemcpyKind` (HTOD 1 .. PTOP 10), `cupti.ActivityMemoryKind`
  (PAGEABLE 1 .. MANAGED_STATIC 7), `cupti.ActivitySynchronizationType`
  (EVENT_SYNCHRONIZE 1, STREAM_WAIT_EVENT 2, STREAM_SYNCHRONIZE 3, CONTEXT_SYNCHRONIZE 4);
  0xFFFFFFFF marks a sync record's stream or event id as not applicable.
* API names come from `cupti.RuntimeApiTraceCbid` / `cupti.DriverApiTraceCbid` (13.0:
  `runtime_api_trace_cbid` / `driver_api_trace_cbid`, the record classes the same) member
  names (no driver needed, unlike `cupti.get_callback_name`); runtime names carry a
  `_v3020`-style version suffix that Kineto does not write, so it is removed.

Kineto conventions copied (pytorch/kineto CuptiActivityProfiler.cpp, and the corpus):
runtime calls cudaGetDevice, cudaSetDevice, cudaGetLastError, cudaEventCreate,
cudaEventCreateWithFlags and cudaEventDestroy are left out; memcpy names read
"Memcpy HtoD (Pageable -> Device)", memset names "Memset (Device)"; a kernel's shared
memory is static + dynamic; kernel names are demangled.

Limits: CUPTI keeps external correlation ids per host thread, so work launched on
another thread than the range's (autograd runs the backward of CUDA tensors on its own
device threads) has no `External id`; ProfilerStep#N spans carry an id but push none,
because iteration boundaries need not nest with the layer ranges on CUPTI's stack. Only
the current device is synchronized before the last flush.
"""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import enum
import functools
import itertools
import os
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from daydream.trace.collect import hooks as hook_module
from daydream.trace.collect.common import CaptureError, daydream_metadata
from daydream.trace.collect.runner import CaptureComplete, ScriptOutcome, run_script
from daydream.trace.collect.usage import HostUsage

if TYPE_CHECKING:
    from daydream.trace.collect.common import CaptureOptions, Status

INSTALL_HINT = ("cupti-python is not installed (pip install cupti-python: 13.x for CUDA 13, 12.8.0 "
                "for CUDA 12)")
NO_DRIVER = "no CUDA driver found"
NO_DEVICE = "torch sees no CUDA device"
BUFFER_BYTES = 8 * 1024 * 1024


class ActivityKind(enum.IntEnum):
    """The `cupti.ActivityKind` values this backend reads."""

    MEMCPY = 1
    MEMSET = 2
    KERNEL = 3
    DRIVER = 4
    RUNTIME = 5
    CONCURRENT_KERNEL = 10
    MEMCPY2 = 22
    CUDA_EVENT = 36
    SYNCHRONIZATION = 38
    EXTERNAL_CORRELATION = 39


RECORDED_KINDS = (
    ActivityKind.RUNTIME,
    ActivityKind.DRIVER,
    ActivityKind.CONCURRENT_KERNEL,
    ActivityKind.MEMCPY,
    ActivityKind.MEMSET,
    ActivityKind.SYNCHRONIZATION,
    ActivityKind.EXTERNAL_CORRELATION,
)
# Enabled when the driver allows it: which cudaEventRecord a sync waited for.
OPTIONAL_KINDS = (ActivityKind.CUDA_EVENT,)

EXTERNAL_KIND_CUSTOM0 = 3  # cupti.ExternalCorrelationKind.CUSTOM0
THREAD_ID_TYPE_SYSTEM = 1  # cupti.ActivityThreadIdType.SYSTEM
SYNC_INVALID = 0xFFFF_FFFF  # CUPTI_SYNCHRONIZATION_INVALID_VALUE
NO_VALUE = -1

MEMCPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
                8: "DtoD", 9: "HtoH", 10: "PtoP"}
MEMORY_KINDS = {0: "Unknown", 1: "Pageable", 2: "Pinned", 3: "Device", 4: "Array", 5: "Managed",
                6: "Device Static", 7: "Managed Static"}
SYNC_TYPES = {1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
_WAITS_ON_EVENT = (1, 2)
# cudaGetDevice, cudaSetDevice, cudaGetLastError, cudaEventCreate,
# cudaEventCreateWithFlags, cudaEventDestroy
BLOCKLISTED_RUNTIME_CBIDS = frozenset({17, 16, 10, 133, 134, 136})

_API_FIELDS = ("cbid", "correlation_id", "start", "end", "process_id", "thread_id")
_GPU_FIELDS = ("start", "end", "device_id", "context_id", "stream_id", "correlation_id")
_KERNEL_FIELDS = ("name", *_GPU_FIELDS, "grid_x", "grid_y", "grid_z", "block_x", "block_y",
                  "block_z", "registers_per_thread", "static_shared_memory",
                  "dynamic_shared_memory")
_MEMCPY_FIELDS = (*_GPU_FIELDS, "copy_kind", "src_kind", "dst_kind", "bytes")
_MEMSET_FIELDS = (*_GPU_FIELDS, "memory_kind", "bytes")
_SYNC_FIELDS = ("type", "start", "end", "context_id", "stream_id", "cuda_event_id",
                "correlation_id")
_EXTERNAL_FIELDS = ("external_kind", "external_id", "correlation_id")
_EVENT_FIELDS = ("correlation_id", "context_id", "stream_id", "event_id")

# Attribute names read from each record kind (besides `kind`), as cupti-python names them.
RECORD_FIELDS: dict[int, tuple[str, ...]] = {
    ActivityKind.RUNTIME: _API_FIELDS,
    ActivityKind.DRIVER: _API_FIELDS,
    ActivityKind.KERNEL: _KERNEL_FIELDS,
    ActivityKind.CONCURRENT_KERNEL: _KERNEL_FIELDS,
    ActivityKind.MEMCPY: _MEMCPY_FIELDS,
    ActivityKind.MEMCPY2: _MEMCPY_FIELDS,
    ActivityKind.MEMSET: _MEMSET_FIELDS,
    ActivityKind.SYNCHRONIZATION: _SYNC_FIELDS,
    ActivityKind.EXTERNAL_CORRELATION: _EXTERNAL_FIELDS,
    ActivityKind.CUDA_EVENT: _EVENT_FIELDS,
}
# Read when present: newer record versions only (ActivitySynchronization2, ActivityCudaEvent2).
OPTIONAL_FIELDS: dict[int, tuple[str, ...]] = {
    ActivityKind.SYNCHRONIZATION: ("cuda_event_sync_id",),
    ActivityKind.CUDA_EVENT: ("device_id", "cuda_event_sync_id"),
}

_RUNTIME_VERSION = re.compile(r"_v\d+$")


@dataclass(slots=True)
class HostSpan:
    """A host time range (a layer, phase or ProfilerStep#N), in CUPTI ns."""

    name: str
    start_ns: int
    end_ns: int
    thread_id: int
    external_id: int


def cbid_label(kind: int, cbid: int) -> str:
    """The name of an API call whose callback id has no known name."""
    return f"{'runtime' if kind == ActivityKind.RUNTIME else 'driver'} API cbid {cbid}"


@dataclass(slots=True)
class CaptureMeta:
    """What `convert` needs besides the records: the process, the GPUs, how to name things."""

    process_id: int
    # Kineto `deviceProperties`
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    distributed: dict[str, Any] | None = None  # Kineto `distributedInfo`
    api_name: Callable[[int, int], str] = cbid_label  # (ActivityKind, cbid) -> "cudaLaunchKernel"
    kernel_name: Callable[[str], str] = str  # mangled -> readable


# --------------------------------------------------------------------------- availability


def unavailable_reason() -> str | None:
    """None when CUPTI can record here; otherwise one short reason. Never raises."""
    try:
        from cupti import cupti
    except Exception:  # noqa: BLE001 - missing, or an install that cannot load: either way unusable
        return INSTALL_HINT
    if not _driver_works(cupti):
        return NO_DRIVER
    try:
        import torch
    except Exception:  # noqa: BLE001 - without torch there is nothing more to check here
        return None
    try:
        return None if torch.cuda.is_available() else NO_DEVICE
    except Exception:  # noqa: BLE001
        return NO_DEVICE


def _driver_works(cupti: Any) -> bool:
    """Enable and at once disable a kind that records nothing by itself."""
    kind = int(ActivityKind.EXTERNAL_CORRELATION)
    try:
        cupti.activity_enable(kind)
    except Exception:  # noqa: BLE001 - NotSupportedError without a driver, other errors alike
        return False
    try:
        cupti.activity_disable(kind)
    except Exception:  # noqa: BLE001
        return False
    return True


# --------------------------------------------------------------------------- recording


def _profiler_enabled(torch: Any) -> Callable[[], bool]:
    """Whether torch's own profiler records now (the C binding
    torch.autograd does not re-export)."""
    enabled = torch.autograd._profiler_enabled
    return lambda: bool(enabled())


def record(options: CaptureOptions,
           status: Status | None) -> tuple[dict[str, Any] | None, int, ScriptOutcome]:
    """(trace document or None, iterations recorded, how the script
    ended); the contract of torch_backend.record."""
    import torch
    from cupti import cupti

    recorder = Recorder(cupti, options, status, synchronize=_synchronizer(torch),
                        profiler_running=_profiler_enabled(torch))
    before = hook_module.MemoryBeforeTrace(options.warmup)
    usage = HostUsage.recording(options.warmup, options.iterations, options.heap_reserve)

    def on_step() -> None:
        before.before_step(recorder.steps + 1, installed)
        usage.at_step(recorder.steps + 1)
        recorder.on_step()
        before.after_step(recorder.steps)

    installed = hook_module.install(on_step, options.step_fn, recorder.open_range,
                                    search_path=options.search_path)
    if options.step_fn and ":" not in options.step_fn:
        hook_module.watch_script_function(options.step_fn, options.path, installed)
    try:
        usage.begin()
        recorder.begin()
        outcome = (run_script(options.script, options.args, module=options.module)
                   if recorder.failure is None else ScriptOutcome())
    finally:
        installed.remove()
        recorder.stop()
    outcome.steps = recorder.steps
    if recorder.failure is not None:
        raise CaptureError(f"{options.script}: CUPTI could not record ({recorder.failure}) — use "
                           "--backend torch")
    if not recorder.complete:
        return None, recorder.recorded, outcome
    meta = CaptureMeta(os.getpid(), _device_properties(torch), recorder.distributed,
                       api_namer(cupti), demangle)
    document = convert(recorder.records, recorder.spans, meta)
    layers = {path: info.as_metadata() for path, info in installed.layers.items()}
    document["daydream"] = {**daydream_metadata(options, "cupti", layers, installed.batch_size,
                                                before.recorded(), usage.recorded()),
                            **document["daydream"]}
    return document, recorder.recorded, outcome


class Recorder:
    """Iteration counting, CUPTI on/off, host ranges and the records CUPTI delivers.

    Takes the `cupti` module as an argument so that its logic runs in tests without a GPU.
    Collection is on from the end of warmup to the end of the last recorded iteration.
    """

    def __init__(self, cupti: Any, options: CaptureOptions, status: Status | None = None,
                 synchronize: Callable[[], None] | None = None,
                 profiler_running: Callable[[], bool] | None = None) -> None:
        self.cupti = cupti
        self.warmup, self.iterations, self.finish = (options.warmup, options.iterations,
                                                     options.finish)
        self.status = status
        self.synchronize = synchronize
        self.profiler_running = profiler_running
        self.steps = 0
        self.recording = False
        self.complete = False
        self.failure: BaseException | None = None
        self.records: list[Any] = []
        self.spans: list[HostSpan] = []
        self.distributed: dict[str, Any] | None = None
        self.enabled: list[int] = []
        self.thread_id: Callable[[], int] = threading.get_native_id
        self._ids = itertools.count(1)
        self._step_span: tuple[int, int, int] | None = None  # (step, start ns, external id)

    @property
    def wanted(self) -> int:
        return self.warmup + self.iterations

    @property
    def recorded(self) -> int:
        return max(0, min(self.steps - self.warmup, self.iterations))

    def begin(self) -> None:
        """Before the script runs: report, and start at once when there is no warmup."""
        if self.status:
            self.status("warming up" if self.warmup
                        else f"recording iteration 1 of {self.iterations}")
        if self.warmup == 0:
            self._start_or_fail()

    def on_step(self) -> None:
        """An iteration ended (the hooks call this)."""
        if self.failure is not None:
            raise CaptureComplete
        self.steps += 1
        if self.recording:
            self._close_step()
        if self.steps == self.wanted and self.recording:
            self.stop()
            self.complete = True
        elif self.warmup <= self.steps < self.wanted:
            self._start_or_fail()
        self._report()
        if self.failure is not None or (self.complete and not self.finish):
            raise CaptureComplete

    def open_range(self, name: str) -> _Range:
        return _Range(self, name)

    def stop(self) -> None:
        """Wait for the GPU, disable every kind, and collect what is
        left. Idempotent, never raises."""
        if not self.enabled:
            self.recording = False
            return
        if self.synchronize is not None:
            self._attempt(self.synchronize)
        self.recording = False
        for kind in self.enabled:
            self._attempt(self.cupti.activity_disable, kind)
        self.enabled.clear()
        self._attempt(self.cupti.activity_flush_all, 1)

    def _start_or_fail(self) -> None:
        if not self.recording:
            try:
                self._start()
            except Exception as exc:  # noqa: BLE001 - reported by record() as a CaptureError
                self.failure = exc
                self.stop()
                return
        self._open_step()

    def _start(self) -> None:
        if self.profiler_running is not None and self.profiler_running():
            raise RuntimeError("torch.profiler is already running in the script; only one CUPTI "
                               "client can record")
        try:
            self.cupti.set_thread_id_type(THREAD_ID_TYPE_SYSTEM)
        # CUPTI's default thread id is pthread_self(), Python's get_ident()
        except Exception:  # noqa: BLE001
            self.thread_id = threading.get_ident
        self.cupti.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
        for kind in RECORDED_KINDS:
            self.cupti.activity_enable(int(kind))
            self.enabled.append(int(kind))
        for kind in OPTIONAL_KINDS:
            if self._attempt(self.cupti.activity_enable, int(kind)):
                self.enabled.append(int(kind))
        self.distributed = _distributed_info()
        self.recording = True

    def _open_step(self) -> None:
        self._step_span = (self.steps, self.cupti.get_timestamp(), next(self._ids))

    def _close_step(self) -> None:
        if self._step_span is None:
            return
        step, start_ns, span_id = self._step_span
        self.spans.append(HostSpan(f"ProfilerStep#{step}", start_ns, self.cupti.get_timestamp(),
                                   self.thread_id(), span_id))
        self._step_span = None

    def _report(self) -> None:
        if not self.status:
            return
        if self.steps < self.warmup:
            self.status(f"warming up: iteration {self.steps + 1} of {self.warmup}")
        elif self.steps < self.wanted:
            self.status(f"recording iteration {self.steps - self.warmup + 1} of {self.iterations}")

    def _buffer_requested(self) -> tuple[int, int]:
        return BUFFER_BYTES, 0

    def _buffer_completed(self, activities: Iterable[Any]) -> None:
        for activity in activities:
            try:
                self.records.append(snapshot(activity))
            # an unreadable record is counted by convert, never fatal
            except Exception:  # noqa: BLE001
                self.records.append(SimpleNamespace(kind=NO_VALUE))

    @staticmethod
    def _attempt(action: Callable[..., Any], *args: Any) -> bool:
        try:
            action(*args)
        # cleanup goes on; the record is as good as what was delivered
        except Exception:  # noqa: BLE001
            return False
        return True


class _Range:
    """A layer or phase range: host times in CUPTI ns and an external
    correlation id while it is open."""

    __slots__ = ("recorder", "name", "span_id", "start_ns", "thread_id")

    def __init__(self, recorder: Recorder, name: str) -> None:
        self.recorder = recorder
        self.name = name
        self.span_id = 0

    def __enter__(self) -> _Range:
        recorder = self.recorder
        if recorder.recording:
            self.span_id = next(recorder._ids)
            self.thread_id = recorder.thread_id()
            self.start_ns = recorder.cupti.get_timestamp()
            recorder.cupti.activity_push_external_correlation_id(
                EXTERNAL_KIND_CUSTOM0, self.span_id)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.span_id:
            cupti = self.recorder.cupti
            cupti.activity_pop_external_correlation_id(EXTERNAL_KIND_CUSTOM0)
            self.recorder.spans.append(HostSpan(self.name, self.start_ns, cupti.get_timestamp(),
                                                self.thread_id, self.span_id))


def snapshot(activity: Any) -> SimpleNamespace:
    """A plain copy of the attributes `convert` reads (the record's own
    memory is CUPTI's buffer)."""
    kind = int(activity.kind)
    fields = RECORD_FIELDS.get(kind)
    if fields is None:
        return SimpleNamespace(kind=kind)
    values = {name: getattr(activity, name) for name in fields}
    values.update({name: getattr(activity, name, None) for name in OPTIONAL_FIELDS.get(kind, ())})
    return SimpleNamespace(kind=kind, **values)


def _synchronizer(torch: Any) -> Callable[[], None] | None:
    """Wait for the current device, so that the last iteration's GPU records are complete."""
    if not torch.cuda.is_available():
        return None
    return torch.cuda.synchronize


def _distributed_info() -> dict[str, Any] | None:
    try:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return None
        return {"backend": str(dist.get_backend()), "rank": dist.get_rank(),
                "world_size": dist.get_world_size()}
    except Exception:  # noqa: BLE001 - the trace is still useful without it
        return None


_DEVICE_PROPERTY_ATTRS = (
    ("maxThreadsPerBlock", "max_threads_per_block"),
    ("maxThreadsPerMultiprocessor", "max_threads_per_multi_processor"),
    ("regsPerMultiprocessor", "regs_per_multiprocessor"),
    ("warpSize", "warp_size"),
    ("sharedMemPerBlock", "shared_memory_per_block"),
    ("sharedMemPerMultiprocessor", "shared_memory_per_multiprocessor"),
    ("numSms", "multi_processor_count"),
    ("sharedMemPerBlockOptin", "shared_memory_per_block_optin"),
)


def _device_properties(torch: Any) -> list[dict[str, Any]]:
    """Kineto's `deviceProperties` entries, from torch (which names the
    same devices CUPTI numbers)."""
    devices = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        entry: dict[str, Any] = {"id": index, "name": props.name,
                                 "totalGlobalMem": props.total_memory, "computeMajor": props.major,
                                 "computeMinor": props.minor}
        for key, attr in _DEVICE_PROPERTY_ATTRS:
            value = getattr(props, attr, None)
            if isinstance(value, int):
                entry[key] = value
        devices.append(entry)
    return devices


def _enum(cupti: Any, name: str) -> Any:
    """One of cupti-python's enums by its 13.x name: 13.0 spells it in snake case
    (`runtime_api_trace_cbid`), 13.2+ both."""
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    for spelling in (name, snake):
        if hasattr(cupti, spelling):
            return getattr(cupti, spelling)
    return ()


def api_namer(cupti: Any) -> Callable[[int, int], str]:
    """(kind, cbid) -> API name, from cupti-python's callback-id enums (no driver needed)."""
    runtime = {int(member): _RUNTIME_VERSION.sub("", member.name)
               for member in _enum(cupti, "RuntimeApiTraceCbid")}
    driver = {int(member): member.name for member in _enum(cupti, "DriverApiTraceCbid")}

    def name(kind: int, cbid: int) -> str:
        table = runtime if kind == ActivityKind.RUNTIME else driver
        return table.get(cbid) or cbid_label(kind, cbid)

    return name


@functools.lru_cache(maxsize=1)
def _cxxabi() -> tuple[Any, Any] | None:
    """(__cxa_demangle, free), or None where libstdc++ cannot be loaded."""
    try:
        library = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        demangler = library.__cxa_demangle
        demangler.restype = ctypes.c_void_p
        demangler.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.POINTER(ctypes.c_int)]
        free = ctypes.CDLL(None).free
        free.argtypes = [ctypes.c_void_p]
        return demangler, free
    except (OSError, AttributeError):
        return None


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """The C++ name of a mangled kernel name (as Kineto writes it); other names unchanged."""
    if not name.startswith("_Z"):
        return name
    abi = _cxxabi()
    if abi is None:
        return name
    demangler, free = abi
    status = ctypes.c_int(-1)
    result = demangler(name.encode(), None, None, ctypes.byref(status))
    if not result:
        return name
    try:
        return ctypes.string_at(result).decode("utf-8", "replace") if status.value == 0 else name
    finally:
        free(result)


# --------------------------------------------------------------------------- conversion


@dataclass(slots=True)
class _Event:
    """One trace event before the time base is known (times in CUPTI ns)."""

    cat: str
    name: str
    pid: int
    tid: int
    start_ns: int
    end_ns: int
    args: dict[str, Any]


@dataclass(slots=True)
class _Correlations:
    """What the records say about each other: external ids, devices of contexts, event records."""

    external: dict[int, int] = field(default_factory=dict)  # correlation id -> range id
    context_device: dict[int, int] = field(default_factory=dict)
    event_by_sync_id: dict[int, Any] = field(default_factory=dict)
    events_by_id: dict[tuple[int, int], list[tuple[int, Any]]] = field(default_factory=dict)

    def event_record(self, sync: Any) -> Any | None:
        """The CUDA_EVENT record of the cudaEventRecord that a sync record waited on."""
        sync_id = getattr(sync, "cuda_event_sync_id", None)
        if sync_id and sync_id in self.event_by_sync_id:
            return self.event_by_sync_id[sync_id]
        # Older records: the latest record of the same event before the sync call.
        history = self.events_by_id.get((sync.context_id, sync.cuda_event_id), [])
        position = bisect.bisect_left(history, sync.correlation_id, key=lambda item: item[0])
        return history[position - 1][1] if position else None


def convert(records: Iterable[Any], spans: Iterable[HostSpan], meta: CaptureMeta) -> dict[str, Any]:
    """A Kineto (PyTorch profiler) trace document from CUPTI activity records and host spans.

    `records` are objects with the attributes cupti-python gives them (`RECORD_FIELDS`);
    `spans` are the host ranges. `ts`/`dur` are µs relative to `baseTimeNanoseconds`,
    the earliest start. Records of kinds not read here, or missing an attribute, are
    skipped and counted in `document["daydream"]["cupti"]["skipped"]`.
    """
    records = list(records)
    tally: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    correlations = _collect_correlations(records, skipped)
    pending = [_span_event(span, meta.process_id) for span in spans]
    for record in records:
        event = _convert_record(record, correlations, meta, skipped)
        if event is not None:
            pending.append(event)
            tally[event.cat] += 1
    base_ns = min((event.start_ns for event in pending), default=0)
    pending.sort(key=lambda e: (e.start_ns, e.start_ns - e.end_ns, e.cat, e.name, e.pid, e.tid))
    document: dict[str, Any] = {"schemaVersion": 1,
                                "deviceProperties": list(meta.device_properties)}
    if meta.distributed is not None:
        document["distributedInfo"] = dict(meta.distributed)
    document["traceEvents"] = [_finish(event, base_ns) for event in pending]
    document["baseTimeNanoseconds"] = base_ns
    document["daydream"] = {"cupti": {"events": dict(sorted(tally.items())),
                                      "skipped": dict(sorted(skipped.items()))}}
    return document


def _collect_correlations(records: list[Any], skipped: Counter[str]) -> _Correlations:
    found = _Correlations()
    for record in records:
        kind = getattr(record, "kind", NO_VALUE)
        if (kind in (ActivityKind.EXTERNAL_CORRELATION, ActivityKind.CUDA_EVENT)
            and not _has_fields(record, kind)):
            skipped[f"malformed {ActivityKind(kind).name.lower()} record"] += 1
        elif kind == ActivityKind.EXTERNAL_CORRELATION:
            if record.external_kind == EXTERNAL_KIND_CUSTOM0:
                found.external[record.correlation_id] = record.external_id
            else:
                skipped["external correlation of another kind"] += 1
        elif kind == ActivityKind.CUDA_EVENT:
            _add_event_record(found, record)
        elif kind in _GPU_KINDS and hasattr(record, "context_id") and hasattr(record, "device_id"):
            found.context_device.setdefault(record.context_id, record.device_id)
    for history in found.events_by_id.values():
        history.sort(key=lambda item: item[0])
    return found


def _add_event_record(found: _Correlations, record: Any) -> None:
    sync_id = getattr(record, "cuda_event_sync_id", None)
    if sync_id:
        found.event_by_sync_id[sync_id] = record
    found.events_by_id.setdefault((record.context_id, record.event_id),
                                  []).append((record.correlation_id, record))
    device = getattr(record, "device_id", None)
    if device is not None:
        found.context_device.setdefault(record.context_id, device)


def _has_fields(record: Any, kind: int) -> bool:
    return all(hasattr(record, name) for name in RECORD_FIELDS[kind])


def _convert_record(record: Any, correlations: _Correlations, meta: CaptureMeta,
                    skipped: Counter[str]) -> _Event | None:
    kind = getattr(record, "kind", NO_VALUE)
    converter = _CONVERTERS.get(kind)
    if converter is None:
        if kind == NO_VALUE:
            skipped["unreadable record"] += 1
        elif kind not in (ActivityKind.EXTERNAL_CORRELATION, ActivityKind.CUDA_EVENT):
            skipped[f"unknown kind {kind}"] += 1
        return None
    label = ActivityKind(kind).name.lower()
    try:
        if record.start == 0 and record.end == 0:
            skipped[f"{label} record without timestamps"] += 1
            return None
        if record.end < record.start:
            skipped[f"{label} record ending before it starts"] += 1
            return None
        return converter(record, correlations, meta, skipped)
    except AttributeError:
        skipped[f"malformed {label} record"] += 1
        return None


def _with_external(args: dict[str, Any], correlation: int,
                   correlations: _Correlations) -> dict[str, Any]:
    external = correlations.external.get(correlation)
    if external is not None:
        args["External id"] = external
    return args


def _api_event(record: Any, correlations: _Correlations, meta: CaptureMeta,
               skipped: Counter[str]) -> _Event | None:
    kind = int(record.kind)
    if kind == ActivityKind.RUNTIME and record.cbid in BLOCKLISTED_RUNTIME_CBIDS:
        skipped["runtime call Kineto leaves out"] += 1
        return None
    args = _with_external({}, record.correlation_id, correlations)
    args.update({"cbid": record.cbid, "correlation": record.correlation_id})
    category = "cuda_runtime" if kind == ActivityKind.RUNTIME else "cuda_driver"
    return _Event(category, meta.api_name(kind, record.cbid), record.process_id, record.thread_id,
                  record.start, record.end, args)


def _gpu_args(record: Any, correlations: _Correlations) -> dict[str, Any]:
    args = _with_external({}, record.correlation_id, correlations)
    args.update({"device": record.device_id, "context": record.context_id,
                 "stream": record.stream_id, "correlation": record.correlation_id})
    return args


def _kernel_event(record: Any, correlations: _Correlations, meta: CaptureMeta,
                  skipped: Counter[str]) -> _Event:
    args = _gpu_args(record, correlations)
    args.update({
        "registers per thread": record.registers_per_thread,
        "shared memory": record.static_shared_memory + record.dynamic_shared_memory,
        "grid": [record.grid_x, record.grid_y, record.grid_z],
        "block": [record.block_x, record.block_y, record.block_z],
    })
    name = (record.name.decode("utf-8", "replace") if isinstance(record.name, bytes)
            else str(record.name))
    return _Event("kernel", meta.kernel_name(name), record.device_id, record.stream_id,
                  record.start, record.end, args)


def _memcpy_event(record: Any, correlations: _Correlations, meta: CaptureMeta,
                  skipped: Counter[str]) -> _Event:
    copy = MEMCPY_KINDS.get(record.copy_kind, "<unknown>")
    source = MEMORY_KINDS.get(record.src_kind, "<unknown>")
    destination = MEMORY_KINDS.get(record.dst_kind, "<unknown>")
    args = _gpu_args(record, correlations)
    args["bytes"] = record.bytes
    _add_bandwidth(args, record)
    name = f"Memcpy {copy} ({source} -> {destination})"
    return _Event("gpu_memcpy", name, record.device_id, record.stream_id, record.start, record.end,
                  args)


def _memset_event(record: Any, correlations: _Correlations, meta: CaptureMeta,
                  skipped: Counter[str]) -> _Event:
    args = _gpu_args(record, correlations)
    args["bytes"] = record.bytes
    _add_bandwidth(args, record)
    name = f"Memset ({MEMORY_KINDS.get(record.memory_kind, '<unknown>')})"
    return _Event("gpu_memset", name, record.device_id, record.stream_id, record.start, record.end,
                  args)


def _add_bandwidth(args: dict[str, Any], record: Any) -> None:
    duration_ns = record.end - record.start
    if duration_ns > 0:
        args["memory bandwidth (GB/s)"] = record.bytes / duration_ns  # bytes per ns = GB/s


def _sync_event(record: Any, correlations: _Correlations, meta: CaptureMeta,
                skipped: Counter[str]) -> _Event:
    label = SYNC_TYPES.get(record.type, "Unknown Sync")
    stream = _valid(record.stream_id)
    device = correlations.context_device.get(record.context_id, NO_VALUE)
    args = _with_external({}, record.correlation_id, correlations)
    args["cuda_sync_kind"] = label
    if record.type in _WAITS_ON_EVENT:
        args.update(_wait_args(record, correlations))
    args.update({"stream": stream, "correlation": record.correlation_id, "device": device,
                 "context": record.context_id})
    return _Event("cuda_sync", label, device, stream, record.start, record.end, args)


def _wait_args(record: Any, correlations: _Correlations) -> dict[str, Any]:
    waits: dict[str, Any] = {}
    event = correlations.event_record(record)
    if event is not None:
        waits["wait_on_stream"] = event.stream_id
        waits["wait_on_cuda_event_record_corr_id"] = event.correlation_id
    waits["wait_on_cuda_event_id"] = _valid(record.cuda_event_id)
    return waits


def _valid(value: int) -> int:
    return NO_VALUE if value == SYNC_INVALID else value


_Converter = Callable[[Any, _Correlations, CaptureMeta, Counter[str]], _Event | None]
_CONVERTERS: dict[int, _Converter] = {
    ActivityKind.RUNTIME: _api_event,
    ActivityKind.DRIVER: _api_event,
    ActivityKind.KERNEL: _kernel_event,
    ActivityKind.CONCURRENT_KERNEL: _kernel_event,
    ActivityKind.MEMCPY: _memcpy_event,
    ActivityKind.MEMCPY2: _memcpy_event,
    ActivityKind.MEMSET: _memset_event,
    ActivityKind.SYNCHRONIZATION: _sync_event,
}
_GPU_KINDS = (ActivityKind.KERNEL, ActivityKind.CONCURRENT_KERNEL, ActivityKind.MEMCPY,
              ActivityKind.MEMCPY2, ActivityKind.MEMSET)


def _span_event(span: HostSpan, process_id: int) -> _Event:
    return _Event("user_annotation", span.name, process_id, span.thread_id, span.start_ns,
                  span.end_ns, {"External id": span.external_id})


def _finish(event: _Event, base_ns: int) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": event.cat,
        "name": event.name,
        "pid": event.pid,
        "tid": event.tid,
        "ts": (event.start_ns - base_ns) / 1000,
        "dur": (event.end_ns - event.start_ns) / 1000,
        "args": event.args,
    }
