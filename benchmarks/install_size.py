"""Installed size of anygpu: the core, and with every extra (`[all]`).

Builds the wheel (`pip wheel --no-deps .`), installs it into a fresh virtual environment per
variant (no system site-packages: pip fetches numpy and the rest from its index or cache),
and sums the bytes of every file in site-packages except pip's and setuptools' own, as the
issue counts them. With --train, the core environment also runs `anygpu train digits`
(one epoch) to show that the plain install trains.

    python benchmarks/install_size.py [--extras all] [--train] [--keep DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# pip and setuptools come with every venv; they are not anygpu's weight
NOT_COUNTED = ("pip", "setuptools", "_distutils_hack", "pkg_resources", "distutils-precedence.pth")


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, check=True, text=True, capture_output=True, **kwargs)


def site_packages(venv: Path) -> Path:
    (found,) = venv.glob("lib/python*/site-packages")
    return found


def sizes(folder: Path) -> dict[str, int]:
    """Bytes per top-level entry of site-packages (a package with its .dist-info, libs and data)."""
    totals: dict[str, int] = {}
    for entry in folder.iterdir():
        if entry.name.startswith(NOT_COUNTED) or entry.name.split("-")[0] in NOT_COUNTED:
            continue
        key = entry.name.split("-")[0].split(".")[0].lower() if entry.name.endswith((".dist-info", ".libs")) \
            else entry.name.lower()
        files = [entry] if entry.is_file() else [p for p in entry.rglob("*") if p.is_file() and not p.is_symlink()]
        totals[key] = totals.get(key, 0) + sum(p.stat().st_size for p in files)
    return totals


def measure(wheel: Path, extras: str, work: Path, train: bool) -> dict:
    venv = work / f"venv{extras or '-core'}"
    run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    started = time.perf_counter()
    run([str(python), "-m", "pip", "install", "-q", f"{wheel}{extras}"])
    install_seconds = time.perf_counter() - started
    by_package = sizes(site_packages(venv))
    result = {"extras": extras or "(core)", "bytes": sum(by_package.values()), "by_package": by_package,
              "install_seconds": install_seconds}
    if train:
        started = time.perf_counter()
        done = run([str(venv / "bin" / "anygpu"), "train", "digits", "--epochs", "1", "--no-progress",
                    "--out", str(work / "run")], cwd=work)
        result["train_seconds"] = time.perf_counter() - started
        result["train_output"] = done.stdout.strip().splitlines()[-3:]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", default="all", help="extras of the second install ('' for the core only)")
    parser.add_argument("--train", action="store_true", help="run `anygpu train digits` in the core install")
    parser.add_argument("--keep", type=Path, help="build and install under DIR and keep it (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="anygpu-install-") as temporary:
        work = args.keep or Path(temporary)
        work.mkdir(parents=True, exist_ok=True)
        run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(work / "wheel")])
        (wheel,) = (work / "wheel").glob("anygpu-*.whl")
        print(f"wheel {wheel.name}: {wheel.stat().st_size / 1e6:.2f} MB")
        variants = [""] + ([f"[{args.extras}]"] if args.extras else [])
        for extras in variants:
            result = measure(wheel, extras, work, train=args.train and not extras)
            top = sorted(result["by_package"].items(), key=lambda item: -item[1])[:8]
            print(f"anygpu{extras or ''} installed: {result['bytes'] / 1e6:.1f} MB in site-packages "
                  f"(pip and setuptools not counted), pip install took {result['install_seconds']:.0f} s")
            print("  largest: " + ", ".join(f"{name} {size / 1e6:.1f}" for name, size in top))
            if "train_seconds" in result:
                print(f"  anygpu train digits --epochs 1: {result['train_seconds']:.0f} s; "
                      + " | ".join(result["train_output"]))


if __name__ == "__main__":
    main()
