"""Stage 4, transforms: rewrite a graph the way an optimization would change execution.

Primitives (`select`, `insert`, `remove`, `scale`, `reschedule`) are plain functions
over a `Graph`; optimizations are named pipelines of them in `OPTIMIZATIONS`, each
with a `describe()` that states its model; custom ones come from YAML files.
"""

from daydream.transforms import (
    activations,  # noqa: F401  (registers offload, gist)
    amp,  # noqa: F401  (registers amp)
    batch,  # noqa: F401  (registers batch-size)
    batchnorm,  # noqa: F401  (registers bn-restructure)
    checkpoint,  # noqa: F401  (registers checkpoint)
    compiler,  # noqa: F401  (registers compile)
    distributed,  # noqa: F401  (registers ddp, comm, no-comm, ...)
    fusion,  # noqa: F401  (registers fused-optimizer, cuda-graphs, fuse-elementwise)
    loading,  # noqa: F401  (registers overlap-data-loading)
    model_size,  # noqa: F401  (registers depth)
    speed,  # noqa: F401  (registers faster-host, no-host-overhead, faster-gpu, optimizer)
    target,  # noqa: F401  (registers gpu)
    width,  # noqa: F401  (registers width)
)
from daydream.transforms.pipeline import Pipeline, apply_pipeline, is_pipeline_file, load_pipeline
from daydream.transforms.primitives import (
    GPU_WORK,
    HOST_WORK,
    KERNELS,
    PRIMITIVES,
    insert,
    remove,
    reschedule,
    scale,
    select,
    unpin,
)
from daydream.transforms.registry import ALIASES, OPTIMIZATIONS, Context, Optimization
from daydream.transforms.specs import apply_spec, parse_spec

__all__ = [
    "ALIASES",
    "GPU_WORK",
    "HOST_WORK",
    "KERNELS",
    "OPTIMIZATIONS",
    "PRIMITIVES",
    "Context",
    "Optimization",
    "Pipeline",
    "apply_pipeline",
    "apply_spec",
    "insert",
    "is_pipeline_file",
    "load_pipeline",
    "parse_spec",
    "remove",
    "reschedule",
    "scale",
    "select",
    "unpin",
]
