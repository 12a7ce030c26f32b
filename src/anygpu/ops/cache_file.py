"""The tuning cache's file handling (ops/tuner.py): reading a JSON cache of a known
format without trusting the file, and writing one atomically."""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path
from stat import S_ISREG

from .. import bounded_json

MAX_CACHE_BYTES = 16 << 20  # thousands of entries; anything larger is not ours


def read_entries(path: Path, fmt: int, stat: os.stat_result | None = None) -> dict:
    """The "entries" object of the cache at `path` when the file is a regular file of sane
    size (a FIFO would block) holding JSON of format `fmt`; {} otherwise (missing, damaged,
    too large or too deeply nested: a warning says so, another format). The next store
    rewrites the file whole. The entries themselves are for the caller to check."""
    try:
        stat = stat if stat is not None else path.stat()
        if not S_ISREG(stat.st_mode):
            raise ValueError(f"{path}: not a regular file")
        data = bounded_json.read_file(path, max_bytes=MAX_CACHE_BYTES)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        warnings.warn(f"anygpu: ignoring the tuning cache ({error}); it is rebuilt as ops are tuned again",
                      RuntimeWarning, stacklevel=2)
        return {}
    if not isinstance(data, dict) or data.get("format") != fmt or not isinstance(data.get("entries"), dict):
        return {}
    return data["entries"]


def write_entries(path: Path, fmt: int, entries: dict) -> bool:
    """Write the cache (format `fmt`) atomically: a temporary file in the same folder,
    fsync, rename. False when the folder is not writable."""
    text = json.dumps({"format": fmt, "entries": entries}, indent=1, sort_keys=True)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        return False
    return True
