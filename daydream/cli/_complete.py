"""Shell completion of the values people type most: `--opt` (optimization
names, their parameters, YAML files), `--sweep` (the parameters of the
optimizations already given) and `--device` (the device table).

Click completes through an environment variable; to turn it on in bash
(zsh and fish alike, see README):

    eval "$(_DAYDREAM_COMPLETE=bash_source daydream)"
"""

from __future__ import annotations

import glob
import os

import click
from click.shell_completion import CompletionItem


def complete_opt(ctx: click.Context, param: click.Parameter,
                 incomplete: str) -> list[CompletionItem]:
    """`am` -> `amp`; `batch-size:` -> `batch-size:factor=`,
    `batch-size:batch=`; a path -> *.yaml files there."""
    from daydream.transforms import ALIASES, OPTIMIZATIONS

    if ":" in incomplete:
        name, _, given = incomplete.partition(":")
        optimization = OPTIMIZATIONS.get(ALIASES.get(name, name))
        if optimization is None:
            return []
        done = given.rsplit(",", 1)[0] + "," if "," in given else ""
        typed = given.rsplit(",", 1)[-1]
        return [CompletionItem(f"{name}:{done}{key}=", help=parameter.help)
                for key, parameter in optimization.parameters.items() if key.startswith(typed)]
    names = [CompletionItem(name, help=optimization.summary)
             for name, optimization in OPTIMIZATIONS.items()
             if name.startswith(incomplete)]
    names += [CompletionItem(alias) for alias in ALIASES if alias.startswith(incomplete)]
    return names + _yaml_files(incomplete)


def complete_sweep(ctx: click.Context, param: click.Parameter,
                   incomplete: str) -> list[CompletionItem]:
    """`KEY=` for each parameter of the `--opt` optimizations given so
    far (all of them where none is)."""
    from daydream.transforms import ALIASES, OPTIMIZATIONS

    given = [spec.split(":", 1)[0] for spec in (ctx.params.get("specs") or ())]
    chosen = [OPTIMIZATIONS[ALIASES.get(name, name)] for name in given
              if ALIASES.get(name, name) in OPTIMIZATIONS]
    keys = dict.fromkeys(key for optimization in (chosen or OPTIMIZATIONS.values())
                         for key in optimization.parameters)
    return [CompletionItem(f"{key}=") for key in keys if key.startswith(incomplete)]


def complete_device(ctx: click.Context, param: click.Parameter,
                    incomplete: str) -> list[CompletionItem]:
    """The device table's names."""
    from daydream.devices import DEVICES

    return ([CompletionItem(name, help=row.name) for name, row in DEVICES.items()
             if name.lower().startswith(incomplete.lower())])


def _yaml_files(incomplete: str) -> list[CompletionItem]:
    """YAML pipelines (and folders that may hold them) whose path starts with `incomplete`."""
    found = []
    for path in sorted(glob.glob(glob.escape(incomplete) + "*"))[:200]:
        if os.path.isdir(path):
            found.append(CompletionItem(path + os.sep, type="dir"))
        elif path.endswith((".yaml", ".yml")):
            found.append(CompletionItem(path, type="file"))
    return found[:50]
