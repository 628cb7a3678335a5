"""Lines for the person running a command that reading decided on its own
(which of several captures of one process it took): gathered by the
library while a command runs, printed once each by the CLI afterwards."""

from __future__ import annotations

NOTICES: list[str] = []
