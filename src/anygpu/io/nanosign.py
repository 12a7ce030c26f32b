"""NanoSign v1: a BLAKE3 integrity trailer on any file.

A signed file is its payload followed by a 36-byte trailer::

    payload | b"NSIG" | blake3(payload).digest()   (32 bytes)

A file shorter than 36 bytes, or whose bytes at ``len - 36`` are not ``b"NSIG"``, is
unsigned. Verification has three outcomes: ``verified`` (the stored hash matches the
payload), ``failed`` (it does not: the file changed after signing) and ``unsigned``.

Every hash this module reports is the hash of the *payload*: the bytes before the
trailer of a signed file, or the whole content of an unsigned one. So ``hash(path)``
gives the same value before and after ``sign(path)``, and it is the value that
``verify`` prints for a verified file.

File operations never leave a half-written file behind: they write a temporary file in
the target's folder, flush and fsync it, then ``os.replace`` it over the target. On any
error the temporary file is removed and the original is left untouched.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import socket
import stat
import time
from dataclasses import dataclass
from typing import BinaryIO, Iterator, Literal, Union

from blake3 import blake3

__all__ = [
    "MAGIC",
    "DIGEST_SIZE",
    "TRAILER_SIZE",
    "TamperedError",
    "NotRegularFileError",
    "VerifyResult",
    "atomic_write_bytes",
    "atomic_writer",
    "open_regular",
    "remove_stale_temporaries",
    "hash",
    "hash_bytes",
    "sign",
    "sign_bytes",
    "strip",
    "strip_bytes",
    "verify",
    "verify_bytes",
]

MAGIC = b"NSIG"
DIGEST_SIZE = 32
TRAILER_SIZE = len(MAGIC) + DIGEST_SIZE  # 36

# Files are hashed and copied in chunks so that a multi-gigabyte checkpoint never has
# to fit in memory just to be verified or signed.
_CHUNK_SIZE = 1 << 20

PathLike = Union[str, "os.PathLike[str]"]
BytesLike = Union[bytes, bytearray, memoryview]
Status = Literal["verified", "failed", "unsigned"]
_STATUSES = ("verified", "failed", "unsigned")


class NotRegularFileError(OSError, ValueError):
    """A path that must name a regular file names a FIFO, device or socket (see ``open_regular``)."""


class TamperedError(ValueError):
    """A NanoSign signature does not match the payload: the file changed after signing.

    Attributes: ``expected`` (hex hash stored in the trailer), ``actual`` (hex hash of
    the payload as it is now) and ``path`` (the file, or None for in-memory data).
    """

    def __init__(self, expected: str, actual: str, path: PathLike | None = None):
        self.expected = expected
        self.actual = actual
        self.path = None if path is None else os.fspath(path)
        where = f"{self.path}: " if self.path is not None else ""
        super().__init__(
            f"{where}NanoSign signature does not match the content "
            f"(expected {expected}, actual {actual}); the data changed after signing"
        )


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of a NanoSign verification.

    ``status`` is ``"verified"``, ``"failed"`` or ``"unsigned"``. ``expected`` is the hex
    hash stored in the trailer (None when unsigned); ``actual`` is the hex hash of the
    payload as it is now. ``str(result)`` is the line the ``anygpu verify`` command prints.
    """

    status: Status
    expected: str | None
    actual: str | None

    def __post_init__(self) -> None:
        if self.status not in _STATUSES:
            raise ValueError(f"VerifyResult: status {self.status!r}, expected one of {_STATUSES}")

    @property
    def ok(self) -> bool:
        """True only when a signature is present and matches."""
        return self.status == "verified"

    def __str__(self) -> str:
        if self.status == "verified":
            return f"verified {self.actual}"
        if self.status == "failed":
            return f"FAILED expected {self.expected} actual {self.actual}"
        return "unsigned"


# --------------------------------------------------------------------------- bytes


def _split(data: BytesLike) -> tuple[memoryview, bytes | None]:
    """Split ``data`` into (payload view, stored digest); the digest is None if unsigned."""
    view = memoryview(data).cast("B")
    if len(view) >= TRAILER_SIZE and view[-TRAILER_SIZE : -DIGEST_SIZE] == MAGIC:
        return view[:-TRAILER_SIZE], bytes(view[-DIGEST_SIZE:])
    return view, None


def _result(stored: bytes | None, actual: bytes) -> VerifyResult:
    if stored is None:
        return VerifyResult("unsigned", None, actual.hex())
    status: Status = "verified" if stored == actual else "failed"
    return VerifyResult(status, stored.hex(), actual.hex())


def hash_bytes(data: BytesLike) -> str:
    """Hex BLAKE3 hash of the payload of ``data`` (the bytes before a trailer, if any)."""
    payload, _ = _split(data)
    return blake3(payload).hexdigest()


