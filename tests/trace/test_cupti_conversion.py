"""The CUPTI backend without a GPU: hand-made activity records → Kineto JSON → daydream's reader.

The fake records are `SimpleNamespace`s carrying exactly the attribute names
`cupti_backend.RECORD_FIELDS` lists; when cupti-python is importable, those names (and
the enum values the backend keeps in its own tables) are checked against the real
classes, so the fakes cannot drift from what CUPTI delivers.
"""

from __future__ import annotations

import enum
import json
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from daydream.mapping import find_iterations, link
from daydream.trace import EventKind, TrackKind
from daydream.trace.collect import CaptureOptions
from daydream.trace.collect import cupti_backend as cb
from daydream.trace.collect.runner import CaptureComplete
from daydream.trace.kineto import decode
from daydream.trace.model import Trace

K = cb.ActivityKind
BASE = 1_712_000_000_123_456_789  # CUPTI timestamps are ns since the epoch
PID, TID = 4242, 4243
API_NAMES: dict[tuple[int, int], str] = {
    (K.RUNTIME, 211): "cudaLaunchKernel",
    (K.RUNTIME, 41): "cudaMemcpyAsync",
    (K.RUNTIME, 51): "cudaMemsetAsync",
    (K.RUNTIME, 131): "cudaStreamSynchronize",
    (K.RUNTIME, 135): "cudaEventRecord",
    (K.RUNTIME, 147): "cudaStreamWaitEvent",
    (K.RUNTIME, 10): "cudaGetLastError",
    (K.DRIVER, 652): "cuLaunchKernelEx",
}


def fake(kind: int, **values: Any) -> SimpleNamespace:
    """A record of `kind` with exactly the attributes cupti-python gives it (optional ones may be left out)."""
    required, optional = set(cb.RECORD_FIELDS[kind]), set(cb.OPTIONAL_FIELDS.get(kind, ()))
    assert required <= values.keys() <= required | optional, sorted(values.keys() ^ required)
    return SimpleNamespace(kind=int(kind), **values)


def api(correlation: int, cbid: int, start: int, end: int, kind: int = K.RUNTIME) -> SimpleNamespace:
    return fake(kind, cbid=cbid, correlation_id=correlation, start=BASE + start, end=BASE + end,
                process_id=PID, thread_id=TID)


def gpu(correlation: int, start: int, end: int, stream: int = 7) -> dict[str, Any]:
    return {"start": BASE + start, "end": BASE + end, "device_id": 0, "context_id": 1, "stream_id": stream,
            "correlation_id": correlation}


def kernel(correlation: int, start: int, end: int, name: str = "gemm") -> SimpleNamespace:
    return fake(K.CONCURRENT_KERNEL, name=name, **gpu(correlation, start, end), grid_x=4, grid_y=2, grid_z=1,
                block_x=128, block_y=1, block_z=1, registers_per_thread=32, static_shared_memory=1024,
                dynamic_shared_memory=2048)


def external(correlation: int, external_id: int) -> SimpleNamespace:
    return fake(K.EXTERNAL_CORRELATION, external_kind=cb.EXTERNAL_KIND_CUSTOM0, external_id=external_id,
                correlation_id=correlation)


def sync(correlation: int, sync_type: int, start: int, end: int, stream: int, event: int, **extra: Any) -> SimpleNamespace:
    return fake(K.SYNCHRONIZATION, type=sync_type, start=BASE + start, end=BASE + end, context_id=1, stream_id=stream,
                cuda_event_id=event, correlation_id=correlation, **extra)


def cuda_event(correlation: int, event: int, stream: int, **extra: Any) -> SimpleNamespace:
    return fake(K.CUDA_EVENT, correlation_id=correlation, context_id=1, stream_id=stream, event_id=event, **extra)


def span(name: str, start: int, end: int, external_id: int) -> cb.HostSpan:
    return cb.HostSpan(name, BASE + start, BASE + end, TID, external_id)


def meta() -> cb.CaptureMeta:
    return cb.CaptureMeta(PID, [{"id": 0, "name": "NVIDIA H200", "computeMajor": 9, "computeMinor": 0}],
                          api_name=lambda kind, cbid: API_NAMES.get((kind, cbid)) or cb.cbid_label(kind, cbid))


