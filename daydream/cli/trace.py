"""`daydream trace SCRIPT [-- ARGS]` (or `-m MODULE`): record a few
iterations of an unmodified training script."""

from __future__ import annotations

from collections.abc import Callable

import click

from daydream.cli import did_you_mean
from daydream.cli._progress import err
from daydream.errors import InputError
from daydream.trace.collect import BACKENDS, CaptureError, CaptureOptions, CaptureResult, capture

#: daydream trace's own options, to recognise them when they are written after SCRIPT: these few a
#: training script hardly has, so one after SCRIPT is refused; the others (-o, -n, --batch-size,
#: ...) scripts often take themselves, so they go to the script with a notice.
_ONLY_DAYDREAMS = ("--warmup", "--backend", "--finish", "--stop", "--step-fn", "--no-memory",
                   "--heap-reserve", "--no-heap-reserve")
_OWN_OPTIONS = (*_ONLY_DAYDREAMS, "--iterations", "-n", "--out", "-o", "-m", "--module",
                "--batch-size")


@click.command("trace",
               context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("script", required=False, type=click.Path(path_type=str))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("-m", "--module", "module", default=None, metavar="MODULE",
              help="Run a module as `python -m MODULE` would, instead of a SCRIPT file.")
@click.option("--warmup", default=1, show_default=True, type=click.IntRange(0, 100_000),
              help="Iterations to run before recording.")
@click.option("--iterations", "-n", default=3, show_default=True, type=click.IntRange(1, 100_000),
              help="Iterations to record.")
@click.option("--out", "-o", default=None, type=click.Path(dir_okay=False, path_type=str),
              help="Trace file to write (.json.gz, or .json.xz for xz; {rank} is replaced by the "
                   "rank under torchrun). Default: ./daydream-traces/SCRIPT-TIME.json.gz, or "
                   "SCRIPT-ranks/rankN.json.gz per rank.")
@click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
              help="cupti (cupti-python, GPU only), torch (torch.profiler), or auto: cupti where "
                   "it works, else torch.")
@click.option("--finish/--stop", default=False, show_default=True,
              help="After recording, let the script run to its end (--finish) or stop it (--stop).")
@click.option("--step-fn", default=None, metavar="[MODULE:]FUNCTION",
              help="Iterations end when this function returns (default: at each optimizer.step()).")
@click.option("--no-memory", is_flag=True, help="Do not record memory allocation events.")
@click.option("--heap-reserve/--no-heap-reserve", default=True, show_default=True,
              help="Before recording, keep freed memory in the C heap and grow it, so the "
                   "profiler's own records do not make the script fault in fresh memory it reuses "
                   "without them (glibc on Linux; README, \"The profiler's own memory\").")
@click.option("--batch-size", "batch_size", type=click.IntRange(1), default=None,
              help="Samples per iteration, for throughput (default: the leading dimension of the "
                   "model's first input).")
def trace_command(script: str | None, script_args: tuple[str, ...], module: str | None, warmup: int,
                  iterations: int, out: str | None, backend: str, finish: bool, step_fn: str | None,
                  no_memory: bool, heap_reserve: bool, batch_size: int | None) -> None:
    """Run SCRIPT unmodified and record ITERATIONS training iterations after WARMUP.

    daydream's options go before SCRIPT; what follows SCRIPT (or --) goes to the script.

    \b
    Examples (from daydream's repository folder):
      daydream trace -n 3 -o run.json.gz examples/mlp.py -- --steps 8
      daydream trace --warmup 2 -m examples.cnn -- --steps 8

    Layers (module paths), phases (forward, backward, optimizer) and iterations are
    marked by global hooks: the script needs no profiler code.
    """
    target, arguments = _target_and_arguments(script, list(script_args), module)
    status = err()
    if arguments[:1] == ["--"]:
        arguments = arguments[1:]
    else:
        _own_options_after_script(target, arguments, status.print)
    options = CaptureOptions(script=target, args=arguments, warmup=warmup, iterations=iterations,
                             out=out, backend=backend, finish=finish, step_fn=step_fn,
                             memory=not no_memory, module=module is not None, batch_size=batch_size,
                             heap_reserve=heap_reserve)
    try:
        with status.status("daydream: starting the script") as spinner:
            result = capture(options, status=lambda text: spinner.update(f"daydream: {text}"))
    except CaptureError as exc:
        if exc.script_error:
            status.print(exc.script_error.rstrip(), highlight=False)
        raise
    _report(result, status.print)


def _target_and_arguments(script: str | None, arguments: list[str],
                          module: str | None) -> tuple[str, list[str]]:
    """(the script or module to run, the arguments it gets): under -m,
    SCRIPT is the module's first argument."""
    if module is not None:
        target, arguments = module, ([script, *arguments] if script is not None else arguments)
    elif script is None:
        raise click.UsageError("name the training script to run (daydream trace train.py) or a "
                               "module (-m package.train)")
    else:
        target = script
    if target.startswith("-"):
        names = [name for name in _OWN_OPTIONS if name.startswith("--")]
        raise click.UsageError(f"no option {target!r}{did_you_mean(target, names)}")
    return target, arguments


def _report(result: CaptureResult, say: Callable[..., None]) -> None:
    """What the capture wrote and what to run next; exit 1 when the
    script failed after the capture."""
    for notice in result.notices:
        say(f"daydream: {notice}")
    if result.outcome.error is not None:
        say(result.outcome.formatted_error.rstrip(), highlight=False)
        say("daydream: the script failed after the capture; the trace was saved")
    say(f"daydream: wrote {result.path} ({result.iterations} iterations, {result.backend} backend)")
    say(f"daydream: next: daydream inspect {result.path}", highlight=False)
    if result.outcome.error is not None:
        raise click.exceptions.Exit(1)


def _own_options_after_script(target: str, arguments: list[str], say: Callable[..., None]) -> None:
    """`trace train.py --warmup 2`: refused with where it belongs;
    `trace train.py -o x`: passed on, with a notice."""
    for argument in arguments:
        name = argument.split("=", 1)[0]
        if name in _ONLY_DAYDREAMS:
            raise InputError(f"{name} after {target} would go to the script — put daydream's "
                             f"options before {target} (daydream trace {name} ... {target}), or "
                             "write -- before arguments meant for the script (daydream trace "
                             f"{target} -- {argument})")
        if name in _OWN_OPTIONS:
            say(f"daydream: {name} after {target} goes to the script; daydream's own {name} goes "
                f"before {target} (write -- after {target} to silence this)", highlight=False)
