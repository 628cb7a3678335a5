"""The memory a job's ranks would hold under a list of optimizations, and whether it fits."""

from __future__ import annotations

from daydream.trace import Trace


def predict_memory_for(traces: list[Trace], specs: list[str],
                       device_name: str | None = None) -> list[dict[str, object]]:
    """Predicted peak memory per device of each trace (rank) under `specs`, with a fits verdict."""
    from daydream.mapping import attribute
    from daydream.mapping.attribution import layer_types, layer_work
    from daydream.mapping.parameters import recorded_parameters
    from daydream.memory import analyze_memory
    from daydream.memory.whatif import current_optimizer_of, largest_batch_factor, predict_memory
    from daydream.simulate.whatif import gradient_bytes_of, pair_bytes_of, resolve_device
    from daydream.transforms import is_pipeline_file, parse_spec
    from daydream.transforms.specs import stated_batch

    parsed = [parse_spec(spec) for spec in specs if not is_pipeline_file(spec)]
    results: list[dict[str, object]] = []
    for trace in traces:
        attribution = attribute(trace)
        layers = attribution.layers
        layouts = any(name in ("pp", "tp", "layout") for name, _ in parsed)
        work = layer_work(trace, attribution) if layouts else None
        types = tuple(layer_types(trace, layers)) if layouts else ()
        layer_bytes = gradient_bytes_of(trace)
        current = current_optimizer_of(trace.strings)
        device, _ = resolve_device(trace, device_name)
        targets = [params["target"] for name, params in parsed if name == "gpu"
                   and params.get("target")]
        if targets:  # gpu:target=NAME: the memory must fit the target's
            from daydream.devices import device as table_device
            device = table_device(str(targets[-1]))
        batched = device is not None or any(name == "batch-size" for name, _ in parsed)
        pairs = (pair_bytes_of(trace, attribution, stated_batch(specs) or 0) if batched
                 else frozenset())
        # what width grows; no other memory model reads it
        shapes = (recorded_parameters(trace) if any(name == "width" for name, _ in parsed)
                  else {})
        for memory in analyze_memory(trace):
            target = device if memory.device.startswith("cuda") else None
            prediction = predict_memory(memory, parsed, layers, current, target, layer_bytes, work,
                                        types, pairs, shapes)
            entry: dict[str, object] = {
                "rank": trace.meta.rank,
                "device": memory.device,
                "measured_peak_bytes": prediction.measured_peak_bytes,
                "predicted_peak_bytes": prediction.predicted_peak_bytes,
                "predicted_reserved_bytes": prediction.predicted_reserved_bytes,
                "capacity_bytes": prediction.capacity_bytes,
                "fits": prediction.fits,
                "headroom_bytes": prediction.headroom_bytes,
                "notes": prediction.notes,
            }
            if target is not None:
                entry["largest_batch_factor"] = largest_batch_factor(
                    memory, parsed, layers, current, target, layer_bytes, work, types, pairs,
                    shapes)
            results.append(entry)
    return results
