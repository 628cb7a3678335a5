"""The training loop the example models share, with the knobs a real variant of a run needs.

    --amp [bf16|fp16]          autocast (bf16 by default; fp16 adds a GradScaler); on the CPU, bf16
    --optim loop|foreach|fused  the optimizer's implementation (default: torch's choice)
    --cuda-graphs              capture the whole step (forward, backward, optimizer) once, replay it
    --compile                  torch.compile the model (inductor; forward and backward)
    --offload                  each block's saved activations kept in pinned host memory between forward and
                               backward (torch.autograd.graph.save_on_cpu around every module named blocks.N)
    --loader-workers N         batches made by a torch DataLoader with N worker processes (0: in the training
                               process), each sample prepared on the CPU as an image pipeline would (crop, flip,
                               normalize); without it, batches are made directly on the device
    --pp [--microbatches M] [--schedule gpipe|1f1b] [--cuts K,...]
                               pipeline parallelism under torchrun (torch.distributed.pipelining): each rank runs one
                               stage, a run of the model's blocks (--cuts: the first block of each later stage;
                               default: as even as the blocks allow), the batch split into M micro-batches
    --tp                       tensor parallel under torchrun (torch.distributed.tensor.parallel), as the model
                               names its column- and row-parallel layers
    --batch-size N, --checkpoint, --device auto|cpu|cuda, --ddp or --fsdp [--no-reshard] (under torchrun), --threads N

The scripts stay plain PyTorch: no profiler code. With --cuda-graphs no optimizer.step() runs
after the capture, so a trace marks iterations by the step function instead:

    daydream trace --step-fn training:train_step examples/mlp.py -- --cuda-graphs
"""

from __future__ import annotations

import argparse
import atexit
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed
import torch.utils.checkpoint
import torch.utils.data
from torch import nn
from torch.nn.parallel import DistributedDataParallel

OPTIMIZER_IMPLEMENTATIONS = ("default", "loop", "foreach", "fused")


def options(description: str, batch_size: int) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=batch_size)
    parser.add_argument("--checkpoint", action="store_true", help="recompute each block's activations in backward")
    parser.add_argument("--optim", choices=OPTIMIZER_IMPLEMENTATIONS, default="default",
                        help="optimizer implementation: a Python loop per parameter, foreach (multi-tensor) or fused")
    parser.add_argument("--amp", nargs="?", const="bf16", choices=("bf16", "fp16"), default=None,
                        help="mixed precision with autocast: bf16 (default) or fp16 with a GradScaler (GPU only)")
    parser.add_argument("--cuda-graphs", action="store_true", help="capture the whole training step in a CUDA graph")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (inductor)")
    parser.add_argument("--offload", action="store_true",
                        help="keep each block's saved activations in pinned host memory (save_on_cpu)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--ddp", action="store_true", help="one rank of DistributedDataParallel (launch with torchrun)")
    parser.add_argument("--fsdp", action="store_true",
                        help="one rank of FSDP2 (fully_shard on each block of a stack, then on the whole model; launch "
                             "with torchrun)")
    parser.add_argument("--no-reshard", action="store_true",
                        help="with --fsdp: keep each unit's gathered parameters from forward to backward "
                             "(fully_shard's reshard_after_forward=False)")
    parser.add_argument("--tp", action="store_true",
                        help="tensor parallel over the ranks (torch.distributed.tensor.parallel; launch with torchrun): "
                             "in each block, column-parallel then row-parallel linear layers")
    parser.add_argument("--pp", action="store_true",
                        help="one stage of a pipeline (torch.distributed.pipelining; launch with torchrun, a rank per stage)")
    parser.add_argument("--microbatches", type=int, default=4, help="with --pp: micro-batches per step")
    parser.add_argument("--schedule", choices=("gpipe", "1f1b"), default="1f1b", help="with --pp: the pipeline schedule")
    parser.add_argument("--cuts", default="", help="with --pp: the first block of each stage after the first (K,...)")
    parser.add_argument("--find-unused", action="store_true", help="with --ddp: DistributedDataParallel's find_unused_parameters")
    parser.add_argument("--bucket-view", action="store_true", help="with --ddp: DistributedDataParallel's gradient_as_bucket_view")
    parser.add_argument("--threads", type=int, default=0, help="intra-op CPU threads (torch.set_num_threads); 0: torch's default")
    parser.add_argument("--loader-workers", type=int, default=-1,
                        help="make batches with a DataLoader of N worker processes (0: in this process); -1: no DataLoader")
    return parser


