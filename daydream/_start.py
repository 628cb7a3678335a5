"""The console entry point: the CLI is imported under a guard, so that Ctrl-C while daydream is
still starting (importing click and its command table) ends it with the one line the CLI writes,
exit 130, not a traceback."""

from __future__ import annotations

import sys


def run() -> None:
    try:
        from daydream.cli import run as cli_run
    except KeyboardInterrupt:
        sys.stderr.write("daydream: error: interrupted\n")
        sys.exit(130)
    cli_run()
