"""``anygpu sign|verify|strip|hash FILE``: NanoSign on any file from the command line.

Exit codes follow the verification outcome: 0 verified (or done), 1 failed, 2 unsigned.
A file that cannot be read or written is one line on stderr and exit code 2.
The main ``anygpu`` command adds these subcommands with ``register(subparsers)``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Sequence

from anygpu.io import nanosign

__all__ = ["register", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNSIGNED = 2
EXIT_ERROR = 2

_EXIT_BY_STATUS = {"verified": EXIT_OK, "failed": EXIT_FAILED, "unsigned": EXIT_UNSIGNED}


def _cmd_sign(args: argparse.Namespace) -> int:
    print(nanosign.sign(args.file))
    return EXIT_OK


def _cmd_verify(args: argparse.Namespace) -> int:
    result = nanosign.verify(args.file)
    print(result)
    return _EXIT_BY_STATUS[result.status]


def _cmd_strip(args: argparse.Namespace) -> int:
    result = nanosign.strip(args.file)
    if result.status == "unsigned":
        print("unsigned: nothing to strip")
    elif result.status == "failed":
        # The trailer is gone either way; the exit code still tells the caller it did not match.
        print(f"stripped, but the signature had FAILED: expected {result.expected} actual {result.actual}")
    else:
        print(f"stripped {result.actual}")
    return _EXIT_BY_STATUS[result.status]


def _cmd_hash(args: argparse.Namespace) -> int:
    print(nanosign.hash(args.file))
    return EXIT_OK


def _guarded(command: str, action: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Wrap ``action`` so that an OSError becomes one stderr line and exit code 2."""

    def run(args: argparse.Namespace) -> int:
        try:
            return action(args)
        except OSError as error:
            reason = error.strerror or str(error)
            # Errors on FILE itself come from reading it; others (the temporary file, the
            # folder) come from writing the new version.
            failed_path = error.filename
            verb = "read" if failed_path is None or _same_path(failed_path, args.file) else "write"
            print(f"anygpu {command}: cannot {verb} {args.file}: {reason}", file=sys.stderr)
            return EXIT_ERROR

    return run


def _same_path(a: str | bytes | int, b: str) -> bool:
    try:
        return os.path.realpath(os.fsdecode(a)) == os.path.realpath(b)
    except TypeError:
        return False


_COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], str]] = {
    "sign": (_cmd_sign, "append (or replace) a NanoSign trailer; print the BLAKE3 hash"),
    "verify": (_cmd_verify, "check the NanoSign trailer; exit 0 verified, 1 failed, 2 unsigned"),
    "strip": (_cmd_strip, "remove the NanoSign trailer; exit 0 done, 1 it had failed, 2 unsigned"),
    "hash": (_cmd_hash, "print the BLAKE3 hash of the content (trailer excluded)"),
}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``sign``, ``verify``, ``strip`` and ``hash`` subcommands.

    Each sets ``func``: call ``args.func(args)`` to run it and get the exit code.
    """
    for command, (action, help_text) in _COMMANDS.items():
        parser = subparsers.add_parser(command, help=help_text, description=help_text)
        parser.add_argument("file", metavar="FILE", help="the file to operate on")
        parser.set_defaults(func=_guarded(command, action))


def main(argv: Sequence[str] | None = None) -> int:
    """Run one NanoSign subcommand, e.g. ``main(["verify", "model.safetensors"])``."""
    parser = argparse.ArgumentParser(prog="anygpu", description="NanoSign integrity trailers.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    register(subparsers)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
