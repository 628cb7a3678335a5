"""What a GPU runtime or driver API call does, by its name: CUDA runtime, CUDA driver and HIP alike.

Every stage that asks "is this call a kernel launch / a blocking copy / an event record?"
asks here, so that a HIP trace (`hipLaunchKernel`, `hipMemcpyWithStream`, ...) is read
exactly like its CUDA twin (`cudaLaunchKernel`, `cudaMemcpy`, ...).

    role_of("hipStreamSynchronize")      # CallRole.STREAM_SYNC
    LAUNCH.match("cudaLaunchKernelExC")  # a kernel launch

The names come from the CUDA runtime and driver APIs, the HIP runtime API and the traces of
`../shared/traces` (SOURCES.md lists the HIP ones seen there).
"""

from __future__ import annotations

import enum
import re


class CallRole(enum.Enum):
    """How a call relates to the GPU work of its device (what the graph builder needs to know)."""

    DEVICE_SYNC = "device sync"  # returns once all GPU work launched before it has finished
    # returns once the work launched before it on one stream has finished
    STREAM_SYNC = "stream sync"
    EVENT_SYNC = "event sync"  # returns once the work an event recorded has finished
    BLOCKING_COPY = "blocking copy"  # returns once its own copy (or memset) has finished
    EVENT_RECORD = "event record"  # records the work launched so far on a stream
    STREAM_WAIT = "stream wait"  # holds a stream's next work until an event's work has finished
    LAUNCH = "launch"  # launches one kernel
    GRAPH_LAUNCH = "graph launch"  # launches a captured graph: many kernels under one correlation
    OTHER = "other"


_PATTERNS: tuple[tuple[CallRole, str], ...] = (
    (CallRole.DEVICE_SYNC,
     r"cudaDeviceSynchronize|cuCtxSynchronize|cudaFree|cudaFreeHost|cuMemFree\w*|"
     r"hipDeviceSynchronize|hipCtxSynchronize|hipFree|hipHostFree|hipFreeHost"),
    (CallRole.STREAM_SYNC, r"cudaStreamSynchronize|cuStreamSynchronize|hipStreamSynchronize"),
    (CallRole.EVENT_SYNC, r"cudaEventSynchronize|cuEventSynchronize|hipEventSynchronize"),
    # hipMemcpyWithStream is a synchronous copy on a stream (the HIP
    # twin of a pageable cudaMemcpyAsync).
    (CallRole.BLOCKING_COPY,
     r"cudaMemcpy|cudaMemcpy2D|cudaMemcpy3D|cudaMemset|cuMemcpyDtoH\w*|cuMemcpyHtoD\w*|"
     r"hipMemcpy|hipMemcpy2D|hipMemcpy3D|hipMemset|hipMemcpyWithStream|hipMemcpyDtoH|"
     r"hipMemcpyHtoD"),
    (CallRole.EVENT_RECORD,
     r"cudaEventRecord|cudaEventRecordWithFlags|cuEventRecord\w*|hipEventRecord|"
     r"hipEventRecordWithFlags"),
    (CallRole.STREAM_WAIT, r"cudaStreamWaitEvent|cuStreamWaitEvent|hipStreamWaitEvent"),
    (CallRole.GRAPH_LAUNCH, r"cudaGraphLaunch|cuGraphLaunch|hipGraphLaunch"),
    (CallRole.LAUNCH, r"cudaLaunchKernel|cudaLaunchKernelExC|cuLaunchKernel|cuLaunchKernelEx|"
                      r"cudaLaunchCooperativeKernel|cudaLaunchCooperativeKernelMultiDevice|"
                      r"hipLaunchKernel|hipExtLaunchKernel|hipModuleLaunchKernel|"
                      r"hipExtModuleLaunchKernel|hipHccModuleLaunchKernel|"
                      r"hipLaunchCooperativeKernel|hipModuleLaunchCooperativeKernel"),
)

_COMPILED = tuple((role, re.compile(rf"^({pattern})$")) for role, pattern in _PATTERNS)

#: A kernel launch call (not a graph launch), for selecting launches by name.
LAUNCH = dict(_COMPILED)[CallRole.LAUNCH]


def role_of(name: str) -> CallRole:
    """The role of the API call called `name` (CallRole.OTHER for queries, allocations, ...)."""
    for role, pattern in _COMPILED:
        if pattern.match(name):
            return role
    return CallRole.OTHER