def one_step() -> tuple[list[Any], list[cb.HostSpan]]:
    """One iteration: a layer launching a kernel, a copy, a memset, a stream sync, an event wait, a driver launch."""
    records = [
        external(7, 42), api(7, 211, 1_000, 1_040), kernel(7, 1_100, 1_600),
        external(8, 42), api(8, 41, 1_050, 1_090), fake(K.MEMCPY, **gpu(8, 1_610, 1_650), copy_kind=1, src_kind=1,
                                                         dst_kind=3, bytes=4096),
        api(9, 51, 1_700, 1_720), fake(K.MEMSET, **gpu(9, 1_730, 1_731), memory_kind=3, bytes=512),
        api(10, 131, 1_800, 2_500), sync(10, 3, 1_810, 2_490, stream=7, event=cb.SYNC_INVALID),
        api(11, 135, 2_600, 2_610), cuda_event(11, event=5, stream=7, device_id=0, cuda_event_sync_id=99),
        api(12, 147, 2_620, 2_630), sync(12, 2, 2_621, 2_629, stream=9, event=5, cuda_event_sync_id=99),
        api(13, 652, 2_700, 2_750, kind=K.DRIVER), kernel(13, 2_800, 2_900, name="triton_fused"),
    ]
    spans = [span("ProfilerStep#1", 900, 3_000, 41), span("daydream.layer::Net.fc", 990, 1_095, 42)]
    return records, spans


def read(document: dict[str, Any]) -> Trace:
    return decode(json.dumps(document).encode(), "test")


def row(trace: Trace, name: str) -> int:
    rows = [i for i in range(len(trace)) if trace.name_of(i) == name]
    assert len(rows) == 1, (name, rows)
    return rows[0]


def test_one_iteration_reads_back_with_kinds_times_and_links() -> None:
    records, spans = one_step()
    document = cb.convert(records, spans, meta())
    assert document["baseTimeNanoseconds"] == BASE + 900
    trace = read(document)
    kinds = {trace.name_of(i): EventKind(int(trace.kind[i])) for i in range(len(trace))}
    assert kinds == {
        "ProfilerStep#1": EventKind.ANNOTATION,
        "daydream.layer::Net.fc": EventKind.ANNOTATION,
        "cudaLaunchKernel": EventKind.RUNTIME,
        "gemm": EventKind.KERNEL,
        "cudaMemcpyAsync": EventKind.RUNTIME,
        "Memcpy HtoD (Pageable -> Device)": EventKind.MEMCPY,
        "cudaMemsetAsync": EventKind.RUNTIME,
        "Memset (Device)": EventKind.MEMSET,
        "cudaStreamSynchronize": EventKind.RUNTIME,
        "Stream Sync": EventKind.SYNC,
        "cudaEventRecord": EventKind.RUNTIME,
        "cudaStreamWaitEvent": EventKind.RUNTIME,
        "Stream Wait Event": EventKind.SYNC,
        "cuLaunchKernelEx": EventKind.DRIVER,
        "triton_fused": EventKind.KERNEL,
    }
    assert trace.meta.base_time_ns == BASE + 900
    gemm = row(trace, "gemm")
    assert (trace.ts_ns[gemm], trace.dur_ns[gemm]) == (1_100 - 900, 500)
    assert trace.ts_ns[row(trace, "ProfilerStep#1")] == 0 and trace.dur_ns[row(trace, "ProfilerStep#1")] == 2_100
    assert trace.dur_ns[row(trace, "Memset (Device)")] == 1

    links = link(trace)
    for gpu_name, call_name in [("gemm", "cudaLaunchKernel"), ("Memcpy HtoD (Pageable -> Device)", "cudaMemcpyAsync"),
                                ("Memset (Device)", "cudaMemsetAsync"), ("Stream Sync", "cudaStreamSynchronize"),
                                ("Stream Wait Event", "cudaStreamWaitEvent"), ("triton_fused", "cuLaunchKernelEx")]:
        assert links.launch[row(trace, gpu_name)] == row(trace, call_name), gpu_name
    assert not links.orphan.any()


