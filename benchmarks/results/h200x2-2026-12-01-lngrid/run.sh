#!/bin/bash
# The one device call of "f16 layer norm: grid-stride rows" (docs/BENCHMARKS.md, 2026-12-01):
# source .gpu/env.sh && bash benchmarks/results/h200x2-2026-12-01-lngrid/run.sh
# Runs on commit ab8ea7b only: the grid-stride labels in $X were removed again by the next commit.
O=${OUT:-out}
mkdir -p "$O"
export ANYGPU_CACHE_DIR="$O/cache"
M='^r(128x8|256x4)vgd(-g[0-9]+)?$|^r(128x4|256x2)vgw8(-g[0-9]+[a-z]*)?$'
X=r256x2vgw8-g512,r256x2vgw8-g512a,r256x2vgw8-g512p,r256x2vgw8-g528,r256x2vgw8-g1056,r256x2vgw8-g1056a
X=$X,r256x2vgw8-g1056p,r256x2vgw8-g1024s,r256x2vgw8-g2048s,r256x2vgw8-g1024ap,r256x2vgw8-g2048ap
X=$X,r256x2vgw8-g1024sp,r128x4vgw8-g1024s,r128x4vgw8-g1024ap,r256x4vgd-g512,r256x4vgd-g1056
(time python3 -m pytest -q -n 12 tests/ops/test_row_kernels.py -k "grid or word_layer_norm_matches") > "$O/tests.log" 2>&1
tail -3 "$O/tests.log"
(time python3 benchmarks/kernel_probe.py --only layer_norm --match "$M" --configs "$X" --json "$O/probe1.json") > "$O/probe1.log" 2>&1
cat "$O/probe1.log"
(time python3 benchmarks/kernel_probe.py --only layer_norm --no-affine --match "$M" --configs "$X" --json "$O/noaffine.json") > "$O/noaffine.log" 2>&1
cat "$O/noaffine.log"
(time python3 -m anygpu bench --only norm --sizes 4096 --json "$O/bench.json") > "$O/bench.log" 2>&1
cat "$O/bench.log"
(time python3 benchmarks/kernel_probe.py --only layer_norm --match "$M" --configs "$X" --json "$O/probe2.json") > "$O/probe2.log" 2>&1
grep -E "^## |g1024 |g2048 |^r256x2vgw8 |^r256x4vgd |torch" "$O/probe2.log"
