"""Distributed-training what-ifs: data parallelism from one rank's
trace, and re-timed communication.

    ddp:world=8[,interconnect=nvlink3][,bandwidth=GB/s][,latency=us][,bucket=25MB]
        [,topology=hierarchical]
    comm:factor=2 | comm:bandwidth=100 | no-comm
    p3:world=8[,slice=4MB][,sync=ps]  grad-compression:ratio=100[,world=8]  zero:stage=1|2|3,world=8
    fsdp:world=8[,units=REGEX][,reshard=0|1][,prefetch=0|1]

One module per concern: `fabric` (links, flat and hierarchical collectives), `buckets` (gradients,
buckets and inserting communication), `ddp`, `comm` (no-comm and comm), `zero`, `fsdp`, `p3`,
`compression`. Importing this package registers the what-ifs.
"""

# (registers them)
from daydream.transforms.distributed import (  # noqa: F401
    comm,
    compression,
    ddp,
    fsdp,
    layout,
    p3,
    pp,
    tp,
    zero,
)
from daydream.transforms.distributed.buckets import FIRST_BUCKET_BYTES, buckets
from daydream.transforms.distributed.fabric import GPUS_PER_NODE, Fabric, fabric, parse_bytes

__all__ = ["FIRST_BUCKET_BYTES", "GPUS_PER_NODE", "Fabric", "buckets", "fabric", "parse_bytes"]
