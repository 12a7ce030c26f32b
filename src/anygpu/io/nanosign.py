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
import os
import secrets
from dataclasses import dataclass
from typing import BinaryIO, Iterator, Literal, Union

from blake3 import blake3

__all__ = [
    "MAGIC",
    "DIGEST_SIZE",
    "TRAILER_SIZE",
    "TamperedError",
    "VerifyResult",
    "atomic_write_bytes",
    "atomic_writer",
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
        mode: int | None = os.stat(target).st_mode & 0o7777
    except FileNotFoundError:
        mode = None

    while True:
        temp = os.path.join(folder, f".{name}.{secrets.token_hex(6)}.tmp")
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
    with open(path, "rb") as handle:
        length, _ = _locate_payload(handle)
        return _hash_stream(handle, length).hex()


def verify(path: PathLike) -> VerifyResult:
    """Check the NanoSign trailer of the file at ``path``."""
    with open(path, "rb") as handle:
        length, stored = _locate_payload(handle)
        return _result(stored, _hash_stream(handle, length))


def sign(path: PathLike) -> str:
    """Sign the file at ``path`` in place (replacing any trailer); return the hex hash."""
    # The source is closed before atomic_writer renames over it (Windows forbids
    # replacing a file that is still open).
    with atomic_writer(path) as destination, open(path, "rb") as source:
        length, _ = _locate_payload(source)
        digest = _hash_stream(source, length, copy_to=destination)
        destination.write(MAGIC + digest)
    return digest.hex()


def strip(path: PathLike) -> VerifyResult:
    """Remove the NanoSign trailer of the file at ``path`` in place.

    Returns the verification result of the file as it was before stripping: an unsigned
    file is left untouched; a trailer that fails to match is removed all the same.
    """
    with open(path, "rb") as source:
        length, stored = _locate_payload(source)
        if stored is None:
            return _result(None, _hash_stream(source, length))
    with atomic_writer(path) as destination, open(path, "rb") as source:
        length, stored = _locate_payload(source)
        digest = _hash_stream(source, length, copy_to=destination)
    return _result(stored, digest)
