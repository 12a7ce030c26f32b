"""Data-parallel benchmark: all-reduce bandwidth and training throughput on 1 vs N GPUs.

    python benchmarks/distributed.py [--ranks 2] [--json FILE] [--quick]

runs, each as its own `mpiexec -n R` job (R = 1 and --ranks; each rank opens the GPU of its
local rank):

- all-reduce of a float32 tensor of 1 MiB .. 256 MiB across the ranks, timed end to end
  (GPU -> host, MPI all-reduce, host -> GPU: what `anygpu.distributed.all_reduce` does)
  and for the MPI step alone on host arrays. Bandwidth = tensor bytes / seconds.
- the MLP 784-512-512-10 SGD step (as `anygpu bench`), per-rank batch 256 and 1024, and the
  diffusion UNet's AdamW step at batch 32, with DistributedDataParallel (two bucket sizes) on
  R > 1 ranks and without it on 1: global samples per second.
- `anygpu train diffusion` (the stratagem, default width and batch 32 per rank) for 3
  epochs: samples per second of the best later epoch from metrics.json (the first epoch
  compiles kernels).

Scaling is weak scaling, as DistributedDataParallel is used: every rank keeps its batch.
Speed-up = global samples/s on R ranks / samples/s on 1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- workers (under mpiexec)


def _worker_allreduce(sizes_mib, repeats):
    import anygpu as ag
    import anygpu.distributed as dist

    dist.init_process_group("mpi")
    dev = ag.gpu()
    rows = []
    for mib in sizes_mib:
        n = int(mib * (1 << 20)) // 4
        tensor = ag.tensor(np.ones(n, np.float32))
        host = np.ones(n, np.float32)
        for _ in range(2):
            dist.all_reduce(tensor)
            dist.all_reduce_array(host)
        dev.synchronize()
        dist.barrier()
        started = time.perf_counter()
        for _ in range(repeats):
            dist.all_reduce(tensor)
        dev.synchronize()
        full = (time.perf_counter() - started) / repeats
        dist.barrier()
        started = time.perf_counter()
        for _ in range(repeats):
            dist.all_reduce_array(host)
        mpi_only = (time.perf_counter() - started) / repeats
        rows.append({"mib": mib, "seconds": full, "gb_per_s": n * 4 / full / 1e9,
                     "mpi_seconds": mpi_only, "mpi_gb_per_s": n * 4 / mpi_only / 1e9})
    return {"rank": dist.get_rank(), "adapter": dev.adapter_name, "adapter_index": dev.adapter_index, "rows": rows}


def _worker_step(model_name, batch, steps, bucket_mb):
    import anygpu as ag
    import anygpu.distributed as dist
    from anygpu import nn, optim
    from anygpu.nn import functional as F
    from anygpu.nn.parallel import DistributedDataParallel

    world = 1
    if dist.launched_by_mpi() > 1:
        dist.init_process_group("mpi")
        world = dist.get_world_size()
    dev = ag.gpu()
    ag.manual_seed(0)
    rng = np.random.default_rng(0)
    if model_name == "mlp":
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
        opt = optim.SGD(model.parameters(), lr=0.01)
        inputs = (ag.tensor(rng.standard_normal((batch, 784)).astype(np.float32)),)
        target = ag.tensor(rng.integers(0, 10, batch).astype(np.int32))
        loss_fn = F.cross_entropy
    else:  # the diffusion stratagem's UNet step (width 64, AdamW, MSE), without data preparation
        from anygpu.train.diffusion import TinyUNet, sinusoidal_embedding
        model = TinyUNet(3, 64)
        opt = optim.AdamW(model.parameters(), lr=1e-4)
        inputs = (ag.tensor(rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)),
                  ag.tensor(sinusoidal_embedding(rng.integers(0, 200, batch), 64)))
        target = ag.tensor(rng.standard_normal((batch, 3, 32, 32)).astype(np.float32))
        loss_fn = F.mse_loss
    wrapped = DistributedDataParallel(model, bucket_cap_mb=bucket_mb) if world > 1 else model

    def step():
        opt.zero_grad()
        loss_fn(wrapped(*inputs), target).backward()
        opt.step()

    for _ in range(5):
        step()
    dev.synchronize()
    if world > 1:
        dist.barrier()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    dev.synchronize()
    seconds = time.perf_counter() - started
    return {"model": model_name, "world": world, "batch": batch, "bucket_mb": bucket_mb,
            "step_ms": seconds / steps * 1e3,
            "global_samples_per_s": world * batch * steps / seconds, "adapter": dev.adapter_name,
            "adapter_index": dev.adapter_index}


# --------------------------------------------------------------------------- driver


def _mpiexec() -> str:
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    from shutil import which
    found = which("mpiexec")
    if found is None:
        raise SystemExit("benchmarks/distributed.py: no mpiexec; pip install 'anygpu[dist]'")
    return found


def _job(ranks: int, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    try:
        return subprocess.run([_mpiexec(), "-n", str(ranks), *argv], capture_output=True, text=True,
                              env=env, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        return subprocess.CompletedProcess(expired.cmd, 124, expired.stdout or "", f"timed out after {timeout} s")


def _run_worker(ranks: int, kind: str, args: list[str], timeout: float, log) -> list[dict] | None:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "result"
        job = _job(ranks, [sys.executable, __file__, "--worker", kind, "--out", str(out), *args], timeout)
        log(f"$ mpiexec -n {ranks} {kind} {' '.join(args)} -> exit {job.returncode}")
        if job.returncode != 0:
            log(job.stdout[-3000:] + job.stderr[-3000:])
            return None
        return [json.loads(Path(f"{out}.{rank}.json").read_text()) for rank in range(ranks)]


def _diffusion(ranks: int, epochs: int, limit: int | None, timeout: float, log) -> dict | None:
    with tempfile.TemporaryDirectory() as folder:
        argv = [sys.executable, "-m", "anygpu", "train", "diffusion", "--epochs", str(epochs), "--out", folder,
                "--no-progress", *(["--limit", str(limit), "--width", "16", "--samples", "2", "--sample-steps", "2"]
                                   if limit else [])]
        job = _job(ranks, argv, timeout)
        log(f"$ mpiexec -n {ranks} anygpu train diffusion --epochs {epochs} -> exit {job.returncode}")
        log(job.stdout[-2000:])
        if job.returncode != 0:
            log(job.stderr[-3000:])
            return None
        metrics = json.loads((Path(folder) / "metrics.json").read_text())
        later = metrics["history"][1:] or metrics["history"]
        best = max(later, key=lambda record: record["samples_per_second"])
        return {"world": metrics.get("world_size", 1), "samples_per_second": best["samples_per_second"],
                "steps_per_second": best["steps_per_second"], "epoch": best["epoch"],
                "train_loss": metrics["train_loss"], "adapters": metrics.get("rank_adapters", metrics["adapter"])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--quick", action="store_true", help="small sizes (for a software adapter)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default="1,4,16,64,256", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=256, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=50, help=argparse.SUPPRESS)
    parser.add_argument("--bucket", type=float, default=25.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        if args.worker == "allreduce":
            result = _worker_allreduce([float(s) for s in args.sizes.split(",")], repeats=10 if not args.quick else 3)
        else:
            result = _worker_step(args.worker, args.batch, args.steps, args.bucket)
        rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
        Path(f"{args.out}.{rank}.json").write_text(json.dumps(result))
        return 0

    def log(text: str) -> None:
        print(text, flush=True)

    quick = args.quick
    sizes = "0.25,1" if quick else args.sizes
    batches = (32,) if quick else (256, 1024)
    steps = "2" if quick else "30"
    report: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "ranks": args.ranks}
    report["allreduce"] = _run_worker(args.ranks, "allreduce", ["--sizes", sizes], 300, log)
    report["steps"] = []
    plan = [("mlp", batch, bucket) for batch in batches for bucket in (25.0, 1.0)]
    plan += [("unet", 1 if quick else 32, bucket) for bucket in (25.0, 2.0)]
    baselines = {}
    for model_name, batch, bucket in plan:
        if (model_name, batch) not in baselines:
            one = _run_worker(1, model_name, ["--batch", str(batch), "--steps", steps], 300, log)
            baselines[(model_name, batch)] = one and one[0]
        one = baselines[(model_name, batch)]
        many = _run_worker(args.ranks, model_name, ["--batch", str(batch), "--steps", steps, "--bucket", str(bucket)],
                           300, log)
        row = {"model": model_name, "batch_per_rank": batch, "bucket_mb": bucket, "one": one,
               "many": many and many[0], "rank_adapter_indices": many and [r["adapter_index"] for r in many]}
        if one and many:
            row["speedup"] = many[0]["global_samples_per_s"] / one["global_samples_per_s"]
        report["steps"].append(row)
    epochs, limit = (2, 64) if quick else (3, None)
    one = _diffusion(1, epochs, limit, 400, log)
    many = _diffusion(args.ranks, epochs, limit, 400, log)
    report["diffusion"] = {"one": one, "many": many,
                           "speedup": many["samples_per_second"] / one["samples_per_second"] if one and many else None}

    log("\n| benchmark | 1 rank | %d ranks | speed-up |" % args.ranks)
    log("| --- | ---: | ---: | ---: |")
    names = {"mlp": "MLP 784-512-512-10 SGD step", "unet": "diffusion UNet (width 64) AdamW step"}
    for row in report["steps"]:
        if row.get("speedup"):
            log(f"| {names[row['model']]}, batch {row['batch_per_rank']}/rank, buckets {row['bucket_mb']:g} MiB | "
                f"{row['one']['global_samples_per_s']:.0f} samples/s ({row['one']['step_ms']:.2f} ms) | "
                f"{row['many']['global_samples_per_s']:.0f} samples/s ({row['many']['step_ms']:.2f} ms) | "
                f"{row['speedup']:.2f}x |")
    d = report["diffusion"]
    if d["speedup"]:
        log(f"| train diffusion, batch 32/rank | {d['one']['samples_per_second']:.0f} samples/s | "
            f"{d['many']['samples_per_second']:.0f} samples/s | {d['speedup']:.2f}x |")
    if report["allreduce"]:
        log("\n| all-reduce float32 | GPU->host->MPI->GPU | MPI alone (host) |")
        log("| ---: | ---: | ---: |")
        for row in report["allreduce"][0]["rows"]:
            log(f"| {row['mib']:g} MiB | {row['seconds'] * 1e3:.2f} ms, {row['gb_per_s']:.2f} GB/s | "
                f"{row['mpi_seconds'] * 1e3:.2f} ms, {row['mpi_gb_per_s']:.2f} GB/s |")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
