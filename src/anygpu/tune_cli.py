"""``anygpu tune -- CMD ...``: run a command (a training script) with full kernel tuning, so
that every shape it meets is tuned completely at its first call and stored in the tuning
cache (ops/tuner.py); later runs of it start at tuned speed without tuning."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from .ops import tuner


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "tune", help="run a command with full kernel tuning, warming the tuning cache for its shapes",
        description="Run CMD (e.g. 'python train.py') with an unlimited tuning budget: each new shape is "
                    "tuned completely at its first call and stored in the tuning cache "
                    "(ANYGPU_CACHE_DIR, default ~/.cache/anygpu), so later runs start tuned.",
        usage="anygpu tune [-h] -- CMD [ARG ...]")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="CMD", help="the command to run, after --")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ValueError("tune: expected a command after '--' (e.g. anygpu tune -- python train.py), got none")
    env = dict(os.environ, ANYGPU_TUNE_BUDGET="inf", ANYGPU_TUNE_SHARE="1", ANYGPU_AUTOTUNE="1")
    before = set(tuner.load_cache())
    code = subprocess.call(command, env=env)  # FileNotFoundError (an OSError): one line from cli.main
    after = tuner.load_cache()
    print(f"anygpu tune: {tuner.cache_path()} holds {len(after)} tuned shape buckets "
          f"({len(set(after) - before)} new); the command exited with {code}", file=sys.stderr)
    return code