def verify_bytes(data: BytesLike) -> VerifyResult:
    """Check the NanoSign trailer of ``data``."""
    payload, stored = _split(data)
    return _result(stored, blake3(payload).digest())


def sign_bytes(data: BytesLike) -> bytes:
    """Return ``data`` with a fresh NanoSign trailer.

    An existing trailer is replaced, never stacked, so signing twice gives the same bytes
    as signing once, and re-signing an edited signed file signs the edited payload.
    """
    payload, _ = _split(data)
    return bytes(payload) + MAGIC + blake3(payload).digest()


def strip_bytes(data: BytesLike) -> bytes:
    """Return the payload of ``data``: without its trailer if signed, unchanged if not.

    The trailer is removed whether or not it matches; call ``verify_bytes`` first to know.
    """
    payload, _ = _split(data)
    return bytes(payload)


# --------------------------------------------------------------------------- files


@contextlib.contextmanager
def atomic_writer(path: PathLike) -> Iterator[BinaryIO]:
    """Open a binary file that replaces ``path`` only when the ``with`` block succeeds.

    The data goes to a temporary file in the same folder (so the final rename never
    crosses file systems), which is flushed, fsynced and then moved over ``path`` with
    ``os.replace``. If anything raises, the temporary file is deleted and ``path`` is left
    as it was. A symlink is followed: its target is replaced, the link is kept. An
    existing file keeps its permission bits; a new one gets the usual umask-based mode.
    """
    target = os.path.realpath(os.fspath(path))
    folder, name = os.path.split(target)
    try:
        info = os.stat(target)
    except FileNotFoundError:
        mode: int | None = None
    else:
        kind = _file_kind(info.st_mode)
        if kind is not None:  # never replace a device, FIFO or folder (a symlink to /dev/zero, run as root)
            if kind == "a directory":
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
            raise NotRegularFileError(errno.EINVAL, f"write: is {kind}; expected a regular file", os.fspath(path))
        mode = info.st_mode & 0o7777
    remove_stale_temporaries(folder, name)

    while True:
        temp = os.path.join(folder, f".{name}.{_TEMP_TAG}-{_host_tag()}-{os.getpid()}-{secrets.token_hex(6)}.tmp")
        try:
            # 0o666 lets the process umask decide a new file's permissions, as open() does.
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
            break
        except FileExistsError:
            continue

    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    _fsync_folder(folder)


# Temporary files are named ".<target>.anygpu-<host>-<pid>-<12 hex>.tmp", so a later write
# can tell its own stale leftovers (a crash between open and rename) from anything else:
# same host, and the process that made it is gone. Files of the older pattern
# ".<target>.<12 hex>.tmp" carry no owner; they are removed once an hour old.
_TEMP_TAG = "anygpu"
_TEMP_PATTERN = re.compile(r"^\.(?P<name>.+)\.anygpu-(?P<host>[A-Za-z0-9-]{1,16})-(?P<pid>\d+)-[0-9a-f]{12}\.tmp$")
_LEGACY_TEMP_PATTERN = re.compile(r"^\.(?P<name>.+)\.[0-9a-f]{12}\.tmp$")
_LEGACY_TEMP_AGE = 3600.0


def _host_tag() -> str:
    tag = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:16]
    return tag or "host"


def _process_is_gone(pid: int) -> bool:
    if pid == os.getpid():
        return False  # another thread of this process may be writing right now
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, OSError):
        return False  # exists under another user, or cannot tell: keep the file
    return False


def remove_stale_temporaries(folder: PathLike, name: str | None = None) -> list[str]:
    """Delete the temporary files ``atomic_writer`` left in ``folder`` when a process died.

    Only files of this module's naming pattern are touched (for target ``name`` only, when
    given): those of a process on this host that no longer runs, and those of the older
    owner-less pattern once an hour old. Symlinks and anything not a regular file are left
    alone. Returns the paths removed. Best effort: a folder that cannot be listed is skipped.
    """
    removed: list[str] = []
    try:
        entries = os.listdir(folder)
    except OSError:
        return removed
    host = _host_tag()
    for entry in entries:
        match = _TEMP_PATTERN.match(entry)
        legacy = None if match else _LEGACY_TEMP_PATTERN.match(entry)
        found = match or legacy
        if found is None or (name is not None and found.group("name") != name):
            continue
        candidate = os.path.join(folder, entry)
        try:
            info = os.lstat(candidate)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode):
            continue
        if match is not None:
            stale = match.group("host") == host and _process_is_gone(int(match.group("pid")))
        else:
            stale = time.time() - info.st_mtime > _LEGACY_TEMP_AGE
        if stale:
            with contextlib.suppress(OSError):
                os.unlink(candidate)
                removed.append(candidate)
    return removed


