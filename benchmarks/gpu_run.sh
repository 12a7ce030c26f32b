#!/usr/bin/env bash
# Everything one visit to a GPU machine measures, in order of importance: correctness of
# the matmul family and the runtime there, then `anygpu bench --tune`, then the matmul
# sweep. Each step has its own time limit, so a slow one cannot starve the others.
# Usage (on the GPU machine, from the repo root):  bash benchmarks/gpu_run.sh OUT_DIR
# It writes 7 files into OUT_DIR: env.txt tests.log bench.txt bench.json bench.png sweep.txt sweep.json
out=${1:?usage: gpu_run.sh OUT_DIR}
mkdir -p "$out"
export ANYGPU_CACHE_DIR=${ANYGPU_CACHE_DIR:-$(mktemp -d)}
{ date -u; nvidia-smi; timeout 60 python3 -m anygpu info; } > "$out/env.txt" 2>&1
timeout 110 python3 -m pytest -q -p no:cacheprovider tests/ops/test_matmul_family.py \
  tests/ops/test_elementwise_vec4.py tests/ops/test_matmul.py tests/ops/test_elementwise.py tests/runtime \
  tests/bench > "$out/tests.log" 2>&1
echo "pytest exit code $?" >> "$out/tests.log"
timeout 200 python3 -m anygpu bench --tune --json "$out/bench.json" --plot "$out/bench.png" > "$out/bench.txt" 2>&1
echo "bench exit code $?" >> "$out/bench.txt"
timeout 140 python3 benchmarks/matmul_sweep.py --json "$out/sweep.json" --time-limit 100 > "$out/sweep.txt" 2>&1
echo "sweep exit code $?" >> "$out/sweep.txt"
