"""Trace-level facts from the envelope: GPUs, runtime versions, format vintage and features.
"""

from __future__ import annotations

from typing import Any

from daydream.trace.kineto.schema import _LEGACY_CATEGORIES, INT_LIMIT, MAX_WORLD_SIZE
from daydream.trace.model import GpuInfo, TraceMeta


def _meta(envelope: Any, source: str, event_count: int, categories: dict[str, int],
          skipped: dict[str, int]) -> TraceMeta:
    distributed = envelope.distributedInfo if envelope is not None else None
    distributed = distributed if isinstance(distributed, dict) else {}
    base = envelope.baseTimeNanoseconds if envelope is not None else None
    collector = (envelope.daydream if envelope is not None and isinstance(envelope.daydream, dict)
                 else {})
    features = _features(categories, isinstance(base, int))
    rank, world = _int_or_none(distributed.get("rank")), _int_or_none(distributed.get("world_size"))
    if world is not None and not 1 <= world <= MAX_WORLD_SIZE:
        skipped[f"distributedInfo.world_size {world} out of range (ignored)"] = 1
        world = None
    if rank is not None and not 0 <= rank < (world or MAX_WORLD_SIZE):
        skipped[f"distributedInfo.rank {rank} out of range (ignored)"] = 1
        rank = None
    return TraceMeta(
        source=source,
        rank=rank,
        world_size=world,
        gpus=_gpus(envelope.deviceProperties if envelope is not None else None),
        format=_format_label(features),
        features=features,
        base_time_ns=base if isinstance(base, int) and abs(base) <= INT_LIMIT else 0,
        events_in_file=event_count,
        categories=categories,
        skipped=skipped,
        distributed=distributed,
        collector=collector,
        runtime=_runtime(envelope),
    )


#: The envelope's version fields: the GPU software stack the trace was recorded with.
_RUNTIME_FIELDS = ("cuda_runtime_version", "cuda_driver_version", "cupti_version",
                   "hip_runtime_version", "hip_driver_version", "roctracer_version")


def _runtime(envelope: Any) -> dict[str, Any]:
    """{"vendor": "NVIDIA CUDA" | "AMD ROCm", and each version field
    the file records}; empty when none is."""
    if envelope is None:
        return {}
    found = {name: value for name in _RUNTIME_FIELDS
             if isinstance(value := getattr(envelope, name, None), (int, float, str))
             and not isinstance(value, bool)}
    if any(name.startswith(("hip", "roctracer")) for name in found):
        return {"vendor": "AMD ROCm", **found}
    return {"vendor": "NVIDIA CUDA", **found} if found else {}


def _int_or_none(value: Any) -> int | None:
    return (value if isinstance(value, int) and not isinstance(value, bool)
            and abs(value) <= INT_LIMIT else None)


def _gpus(properties: Any) -> list[GpuInfo]:
    if not isinstance(properties, list):
        return []
    gpus = []
    for position, entry in enumerate(properties):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        major, minor = entry.get("computeMajor"), entry.get("computeMinor")
        device = _int_or_none(entry.get("id"))
        gpus.append(
            GpuInfo(
                device=device if device is not None else position,
                name=entry["name"],
                total_memory_bytes=_int_or_none(entry.get("totalGlobalMem")),
                compute_capability=f"{major}.{minor}" if isinstance(major, int)
                and isinstance(minor, int) else None, sm_count=_int_or_none(entry.get("numSms")),
                arch=entry["gcnArchName"] if isinstance(entry.get("gcnArchName"), str) else None,
            )
        )
    return gpus


def _features(categories: dict[str, int], relative_time: bool) -> list[str]:
    features = []
    if _LEGACY_CATEGORIES & categories.keys():
        features.append("legacy categories")
    if relative_time:
        features.append("baseTimeNanoseconds")
    for cat in ("cuda_driver", "cuda_sync", "overhead", "python_function", "fwdbwd"):
        if cat in categories:
            features.append(cat)
    return features


def _format_label(features: list[str]) -> str:
    if "legacy categories" in features:
        return "Kineto 2021 (Operator/Runtime/Kernel)"
    if "cuda_driver" in features or "overhead" in features:
        return ("Kineto 2025 (cuda_driver, relative time)" if "baseTimeNanoseconds" in features
                else "Kineto 2025 (cuda_driver)")
    if "baseTimeNanoseconds" in features:
        return "Kineto 2024 (relative time)"
    return "Kineto 2022 (cpu_op/cuda_runtime)"
