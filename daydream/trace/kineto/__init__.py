"""Reader for PyTorch profiler (Kineto) Chrome-trace JSON of every vintage.

Handles the 2021 legacy categories (`Operator`/`Runtime`/`Kernel`/`Memcpy`/
`Memset`, flows `async`, lowercase `external id`, `"stream 7"` GPU tids,
cat-less `[memory]` events) through 2025 files (`cuda_driver`, `overhead`,
`cuda_sync`, `baseTimeNanoseconds`-relative `ts`).

Speed and memory: the decompressed text is streamed a window at a time and cut
where two events meet (a cut msgspec cannot decode, "},{" inside a string or a
nested list, is refused and an earlier one tried); each window is decoded by
msgspec straight into slotted structs that carry only the fields daydream uses
(everything else, e.g. call stacks, is skipped without being materialized), and
turned into numpy column pieces before the next window is read. When the typed
decode rejects a window because some events are malformed, its events are
decoded one by one and the bad ones are skipped and counted by reason.

A scanner (scan.py) reads each window first: its events straight from the bytes
into integer columns, with no object per event, the args it does not read itself
decoded by msgspec in one batch. It reads only what msgspec would read the same
way; at the first event it is unsure of, the rest of the window goes to msgspec as
above. Both give the same trace to the bit. The scanner is C (_scan.c, built with
the package where a compiler is at hand) and reads every document; without it,
numba's kernels of the same scanner read past 64 MiB of text.
"""

from daydream.trace.kineto.document import decode
from daydream.trace.kineto.schema import MODULE_SPAN_PREFIX
from daydream.trace.kineto.shapes import ELEMENTWISE_OPS
from daydream.trace.kineto.stream import Readable, read

__all__ = ["ELEMENTWISE_OPS", "MODULE_SPAN_PREFIX", "Readable", "decode", "read"]