def setup(args: argparse.Namespace) -> tuple[str, int]:
    """(device, rank): threads, device, the process group under --ddp, the seed; refuses combinations that cannot run."""
    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()) else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is visible to torch")
    if args.cuda_graphs and device != "cuda":
        raise SystemExit("--cuda-graphs needs a CUDA device")
    if sum(bool(getattr(args, flag, False)) for flag in ("ddp", "fsdp", "pp", "tp")) > 1:
        raise SystemExit("--ddp, --fsdp, --pp and --tp each lay the model out over the ranks: give one")
    if args.cuda_graphs and (args.ddp or args.fsdp or args.amp == "fp16"):
        raise SystemExit("--cuda-graphs runs without --ddp and without fp16's GradScaler here (use --amp bf16)")
    if args.amp == "fp16" and device != "cuda":
        raise SystemExit("--amp fp16 needs a CUDA device; on the CPU use --amp (bf16)")
    if args.optim == "fused" and device != "cuda":
        raise SystemExit("--optim fused needs a CUDA device")
    distributed = args.ddp or args.fsdp or getattr(args, "pp", False) or getattr(args, "tp", False)
    if distributed and device == "cuda":
        device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}"
    rank = join_process_group(device) if distributed else 0
    # each rank its own data (DDP copies rank 0's initial weights to all); a pipeline's or a tensor-parallel group's
    # ranks work on one batch together
    torch.manual_seed(0 if getattr(args, "pp", False) or getattr(args, "tp", False) else rank)
    return device, rank


