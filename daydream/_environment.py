"""Settings read from the environment."""

from __future__ import annotations

import math
import os
import re

from daydream.errors import InputError


def environment_size(variable: str, default: int) -> int:
    """A size in bytes from environment `variable` ("64GB", "500MiB", "1e9"), else `default`;
    InputError for anything else."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    found = re.match(r"^([0-9.]+(?:e[0-9]+)?)\s*([kmgt]?)(i?)b?$", text, re.IGNORECASE)
    if not found:
        raise InputError(f"{variable}={text!r} is not a size — write e.g. 64GB or 500MB")
    base = 1024 if found.group(3) else 1000
    try:
        value = float(found.group(1)) * base ** " kmgt".index(found.group(2).lower() or " ")
    except ValueError:  # "1.2.3"
        value = float("nan")
    if not math.isfinite(value) or value < 1:
        raise InputError(f"{variable}={text!r} is not a size from 1 byte to a finite number — "
                         "write e.g. 64GB or 500MB")
    return int(value)
