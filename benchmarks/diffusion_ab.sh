#!/usr/bin/env bash
# Alternated runs of `anygpu train diffusion` across commits, ranks and settings, in one
# device call (the epoch-3 samples/s of each run; the GPU's state drifts between calls, so
# compare only runs of one call). REV is a folder holding a `src` (a commit extracted with
# `git archive REV src | tar -x -C FOLDER`) or, where the checkout has its .git, a commit;
# its `src` goes first on PYTHONPATH.
#
#   bash benchmarks/diffusion_ab.sh OUT SPEC...      SPEC = REV:RANKS[:ENV=VALUE[,ENV=VALUE...]]
#   e.g. bash benchmarks/diffusion_ab.sh $OUT .:1 .:2 .ab/old:2 .:2:ANYGPU_DDP_BUCKET_MB=4
#
# The device machine gets the working tree without .git: extract the commits to compare into
# a git-ignored folder here (e.g. .ab/old), carry it with .gpu, and run
# `source .gpu/env.sh && bash benchmarks/diffusion_ab.sh $OUT .:1 .:2 .ab/old:2 ...`.
set -u
out=$1; shift
mkdir -p "$out"
work=$(mktemp -d)
k=0
for spec in "$@"; do
  IFS=: read -r rev ranks envs <<< "$spec"
  k=$((k + 1))
  if [ -d "$rev/src" ]; then
    src=$(cd "$rev/src" && pwd)
  else
    src="$work/$rev/src"
    if [ ! -d "$src" ]; then
      mkdir -p "$work/$rev"
      git archive "$rev" src 2>/dev/null | tar -x -C "$work/$rev" 2>/dev/null \
        || { echo "$rev: neither a folder with a src nor a commit here"; exit 2; }
    fi
  fi
  settings=(${envs//,/ })
  echo "=== $k $rev ranks $ranks ${settings[*]:-}" | tee -a "$out/ab.log"
  env "${settings[@]}" PYTHONPATH="$src${PYTHONPATH:+:$PYTHONPATH}" timeout 150 \
    mpiexec -n "$ranks" python3 -m anygpu train diffusion --epochs 3 --out "$work/run-$k" > "$work/log-$k" 2>&1
  echo "exit $?" >> "$out/ab.log"
  tr '\r' '\n' < "$work/log-$k" | grep -a "samples/s\|rror" | grep -av "it/s" | tail -3 | tee -a "$out/ab.log"
done
rm -rf "$work"
