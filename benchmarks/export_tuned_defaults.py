"""Export this device's tuning cache as shipped defaults (src/anygpu/ops/tuned_defaults.json).

The tuner (ops/tuner.py) starts every untuned bucket from the shipped default of its
vendor and adapter kind ('nvidia-gpu', 'lavapipe-cpu', ...; tuner.vendor_key) before its
own incremental tuning. This script takes the cache entries of the adapter anygpu opens
here, keys them by that vendor key instead of the adapter and driver, and merges them
into the defaults file (entries of other vendors are kept; this vendor's are replaced
bucket by bucket). Regenerate on a GPU after warming a cache with the workloads of
interest, e.g. on the H200:

    export ANYGPU_CACHE_DIR=$(mktemp -d)
    anygpu tune -- python benchmarks/first_steps.py --steps 3 --first 3 --cache-dir "$ANYGPU_CACHE_DIR"
    anygpu tune -- anygpu train digits --epochs 1 --no-progress --out /tmp/digits
    anygpu bench --tune                                                  # the bench sizes
    python benchmarks/export_tuned_defaults.py                           # -> src/anygpu/ops/tuned_defaults.json

and commit the file."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import anygpu as ag
from anygpu.ops import tuner
from anygpu.ops.cache_file import read_entries, write_entries


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", type=Path, help="the tuning cache (default: the tuner's, ANYGPU_CACHE_DIR)")
    p.add_argument("--out", type=Path, default=tuner.DEFAULTS_PATH, help="the defaults file to merge into")
    p.add_argument("--vendor", help="the vendor key to file them under (default: this device's, e.g. nvidia-gpu)")
    args = p.parse_args()
    dev = ag.ops.gpu()
    vendor = args.vendor or tuner.vendor_key(dev)
    middle = f" | {dev.adapter_name} | {dev.driver} | "
    cache = tuner.load_cache(args.cache) if args.cache else tuner.load_cache()
    found = {}
    for key, entry in cache.items():
        if middle not in key:
            continue  # another adapter's
        op, bucket = key.split(middle, 1)
        found[f"{op} | {vendor} | {bucket}"] = {
            "choice": entry["choice"], "from": dev.adapter_name, "work_per_second": entry.get("work_per_second"),
            "exported": time.strftime("%Y-%m-%d")}
    if not found:
        print(f"no cache entries of {dev.adapter_name} in {args.cache or tuner.cache_path()}", file=sys.stderr)
        return 1
    merged = dict(read_entries(args.out, tuner.CACHE_FORMAT))
    merged.update(found)
    if not write_entries(args.out, tuner.CACHE_FORMAT, merged):
        print(f"could not write {args.out}", file=sys.stderr)
        return 1
    print(f"{len(found)} entries of {dev.adapter_name} filed under '{vendor}' in {args.out} ({len(merged)} in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
