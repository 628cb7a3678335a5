"""`daydream trace SCRIPT [-- ARGS]`: record a few iterations of an unmodified training script."""

from __future__ import annotations

import click
from rich.console import Console

from daydream.trace.collect import BACKENDS, CaptureOptions, capture


@click.command("trace", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("script", type=click.Path(path_type=str))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--warmup", default=1, show_default=True, type=int, help="Iterations to run before recording.")
@click.option("--iterations", "-n", default=3, show_default=True, type=int, help="Iterations to record.")
@click.option("--out", "-o", default=None, type=click.Path(dir_okay=False, path_type=str),
              help="Trace file to write (.json.gz; {rank} is replaced by the rank under torchrun). "
                   "Default: ./daydream-traces/SCRIPT-TIME.json.gz, or SCRIPT-ranks/rankN.json.gz per rank.")
@click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
              help="cupti (cupti-python, GPU only), torch (torch.profiler), or auto: cupti where it works, else torch.")
@click.option("--finish/--stop", default=False, show_default=True,
              help="After recording, let the script run to its end (--finish) or stop it (--stop).")
@click.option("--step-fn", default=None, metavar="[MODULE:]FUNCTION",
              help="Iterations end when this function returns (default: at each optimizer.step()).")
@click.option("--no-memory", is_flag=True, help="Do not record memory allocation events.")
def trace_command(script: str, script_args: tuple[str, ...], warmup: int, iterations: int, out: str | None,
                  backend: str, finish: bool, step_fn: str | None, no_memory: bool) -> None:
    """Run SCRIPT unmodified and record ITERATIONS training iterations after WARMUP.

    Arguments after SCRIPT (or after --) go to the script. Layers (module paths),
    phases (forward, backward, optimizer) and iterations are marked by global hooks:
    the script needs no profiler code.
    """
    status = Console(stderr=True)
    arguments = list(script_args)
    if arguments[:1] == ["--"]:
        arguments = arguments[1:]
    options = CaptureOptions(script=script, args=arguments, warmup=warmup, iterations=iterations, out=out,
                             backend=backend, finish=finish, step_fn=step_fn, memory=not no_memory)
    with status.status("daydream: starting the script") as spinner:
        result = capture(options, status=lambda text: spinner.update(f"daydream: {text}"))
    for notice in result.notices:
        status.print(f"daydream: {notice}")
    if result.outcome.error is not None:
        status.print(result.outcome.formatted_error.rstrip(), markup=False, highlight=False)
        status.print("daydream: the script failed after the capture; the trace was saved")
    status.print(f"daydream: wrote {result.path} ({result.iterations} iterations, {result.backend} backend)")
    status.print(f"daydream: next: daydream inspect {result.path}", markup=False, highlight=False)
    if result.outcome.error is not None:
        raise click.exceptions.Exit(1)