@contextlib.contextmanager
def open_regular(path: PathLike, what: str) -> Iterator[BinaryIO]:
    """Open ``path`` for binary reading only if it is a regular file (a symlink to one is fine).

    A FIFO, socket, character or block device (``/dev/zero``) is refused with
    ``NotRegularFileError`` (an OSError and a ValueError whose message names ``what``, the
    operation), a folder with IsADirectoryError, before anything is read;
    the open itself cannot block, since it is non-blocking and checked again with fstat.
    """
    shown = os.fspath(path)
    kind = _file_kind(os.stat(path).st_mode)
    if kind is None:
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(path, flags)
        kind = _file_kind(os.fstat(fd).st_mode)
        if kind is None:
            if hasattr(os, "set_blocking"):
                os.set_blocking(fd, True)
            with os.fdopen(fd, "rb") as handle:
                yield handle
            return
        os.close(fd)
    if kind == "a directory":
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), shown)
    raise NotRegularFileError(errno.EINVAL, f"{what}: is {kind}; expected a regular file", shown)


def _file_kind(mode: int) -> str | None:
    """None for a regular file, else a phrase naming what it is."""
    if stat.S_ISREG(mode):
        return None
    for test, phrase in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                         (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return phrase
    return "not a regular file"


def _fsync_folder(folder: str) -> None:
    """Make the rename itself durable; not every platform can open a folder, so best effort."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: PathLike, data: BytesLike) -> None:
    """Replace the content of ``path`` with ``data`` atomically (see ``atomic_writer``)."""
    with atomic_writer(path) as handle:
        handle.write(data)


def _locate_payload(handle: BinaryIO) -> tuple[int, bytes | None]:
    """Return (payload length, stored digest or None) of an open file."""
    size = os.fstat(handle.fileno()).st_size
    if size < TRAILER_SIZE:
        return size, None
    handle.seek(size - TRAILER_SIZE)
    trailer = handle.read(TRAILER_SIZE)
    handle.seek(0)
    if len(trailer) == TRAILER_SIZE and trailer[: len(MAGIC)] == MAGIC:
        return size - TRAILER_SIZE, trailer[len(MAGIC) :]
    return size, None


def _hash_stream(handle: BinaryIO, length: int, copy_to: BinaryIO | None = None) -> bytes:
    """BLAKE3 digest of the next ``length`` bytes of ``handle``, copying them to ``copy_to``."""
    hasher = blake3()
    remaining = length
    while remaining > 0:
        chunk = handle.read(min(_CHUNK_SIZE, remaining))
        if not chunk:
            raise OSError(f"file shrank while being read: {remaining} of {length} bytes missing")
        hasher.update(chunk)
        if copy_to is not None:
            copy_to.write(chunk)
        remaining -= len(chunk)
    return hasher.digest()


def hash(path: PathLike) -> str:  # noqa: A001 - the SPEC names it nanosign.hash
    """Hex BLAKE3 hash of the payload of the file at ``path`` (trailer excluded if signed)."""
    with open_regular(path, "hash") as handle:
        length, _ = _locate_payload(handle)
        return _hash_stream(handle, length).hex()


def verify(path: PathLike) -> VerifyResult:
    """Check the NanoSign trailer of the file at ``path``."""
    with open_regular(path, "verify") as handle:
        length, stored = _locate_payload(handle)
        return _result(stored, _hash_stream(handle, length))


def sign(path: PathLike) -> str:
    """Sign the file at ``path`` in place (replacing any trailer); return the hex hash."""
    # The source is closed before atomic_writer renames over it (Windows forbids
    # replacing a file that is still open).
    with open_regular(path, "sign"):
        pass  # refuse a FIFO or device before atomic_writer creates anything
    with atomic_writer(path) as destination, open_regular(path, "sign") as source:
        length, _ = _locate_payload(source)
        digest = _hash_stream(source, length, copy_to=destination)
        destination.write(MAGIC + digest)
    return digest.hex()


def strip(path: PathLike) -> VerifyResult:
    """Remove the NanoSign trailer of the file at ``path`` in place.

    Returns the verification result of the file as it was before stripping: an unsigned
    file is left untouched; a trailer that fails to match is removed all the same.
    """
    with open_regular(path, "strip") as source:
        length, stored = _locate_payload(source)
        if stored is None:
            return _result(None, _hash_stream(source, length))
    with atomic_writer(path) as destination, open_regular(path, "strip") as source:
        length, stored = _locate_payload(source)
        digest = _hash_stream(source, length, copy_to=destination)
    return _result(stored, digest)
