"""Defaults for command-line options from a project's own file, so a
team writes its GPU or worker count once.

daydream reads, in the folder it runs in, `daydream.toml` (its top level), else the
`[tool.daydream]` table of `pyproject.toml`. Keys are option names as typed without their dashes; a
key at the top applies to every command that has that option, a key in a `[COMMAND]` table
(`[tool.daydream.whatif]`) to that command only, and overrides the top. An option given on the
command line wins over both.

    [tool.daydream]
    device = "H100 SXM"      # --device, for every command that has it
    workers = 4              # --workers
    no-cache = true          # --no-cache
    quiet = true             # daydream -q: results only

    [tool.daydream.whatif]
    measure-budget = 20      # --measure-budget, whatif only

A key no option of the command has, in its command's table, or a table named after no command, is an
input error that names the file and the key.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from daydream.errors import InputError

FILES = ("daydream.toml", "pyproject.toml")
#: The largest project file read (as for YAML inputs): settings are a few lines.
MAX_BYTES = 1 << 20


def find_config(folder: Path) -> tuple[Path, dict[str, Any]] | None:
    """(file, the daydream table) of the first of FILES in `folder`
    that has one; None without any."""
    for name in FILES:
        path = folder / name
        if not path.is_file():  # a device, pipe or folder of that name is not a project file
            continue
        if path.stat().st_size > MAX_BYTES:
            raise InputError(f"{path}: {path.stat().st_size:,} bytes, more than a project file "
                             f"holds ({MAX_BYTES:,} at most) — move daydream's settings to a "
                             "daydream.toml of their own")
        try:
            document = tomllib.loads(path.read_text(encoding="utf-8", errors="replace"))
        except (tomllib.TOMLDecodeError, OSError, ValueError) as exc:
            # ValueError: an integer of thousands of digits
            raise InputError(
                f"{path}: not valid TOML ({str(exc)[:200]}) — fix it or remove it") from None
        except RecursionError:
            raise InputError(f"{path}: nested too deeply to read — fix it or remove it") from None
        table = document if name == "daydream.toml" else document.get("tool", {}).get("daydream")
        if isinstance(table, dict):
            return path, table
    return None


def default_map(group: click.Group, command_name: str,
                folder: Path) -> dict[str, dict[str, Any]] | None:
    """Click's default_map for running `command_name`, from the project
    file in `folder`; None without one."""
    found = find_config(folder)
    if found is None:
        return None
    path, table = found
    commands = group.list_commands(click.Context(group))
    for key, value in table.items():
        if isinstance(value, dict) and key not in commands:
            raise InputError(f"{path}: [{_prefix(path)}{key}] names no daydream command — known: "
                             f"{', '.join(commands)}")
    command = (group.get_command(click.Context(group), command_name) if command_name in commands
               else None)
    if command is None:
        return None
    names = _option_names(command)
    overall = {typed: parameter for typed, parameter in _option_names(group).items()
               if typed not in ("help", "version")}
    top = {parameter.name or "": _checked(path, key, value, parameter, group)
           for key, value in table.items()
           if not isinstance(value, dict)
           and (parameter := overall.get(key.replace("_", "-"))) is not None}
    chosen: dict[str, Any] = {}
    for key, value in table.items():
        if (not isinstance(value, dict)
            and (parameter := names.get(key.replace("_", "-"))) is not None):
            chosen[parameter.name or ""] = _checked(path, key, value, parameter, command)
    for key, value in (table.get(command_name) or {}).items():
        parameter = names.get(key.replace("_", "-"))
        if parameter is None:
            raise InputError(f"{path}: [{_prefix(path)}{command_name}] {key}: 'daydream "
                             f"{command_name}' has no option --{key} — see 'daydream "
                             f"{command_name} --help'")
        chosen[parameter.name or ""] = _checked(path, f"[{_prefix(path)}{command_name}] {key}",
                                                value, parameter, command)
    return {**top, command_name: chosen} if chosen or top else None


def _checked(path: Path, key: str, value: Any, parameter: click.Option,
             command: click.Command) -> Any:
    """`value` as the option takes it (a list for an option given
    several times), or an input error naming the file
    and the key: what the command line would refuse, the file refuses too."""
    plain = (str, int, float, bool)
    if not (isinstance(value, plain)
            or (isinstance(value, list) and all(isinstance(v, plain) for v in value))):
        raise InputError(f"{path}: {key}: a {type(value).__name__} where --{key.split()[-1]} takes "
                         f"a value {'or a list of values' if parameter.multiple else ''}".rstrip())
    if parameter.multiple and not isinstance(value, list):
        value = [value]
    try:
        parameter.type_cast_value(click.Context(command), value)
    except click.ClickException as exc:
        raise InputError(f"{path}: {key} = {str(value)[:80]}: {exc.format_message()}") from None
    return value


def _option_names(command: click.Command) -> dict[str, click.Option]:
    """Option name as typed, without dashes ("no-cache", "device") -> the option."""
    names = {}
    for parameter in command.params:
        if isinstance(parameter, click.Option):
            for flag in parameter.opts:
                if flag.startswith("--"):
                    names[flag[2:]] = parameter
    return names


def _prefix(path: Path) -> str:
    return "tool.daydream." if path.name == "pyproject.toml" else ""