def join_process_group(device: str) -> int:
    """Join the process group torch.distributed's environment variables describe; returns this process's rank."""
    missing = [name for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
    if missing:
        raise SystemExit(f"--ddp/--fsdp: {', '.join(missing)} not set — launch with torchrun --nproc-per-node N ... --ddp")
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    torch.distributed.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    return torch.distributed.get_rank()


#: The modules --offload wraps: each block of a stack (what `daydream whatif --opt offload` matches by default).
BLOCK = re.compile(r"(^|\.)blocks\.\d+$")


def wrap(model: nn.Module, args: argparse.Namespace) -> nn.Module:
    if getattr(args, "offload", False):
        offload_blocks(model)
    if args.ddp:
        model = DistributedDataParallel(model, find_unused_parameters=args.find_unused, gradient_as_bucket_view=args.bucket_view)
    if getattr(args, "fsdp", False):
        fully_shard_blocks(model, reshard=not args.no_reshard)
    return torch.compile(model) if args.compile else model


def fully_shard_blocks(model: nn.Module, reshard: bool) -> int:
    """FSDP2 as its documentation applies it: fully_shard on each block of a stack (the modules named blocks.N), then
    on the whole model, whose own parameters (embeddings, head) form the last unit. Returns how many blocks."""
    from torch.distributed.fsdp import fully_shard

    blocks = [module for name, module in model.named_modules() if BLOCK.search(name)]
    for block in blocks:
        fully_shard(block, reshard_after_forward=reshard)
    fully_shard(model, reshard_after_forward=reshard)
    return len(blocks)


def offload_blocks(model: nn.Module) -> int:
    """Run each block's forward under torch.autograd.graph.save_on_cpu(pin_memory=True): what it saves for backward
    is copied to pinned host memory and back when backward needs it. Returns how many blocks."""
    blocks = [module for name, module in model.named_modules() if BLOCK.search(name)]
    for block in blocks:
        context: list[Any] = []

        def enter(module: nn.Module, inputs: Any, context: list[Any] = context) -> None:
            context.append(torch.autograd.graph.save_on_cpu(pin_memory=torch.cuda.is_available()))
            context[-1].__enter__()

        def leave(module: nn.Module, inputs: Any, output: Any, context: list[Any] = context) -> None:
            context.pop().__exit__(None, None, None)

        block.register_forward_pre_hook(enter)
        block.register_forward_hook(leave)
    return len(blocks)


def optimizer(kind: type[torch.optim.Optimizer], model: nn.Module, args: argparse.Namespace, **settings: Any) -> torch.optim.Optimizer:
    """`kind(model.parameters(), **settings)` in the implementation --optim names (capturable under --cuda-graphs)."""
    implementation = {"default": {}, "loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
    extra: dict[str, Any] = dict(implementation[args.optim])
    if args.cuda_graphs and kind in (torch.optim.Adam, torch.optim.AdamW):
        extra["capturable"] = True
    return kind(model.parameters(), **settings, **extra)


Batch = tuple[torch.Tensor, ...]


def train(model: nn.Module, batch_of: Callable[[int], Batch], loss_of: Callable[[nn.Module, Batch], torch.Tensor],
          opt: torch.optim.Optimizer, args: argparse.Namespace, device: str) -> None:
    """Run args.steps training steps: batch_of(step) -> tensors on `device`; loss_of(model, batch) -> scalar loss."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.amp or "")
    _write_peak_at_exit(device)
    scaler = torch.amp.GradScaler("cuda") if args.amp == "fp16" else None

    def forward_backward(batch: Batch) -> torch.Tensor:
        with torch.autocast(device.split(":")[0], dtype=dtype, enabled=dtype is not None, cache_enabled=not args.cuda_graphs):
            loss = loss_of(model, batch)
        (scaler.scale(loss) if scaler else loss).backward()
        return loss

    if args.cuda_graphs:
        _train_captured(model, batch_of, forward_backward, opt, args)
        return
    batches = loaded(batch_of, args, device) if args.loader_workers >= 0 else map(batch_of, range(args.steps))
    for step, batch in zip(range(args.steps), batches):
        opt.zero_grad(set_to_none=True)
        loss = forward_backward(batch)
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    if args.ddp or getattr(args, "fsdp", False) or getattr(args, "tp", False):
        torch.distributed.destroy_process_group()


def _write_peak_at_exit(device: str) -> None:
    """Where DAYDREAM_PEAK_FILE names a file (scripts/whatif_truth.py on a GPU asks), the peak of the device memory
    this run allocated (torch.cuda.max_memory_allocated, bytes) is written there when the process exits (a tracer
    may stop the script after the steps it records): what the memory what-if predicts."""
    path = os.environ.get("DAYDREAM_PEAK_FILE")
    if not path or not device.startswith("cuda"):
        return

    def write() -> None:
        with open(path, "w") as out:
            out.write(str(torch.cuda.max_memory_allocated(device)))

    atexit.register(write)


def tensor_parallel(model: nn.Module, plan: dict[str, str], device: str) -> nn.Module:
    """`model` with the layers `plan` names split over the ranks: "column" (ColwiseParallel: outputs split, kept local)
    or "row" (RowwiseParallel: inputs split, outputs all-reduced), as torch.distributed.tensor.parallel applies them."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh(device.split(":")[0], (torch.distributed.get_world_size(),))
    styles = {"column": ColwiseParallel, "row": RowwiseParallel}
    return parallelize_module(model, mesh, {name: styles[kind]() for name, kind in plan.items()})


@dataclass(frozen=True)
class Pipelined:
    """How a model's batch feeds a pipeline: the first stage's inputs, the last stage's target, the loss of the last
    stage's output against it."""

    inputs: Callable[[Batch], tuple[torch.Tensor, ...]]
    target: Callable[[Batch], torch.Tensor]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def stage_cuts(args: argparse.Namespace, blocks: int, stages: int) -> list[int]:
    """The first block of each stage: stage 0 from block 0, the others from --cuts or as even as the blocks allow."""
    if args.cuts:
        cuts = [0] + [int(k) for k in args.cuts.split(",")]
    else:
        cuts = [round(s * blocks / stages) for s in range(stages)]
    if len(cuts) != stages or cuts != sorted(set(cuts)) or cuts[-1] >= blocks:
        raise SystemExit(f"--cuts {args.cuts!r}: give {stages - 1} increasing block indices below {blocks}")
    return cuts


def train_pipelined(stage_module: nn.Module, pipelined: Pipelined, batch_of: Callable[[int], Batch],
                    opt: torch.optim.Optimizer, args: argparse.Namespace, device: str) -> None:
    """Run args.steps steps of this rank's stage under the --schedule, each step's batch in --microbatches."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    rank, stages = torch.distributed.get_rank(), torch.distributed.get_world_size()
    stage = PipelineStage(stage_module, rank, stages, torch.device(device))
    kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[args.schedule]
    schedule = kind(stage, args.microbatches, loss_fn=pipelined.loss)
    for step in range(args.steps):
        batch = batch_of(step)
        opt.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] = []
        if rank == 0:
            schedule.step(*pipelined.inputs(batch))
        elif rank == stages - 1:
            schedule.step(target=pipelined.target(batch), losses=losses)
        else:
            schedule.step()
        opt.step()
        if step % 10 == 0 and losses:
            print(f"step {step} loss {sum(float(x.detach()) for x in losses) / len(losses):.3f}")
    torch.distributed.destroy_process_group()


class PreparedSamples(torch.utils.data.Dataset):
    """Samples shaped like one row of `template`'s tensors, each prepared on the CPU as an image pipeline prepares a
    decoded image: a larger raw array (uint8 for images), a random crop, a random flip, conversion and normalization.
    Integer tensors (labels, tokens) are drawn below the template's largest value."""

    PAD = 16  # raw samples are this much larger on each side than what the model takes

    def __init__(self, template: Batch, length: int) -> None:
        self.rows = [(tuple(t.shape[1:]), t.dtype, int(t.max()) + 1 if not t.is_floating_point() else 0) for t in template]
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Batch:
        generator = random.Random(index)
        return tuple(self._prepared(shape, dtype, high, generator) for shape, dtype, high in self.rows)

    def _prepared(self, shape: tuple[int, ...], dtype: torch.dtype, high: int, generator: random.Random) -> torch.Tensor:
        if not dtype.is_floating_point:
            return torch.randint(0, max(high, 1), shape, dtype=dtype)
        if len(shape) < 2:
            return torch.randn(shape, dtype=dtype)
        *lead, height, width = shape
        raw = torch.randint(0, 256, (*lead, height + 2 * self.PAD, width + 2 * self.PAD), dtype=torch.uint8)
        top, left = generator.randrange(2 * self.PAD), generator.randrange(2 * self.PAD)
        crop = raw[..., top:top + height, left:left + width]
        if generator.random() < 0.5:
            crop = crop.flip(-1)
        image = crop.to(dtype).div_(255.0)
        return image.sub_(0.5).div_(0.25).contiguous()


def loaded(batch_of: Callable[[int], Batch], args: argparse.Namespace, device: str) -> Any:
    """Batches from a DataLoader over PreparedSamples like batch_of(0)'s, moved to `device`, one per step."""
    template = tuple(t.cpu() for t in batch_of(0))
    dataset = PreparedSamples(template, length=args.steps * args.batch_size)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, num_workers=args.loader_workers,
                                         pin_memory=device.startswith("cuda"),
                                         persistent_workers=args.loader_workers > 0)
    for batch in loader:
        yield tuple(t.to(device, non_blocking=True) for t in batch)


def _train_captured(model: nn.Module, batch_of: Callable[[int], Batch], forward_backward: Callable[[Batch], torch.Tensor],
                    opt: torch.optim.Optimizer, args: argparse.Namespace) -> None:
    """Whole-step capture (PyTorch's recipe): warm up on a side stream, capture one step, replay it per batch."""
    static = batch_of(0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            forward_backward(static)
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = forward_backward(static)
        opt.step()
    for step in range(args.steps):
        train_step(graph, static, batch_of(step))
        if step % 10 == 0:
            print(f"step {step} loss {static_loss.item():.3f}")


def train_step(graph: torch.cuda.CUDAGraph, static: Batch, batch: Batch) -> None:
    """One captured training step: copy the batch into the graph's inputs and replay it."""
    for into, values in zip(static, batch):
        into.copy_(values)
    graph.replay()


def through(blocks: nn.ModuleList, x: torch.Tensor, checkpoint: bool) -> torch.Tensor:
    """`x` through each block in turn; with `checkpoint`, each block's activations are recomputed in backward."""
    for block in blocks:
        x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) if checkpoint else block(x)
    return x