def test_external_ids_name_the_innermost_range_and_host_events_share_the_thread() -> None:
    records, spans = one_step()
    trace = read(cb.convert(records, spans, meta()))
    for name in ("cudaLaunchKernel", "gemm", "cudaMemcpyAsync", "Memcpy HtoD (Pageable -> Device)", "daydream.layer::Net.fc"):
        assert trace.external_id[row(trace, name)] == 42, name
    assert trace.external_id[row(trace, "cudaMemsetAsync")] == -1  # launched outside every layer range
    assert trace.external_id[row(trace, "ProfilerStep#1")] == 41
    host = {int(trace.track[row(trace, name)]) for name in ("ProfilerStep#1", "daydream.layer::Net.fc", "cudaLaunchKernel")}
    assert len(host) == 1
    track = trace.tracks[host.pop()]
    assert (track.kind, track.pid, track.tid) == (TrackKind.HOST, PID, TID)
    assert [iteration.name for iteration in find_iterations(trace)] == ["ProfilerStep#1"]


def test_gpu_tracks_bytes_and_launch_configuration() -> None:
    records, spans = one_step()
    trace = read(cb.convert(records, spans, meta()))
    gemm_track = trace.tracks[int(trace.track[row(trace, "gemm")])]
    assert (gemm_track.kind, gemm_track.device, gemm_track.stream) == (TrackKind.GPU, 0, 7)
    assert trace.bytes[row(trace, "Memcpy HtoD (Pageable -> Device)")] == 4096
    assert trace.bytes[row(trace, "Memset (Device)")] == 512
    config = trace.tables["launch_config"]
    gemm = list(config["event"]).index(row(trace, "gemm"))
    assert [int(config[key][gemm]) for key in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")] == [4, 2, 1, 128, 1, 1]
    assert (int(config["registers"][gemm]), int(config["shared_memory"][gemm])) == (32, 1024 + 2048)
    assert [g.name for g in trace.meta.gpus] == ["NVIDIA H200"]


def test_sync_records_say_what_they_wait_on() -> None:
    records, spans = one_step()
    trace = read(cb.convert(records, spans, meta()))
    table = trace.tables["sync"]
    by_row = {int(event): i for i, event in enumerate(table["event"])}
    stream_sync = by_row[row(trace, "Stream Sync")]
    assert trace.strings[int(table["sync_kind_str"][stream_sync])] == "Stream Sync"
    assert trace.tracks[int(trace.track[row(trace, "Stream Sync")])].stream == 7
    assert int(table["wait_on_event_record_correlation"][stream_sync]) == -1
    wait = by_row[row(trace, "Stream Wait Event")]
    assert trace.strings[int(table["sync_kind_str"][wait])] == "Stream Wait Event"
    assert (int(table["wait_on_stream"][wait]), int(table["wait_on_event_record_correlation"][wait])) == (7, 11)
    assert int(table["wait_on_event_id"][wait]) == 5
    waiting = trace.tracks[int(trace.track[row(trace, "Stream Wait Event")])]
    assert (waiting.device, waiting.stream) == (0, 9)


def test_sync_without_sync_ids_waits_on_the_latest_record_of_its_event() -> None:
    records = [
        api(3, 135, 0, 10), cuda_event(3, event=5, stream=20),
        api(11, 135, 100, 110), cuda_event(11, event=5, stream=24),
        api(12, 147, 200, 210), sync(12, 1, 201, 209, stream=cb.SYNC_INVALID, event=5),
        api(20, 135, 300, 310), cuda_event(20, event=5, stream=28),  # recorded again after the sync
    ]
    document = cb.convert(records, [], meta())
    (event_sync,) = [e for e in document["traceEvents"] if e["cat"] == "cuda_sync"]
    assert event_sync["name"] == "Event Sync" and event_sync["tid"] == -1
    assert event_sync["args"]["wait_on_cuda_event_record_corr_id"] == 11
    assert event_sync["args"]["wait_on_stream"] == 24


def test_unknown_and_malformed_records_are_skipped_and_counted() -> None:
    records, spans = one_step()
    marker = SimpleNamespace(kind=12, id=1, name="nvtx", timestamp=BASE)  # MARKER: not read
    broken = SimpleNamespace(kind=int(K.CONCURRENT_KERNEL), start=BASE + 5, end=BASE + 6)  # attributes missing
    blocked = api(14, 10, 2_950, 2_951)  # cudaGetLastError: Kineto leaves it out
    untimed = api(15, 211, -BASE, -BASE)  # start = end = 0: CUPTI could not time it
    unreadable = SimpleNamespace(kind=-1)  # what the buffer callback keeps of a record it could not copy
    document = cb.convert([marker, *records, broken, blocked, untimed, unreadable], spans, meta())
    assert document["daydream"]["cupti"]["skipped"] == {
        "malformed concurrent_kernel record": 1,
        "runtime call Kineto leaves out": 1,
        "runtime record without timestamps": 1,
        "unknown kind 12": 1,
        "unreadable record": 1,
    }
    assert document["daydream"]["cupti"]["events"]["kernel"] == 2
    assert len(read(document)) == 15  # 16 records + 2 spans; the 2 external correlations and the event record fold in


def test_runtime_names_lose_cuptis_version_suffix() -> None:
    RuntimeApiTraceCbid = enum.IntEnum("RuntimeApiTraceCbid", {"cudaLaunchKernel_v7000": 211, "cudaLaunchKernel_ptsz_v7000": 214})
    DriverApiTraceCbid = enum.IntEnum("DriverApiTraceCbid", {"cuMemcpyHtoD_v2": 175})
    name = cb.api_namer(SimpleNamespace(RuntimeApiTraceCbid=RuntimeApiTraceCbid, DriverApiTraceCbid=DriverApiTraceCbid))
    assert name(K.RUNTIME, 211) == "cudaLaunchKernel"
    assert name(K.RUNTIME, 214) == "cudaLaunchKernel_ptsz"
    assert name(K.DRIVER, 175) == "cuMemcpyHtoD_v2"  # a driver symbol's own _v2 stays
    assert name(K.RUNTIME, 999) == "runtime API cbid 999"
    assert name(K.DRIVER, 999) == "driver API cbid 999"


def test_cupti_13_0_spells_the_callback_enums_in_snake_case() -> None:
    runtime = enum.IntEnum("runtime_api_trace_cbid", {"cudaMemcpyAsync_v3020": 41})
    driver = enum.IntEnum("driver_api_trace_cbid", {"cuLaunchKernel": 307})
    name = cb.api_namer(SimpleNamespace(runtime_api_trace_cbid=runtime, driver_api_trace_cbid=driver))
    assert name(K.RUNTIME, 41) == "cudaMemcpyAsync"
    assert name(K.DRIVER, 307) == "cuLaunchKernel"
    assert cb.api_namer(SimpleNamespace())(K.RUNTIME, 41) == "runtime API cbid 41"  # neither spelling: labels, not a crash


def test_kernel_names_are_demangled_like_kineto() -> None:
    if cb._cxxabi() is None:
        pytest.skip("libstdc++ not loadable here")
    assert cb.demangle("_Z3fooi") == "foo(int)"
    assert cb.demangle("_ZN2at6native6kernelEv") == "at::native::kernel()"
    assert cb.demangle("ampere_sgemm_128x64_nn") == "ampere_sgemm_128x64_nn"
    assert cb.demangle("_Znot-a-name") == "_Znot-a-name"


# --------------------------------------------------------------------------- availability and recording


def test_unavailable_reason_is_a_reason_not_an_exception_without_a_gpu() -> None:
    reason = cb.unavailable_reason()
    assert isinstance(reason, str)
    assert reason in (cb.INSTALL_HINT, cb.NO_DRIVER, cb.NO_DEVICE)


class FakeCupti:
    """The calls the backend makes on `cupti.cupti`, recorded; `fail_enable` mimics a machine without a driver."""

    def __init__(self, fail_enable: bool = False, pending: list[Any] | None = None) -> None:
        self.fail_enable = fail_enable
        self.enabled: set[int] = set()
        self.calls: list[tuple[Any, ...]] = []
        self.pending = pending or []
        self.completed: Any = None
        self.clock = BASE

    def activity_enable(self, kind: int) -> None:
        if self.fail_enable:
            raise RuntimeError("CUDA driver is not found")
        self.enabled.add(kind)

    def activity_disable(self, kind: int) -> None:
        self.enabled.discard(kind)

    def activity_register_callbacks(self, requested: Any, completed: Any) -> None:
        assert requested() == (cb.BUFFER_BYTES, 0)
        self.completed = completed

    def activity_flush_all(self, flag: int) -> None:
        self.calls.append(("flush", flag))
        self.completed(self.pending)

    def activity_push_external_correlation_id(self, kind: int, external_id: int) -> None:
        self.calls.append(("push", kind, external_id))

    def activity_pop_external_correlation_id(self, kind: int) -> int:
        self.calls.append(("pop", kind))
        return 0

    def set_thread_id_type(self, kind: int) -> None:
        self.calls.append(("thread id type", kind))

    def get_timestamp(self) -> int:
        self.clock += 1000
        return self.clock


def test_unavailable_reason_disables_what_it_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    broken, working = FakeCupti(fail_enable=True), FakeCupti()
    monkeypatch.setitem(sys.modules, "cupti", SimpleNamespace(cupti=broken))
    assert cb.unavailable_reason() == cb.NO_DRIVER
    monkeypatch.setitem(sys.modules, "cupti", SimpleNamespace(cupti=working))
    torch = pytest.importorskip("torch")
    expected = None if torch.cuda.is_available() else cb.NO_DEVICE
    assert cb.unavailable_reason() == expected
    assert working.enabled == set()


def test_recorder_enables_cupti_only_for_the_recorded_iterations() -> None:
    cupti = FakeCupti(pending=[SimpleNamespace(kind=int(K.RUNTIME), cbid=211, correlation_id=1, start=1, end=2,
                                               process_id=PID, thread_id=TID, return_value=0)])
    recorder = cb.Recorder(cupti, CaptureOptions(script="train.py", warmup=1, iterations=2))
    recorder.begin()
    with recorder.open_range("daydream.layer::Net"):  # warmup: not recorded
        pass
    recorder.on_step()
    assert cupti.enabled == {int(k) for k in (*cb.RECORDED_KINDS, *cb.OPTIONAL_KINDS)}
    with recorder.open_range("daydream.phase::forward"), recorder.open_range("daydream.layer::Net"):
        pass
    recorder.on_step()
    with pytest.raises(CaptureComplete):
        recorder.on_step()
    assert cupti.enabled == set() and recorder.complete and recorder.recorded == 2
    assert [s.name for s in recorder.spans] == ["daydream.layer::Net", "daydream.phase::forward", "ProfilerStep#1", "ProfilerStep#2"]
    pushes = [call for call in cupti.calls if call[0] in ("push", "pop")]
    phase, layer = recorder.spans[1].external_id, recorder.spans[0].external_id
    assert pushes == [("push", 3, phase), ("push", 3, layer), ("pop", 3), ("pop", 3)]
    assert ("flush", 1) in cupti.calls
    assert [r.cbid for r in recorder.records] == [211]
    assert not hasattr(recorder.records[0], "return_value")  # a copy of what convert reads, not CUPTI's buffer


def test_recorder_reports_a_cupti_failure_and_stops_the_script() -> None:
    cupti = FakeCupti(fail_enable=True)
    recorder = cb.Recorder(cupti, CaptureOptions(script="train.py", warmup=1, iterations=1))
    with pytest.raises(CaptureComplete):
        recorder.on_step()
    assert isinstance(recorder.failure, RuntimeError) and not recorder.complete and cupti.enabled == set()


# --------------------------------------------------------------------------- against the real cupti-python


REAL_CLASSES = {
    K.RUNTIME: ("ActivityAPI",),
    K.DRIVER: ("ActivityAPI",),
    K.KERNEL: ("ActivityKernel9", "ActivityKernel10", "ActivityKernel11", "ActivityKernel12", "ActivityKernel13"),
    K.CONCURRENT_KERNEL: ("ActivityKernel9", "ActivityKernel10", "ActivityKernel11", "ActivityKernel12", "ActivityKernel13"),
    K.MEMCPY: ("ActivityMemcpy5", "ActivityMemcpy6", "ActivityMemcpy7"),
    K.MEMCPY2: ("ActivityMemcpyPtoP4",),
    K.MEMSET: ("ActivityMemset4", "ActivityMemset5"),
    K.SYNCHRONIZATION: ("ActivitySynchronization", "ActivitySynchronization2"),
    K.EXTERNAL_CORRELATION: ("ActivityExternalCorrelation",),
    K.CUDA_EVENT: ("ActivityCudaEvent", "ActivityCudaEvent2"),
}


@pytest.fixture
def cupti() -> Any:
    return pytest.importorskip("cupti.cupti", reason="cupti-python is not installed")


def test_record_fields_exist_on_the_real_record_classes(cupti: Any) -> None:
    assert set(REAL_CLASSES) == set(cb.RECORD_FIELDS)
    for kind, names in REAL_CLASSES.items():
        classes = [getattr(cupti, name) for name in names if hasattr(cupti, name)]
        assert classes, f"no record class of {kind.name} in this cupti-python"
        for cls in classes:
            missing = [attr for attr in ("kind", *cb.RECORD_FIELDS[kind]) if not hasattr(cls, attr)]
            assert not missing, (cls.__name__, missing)
        for attr in cb.OPTIONAL_FIELDS.get(kind, ()):
            assert any(hasattr(cls, attr) for cls in classes), (kind.name, attr)


def test_tables_match_cuptis_enums(cupti: Any) -> None:
    for kind in cb.ActivityKind:
        assert int(getattr(cupti.ActivityKind, kind.name)) == kind.value
    assert int(cupti.ExternalCorrelationKind.CUSTOM0) == cb.EXTERNAL_KIND_CUSTOM0
    assert int(cupti.ActivityThreadIdType.SYSTEM) == cb.THREAD_ID_TYPE_SYSTEM
    for value, label in cb.MEMCPY_KINDS.items():
        assert cupti.ActivityMemcpyKind(value).name == label.upper()
    for value, label in cb.MEMORY_KINDS.items():
        assert cupti.ActivityMemoryKind(value).name == label.upper().replace(" ", "_")
    expected_sync = {1: "EVENT_SYNCHRONIZE", 2: "STREAM_WAIT_EVENT", 3: "STREAM_SYNCHRONIZE", 4: "CONTEXT_SYNCHRONIZE"}
    assert {value: cupti.ActivitySynchronizationType(value).name for value in cb.SYNC_TYPES} == expected_sync
    blocked = {cupti.RuntimeApiTraceCbid(cbid).name for cbid in cb.BLOCKLISTED_RUNTIME_CBIDS}
    assert blocked == {"cudaGetDevice_v3020", "cudaSetDevice_v3020", "cudaGetLastError_v3020", "cudaEventCreate_v3020",
                       "cudaEventCreateWithFlags_v3020", "cudaEventDestroy_v3020"}


def test_api_names_come_from_cuptis_callback_id_enums(cupti: Any) -> None:
    name = cb.api_namer(cupti)
    for (kind, cbid), expected in API_NAMES.items():
        assert name(kind, cbid) == expected
    assert name(K.RUNTIME, 10**6) == "runtime API cbid 1000000"


def filled(record: Any, **values: Any) -> Any:
    for attr, value in values.items():
        setattr(record, attr, value)
    return record


def test_real_records_snapshot_and_convert(cupti: Any) -> None:
    launch = filled(cupti.ActivityAPI(), kind=int(K.RUNTIME), cbid=211, correlation_id=7, start=BASE + 10,
                    end=BASE + 20, process_id=PID, thread_id=TID)
    work = filled(cupti.ActivityKernel11(), kind=int(K.CONCURRENT_KERNEL), name="_Z3fooi", start=BASE + 30, end=BASE + 90,
                  device_id=0, context_id=1, stream_id=7, correlation_id=7, grid_x=1, grid_y=1, grid_z=1, block_x=32,
                  block_y=1, block_z=1, registers_per_thread=8)
    records = [cb.snapshot(launch), cb.snapshot(work)]
    trace = read(cb.convert(records, [], cb.CaptureMeta(PID, api_name=cb.api_namer(cupti), kernel_name=cb.demangle)))
    assert link(trace).launch[row(trace, "foo(int)")] == row(trace, "cudaLaunchKernel")
