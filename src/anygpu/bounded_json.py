"""JSON from files anygpu did not necessarily write, parsed within bounds.

Python's json module recurses once per nested array or object, so a few hundred kilobytes
of ``[[[[...`` exhaust the interpreter's recursion limit: a RecursionError (or, where a
program raised the limit, a crash of the C stack) instead of a clear refusal. Every JSON
read of untrusted input (safetensors headers and their metadata entries, model files,
training checkpoints, ``anygpu.save``'s structure, the tuner and adapter caches) goes through
``loads`` or ``read_file``: the size and the nesting depth are checked first, by a scan that
never recurses, and every failure is a ValueError naming the file (or entry) and the limit.

A leaf module (standard library and NumPy only), so every layer may use it.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any, Union

import numpy as np

__all__ = ["MAX_BYTES", "MAX_DEPTH", "loads", "nesting_depth", "read_file"]

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects accepted by default (anygpu writes at most a few levels)."""
MAX_BYTES = 100_000_000
"""Largest JSON text accepted by default: safetensors' own cap on a header."""

_CHUNK = 1 << 20  # bytes scanned per NumPy pass: bounded memory for a 100 MB text
_STEP = np.zeros(256, dtype=np.int8)
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1
_QUOTE = ord('"')


def nesting_depth(data: Union[str, bytes], stop_above: int | None = None) -> int:
    """The deepest nesting of arrays and objects in the JSON text ``data`` (0 for a scalar),
    or, with ``stop_above``, the depth reached when the scan first passes it.

    Brackets inside strings do not count. The scan runs over the bytes in NumPy passes,
    without recursion, so any length and depth are measured in linear time. For text that
    is not JSON the answer still bounds what json.loads would recurse into before failing:
    the parser reads the same valid prefix this scan does.
    """
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    # Inside strings, drop the escapes that matter: a pair of backslashes, then an escaped
    # quote. Every quote left opens or closes a string. (Outside strings, JSON has no
    # backslashes, and UTF-8 continuation bytes are never ASCII.)
    data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    raw = np.frombuffer(data, dtype=np.uint8)
    depth = deepest = 0
    in_string = 0
    for start in range(0, raw.size, _CHUNK):
        chunk = raw[start:start + _CHUNK]
        # 1 from an opening quote up to (not including) its closing quote
        inside = np.bitwise_xor.accumulate((chunk == _QUOTE).view(np.uint8)) ^ np.uint8(in_string)
        in_string = int(inside[-1])
        steps = np.where(inside.view(bool), np.int8(0), np.take(_STEP, chunk))
        levels = np.cumsum(steps, dtype=np.int64)
        deepest = max(deepest, depth + int(levels.max()))
        depth += int(levels[-1])
        if stop_above is not None and deepest > stop_above:
            break
    return deepest


def loads(text: Union[str, bytes], where: str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(text)`` for text that came from a file: at most ``max_bytes`` bytes
    (UTF-8) nested at most ``max_depth`` deep.

    ``where`` names the source in the messages (a path, or "path: the 'settings' entry").
    Raises ValueError for text over either limit (naming it), bytes that are not UTF-8,
    and text that is not JSON; never RecursionError.
    """
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    if len(data) > max_bytes:
        raise ValueError(f"{where}: {len(data)} bytes of JSON, more than the limit of {max_bytes}")
    # Fewer opening brackets than the limit cannot nest deeper: skip the scan.
    if data.count(b"[") + data.count(b"{") > max_depth:
        if nesting_depth(data, stop_above=max_depth) > max_depth:
            raise ValueError(f"{where}: JSON nested more than {max_depth} levels deep (the limit)")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"{where}: JSON text is not UTF-8 ({error})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{where}: not valid JSON ({error})") from None
    except RecursionError:  # within the limit, yet called with the stack nearly full
        raise ValueError(f"{where}: JSON nested too deeply for the stack left (limit {max_depth})") from None


def read_file(path: Union[str, "os.PathLike[str]"], *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """Parse the JSON file at ``path`` within the limits of ``loads``.

    Only a regular file is read: a FIFO or device is refused before any read (the open
    cannot block), and a file over ``max_bytes`` before its content is read. Raises
    OSError when the file cannot be opened (FileNotFoundError when missing) and ValueError
    for anything else, naming the path.
    """
    where = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{where}: not a regular file")
        if info.st_size > max_bytes:
            raise ValueError(f"{where}: {info.st_size} bytes, more than the limit of {max_bytes}")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(max_bytes + 1)  # a file that grew since fstat is cut here and refused
    finally:
        os.close(fd)
    return loads(data, where, max_bytes=max_bytes, max_depth=max_depth)
