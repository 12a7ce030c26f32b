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
import math
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
    from anygpu.distributed.process_group import _need_group, _run
    from anygpu.runtime.staging import stage_for

    dist.init_process_group("mpi")
    group = _need_group("bench")
    dev = ag.gpu()
    rows = []

    def numpy_path(tensor, host_out):  # the path before runtime/staging.py: read, MPI, write
        t0 = time.perf_counter()
        host = dev.read(tensor._buf)
        t1 = time.perf_counter()
        _run(group, lambda: group.comm.Allreduce(group.mpi.IN_PLACE, host, op=group.mpi.SUM), "bench")
        t2 = time.perf_counter()
        dev.write(tensor._buf, host)
        dev.synchronize()
        t3 = time.perf_counter()
        host_out += (t1 - t0, t2 - t1, t3 - t2)

    for mib in sizes_mib:
        n = int(mib * (1 << 20)) // 4
        tensor = ag.tensor(np.ones(n, np.float32))
        host = np.ones(n, np.float32)
        parts = np.zeros(3)
        for _ in range(2):
            dist.all_reduce(tensor)
            dist.all_reduce_array(host)
            numpy_path(tensor, parts)
        dev.synchronize()
        dist.barrier()
        started = time.perf_counter()
        staged = np.zeros(2)
        stage = stage_for(dev, n * 4)
        for _ in range(repeats):
            dist.all_reduce(tensor)
            staged += (stage.times["map"], stage.times["work"])
        dev.synchronize()
        full = (time.perf_counter() - started) / repeats
        dist.barrier()
        parts[:] = 0
        started = time.perf_counter()
        for _ in range(repeats):
            numpy_path(tensor, parts)
        before = (time.perf_counter() - started) / repeats
        dist.barrier()
        started = time.perf_counter()
        for _ in range(repeats):
            dist.all_reduce_array(host)
        mpi_only = (time.perf_counter() - started) / repeats
        rows.append({"mib": mib, "seconds": full, "gb_per_s": n * 4 / full / 1e9,
                     "staged_map_seconds": staged[0] / repeats, "staged_mpi_seconds": staged[1] / repeats,
                     "numpy_path_seconds": before, "numpy_read_seconds": parts[0] / repeats,
                     "numpy_mpi_seconds": parts[1] / repeats, "numpy_write_seconds": parts[2] / repeats,
                     "mpi_seconds": mpi_only, "mpi_gb_per_s": n * 4 / mpi_only / 1e9})
    return {"rank": dist.get_rank(), "adapter": dev.adapter_name, "adapter_index": dev.adapter_index,
            "adapter_env": os.environ.get("ANYGPU_ADAPTER"), "rows": rows}


def _worker_mpi(sizes_mib, repeats):
    """MPI alone on host arrays (for the MPICH settings sweep)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rows = []
    for mib in sizes_mib:
        n = int(mib * (1 << 20)) // 4
        send, recv = np.ones(n, np.float32), np.empty(n, np.float32)
        for _ in range(3):
            comm.Allreduce(send, recv)
        comm.Barrier()
        started = time.perf_counter()
        for _ in range(repeats):
            comm.Allreduce(send, recv)
        seconds = (time.perf_counter() - started) / repeats
        rows.append({"mib": mib, "seconds": seconds, "gb_per_s": n * 4 / seconds / 1e9})
    return {"rank": comm.Get_rank(), "rows": rows}


WARM_SECONDS = 1.0  # seconds of steps run before timing, and the least timed (see _worker_step)


def _worker_step(model_name, batch, steps, bucket_mb, overlap=True, ddp=True, defer=True, compiled=False,
                 warm_seconds=WARM_SECONDS):
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
    # ddp=False: the ranks train independently (what two processes cost each other without DDP)
    wrapped = DistributedDataParallel(model, bucket_cap_mb=bucket_mb) if world > 1 and ddp else model
    if wrapped is not model and not overlap:  # every bucket reduced after backward, as before the overlap
        from anygpu.tensor import grad_ready_hooks
        grad_ready_hooks.clear()
    if wrapped is not model:
        wrapped._defer = defer  # False: wait for the sums at the end of backward (the form before gates)

    def train_step(*tensors):
        opt.zero_grad()
        loss = loss_fn(wrapped(*tensors[:-1]), tensors[-1])
        loss.backward()
        opt.step()
        return loss

    captured = ag.compile(train_step) if compiled else train_step

    from anygpu.distributed import process_group

    def step():
        process_group.trace("step")
        captured(*inputs, target)

    for _ in range(5):
        step()
    if compiled and captured.stats["replayed"] == 0:
        raise SystemExit(f"the step was not captured: {captured.reason(*inputs, target)}")
    # Warm the GPU's clocks up (an idle H200 runs the first milliseconds of work several times
    # slower: 30 MLP steps alone once read 1.02 ms a step against 0.36 in `anygpu bench`) and
    # time at least WARM_SECONDS of steps; the ranks agree on the counts (collectives).
    dev.synchronize()
    started = time.perf_counter()
    for _ in range(5):
        step()
    dev.synchronize()
    estimate = max((time.perf_counter() - started) / 5, 1e-6)
    counts = [math.ceil(warm_seconds / estimate), max(steps, math.ceil(warm_seconds / estimate))]
    if world > 1:
        counts = [int(c) for c in dist.process_group.all_gather_numbers(counts).max(axis=0)]
    warm, steps = counts
    for _ in range(warm):
        step()
    dev.synchronize()
    if wrapped is not model:  # per-step reduction times of the timed steps only
        wrapped.stats.update(rounds=0, map_seconds=0.0, mpi_seconds=0.0, wait_seconds=0.0)
    if world > 1:
        dist.barrier()
    profiler = None
    if os.environ.get("ANYGPU_BENCH_PROFILE"):  # where the host time of the timed steps goes (cProfile)
        import cProfile
        profiler = cProfile.Profile()
        profiler.enable()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    dev.synchronize()
    seconds = time.perf_counter() - started
    profile = ""
    if profiler is not None:
        import io
        import pstats
        profiler.disable()
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text).sort_stats("tottime")
        stats.print_stats(14)
        stats.print_callers("proxy_func")  # which of our calls into wgpu-py take the time
        profile = text.getvalue()
    stats = {}
    if wrapped is not model:  # where a step's reduction time goes, per step (rounds include the warm-up)
        rounds = max(wrapped.stats["rounds"], 1)
        stats = {key.replace("_seconds", "_ms"): value / rounds * 1e3 for key, value in wrapped.stats.items()
                 if key.endswith("_seconds")}
    trace = process_group.TRACE[-80:] if process_group.TRACE else []  # ANYGPU_DIST_TRACE=1: the last steps' events
    trace = [(round((t - trace[0][0]) * 1e6), who, what) for t, who, what in trace]
    return {"model": model_name, "world": world, "batch": batch, "bucket_mb": bucket_mb, "overlap": overlap,
            "trace": trace, "profile": profile,
            "defer": defer, "compiled": compiled,
            "per_step": stats, "step_ms": seconds / steps * 1e3,
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


def _job(ranks: int, argv: list[str], timeout: float, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           **(extra_env or {})}
    try:
        return subprocess.run([_mpiexec(), "-n", str(ranks), *argv], capture_output=True, text=True,
                              env=env, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        return subprocess.CompletedProcess(expired.cmd, 124, expired.stdout or "", f"timed out after {timeout} s")


def _run_worker(ranks: int, kind: str, args: list[str], timeout: float, log, env=None) -> list[dict] | None:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "result"
        job = _job(ranks, [sys.executable, __file__, "--worker", kind, "--out", str(out), *args], timeout, env)
        log(f"$ {' '.join(f'{k}={v}' for k, v in (env or {}).items())} mpiexec -n {ranks} {kind} "
            f"{' '.join(args)} -> exit {job.returncode}")
        if job.returncode != 0:
            log(job.stdout[-3000:] + job.stderr[-3000:])
            return None
        return [json.loads(Path(f"{out}.{rank}.json").read_text()) for rank in range(ranks)]


def _diffusion(ranks: int, epochs: int, limit: int | None, timeout: float, log, env=None) -> dict | None:
    with tempfile.TemporaryDirectory() as folder:
        argv = [sys.executable, "-m", "anygpu", "train", "diffusion", "--epochs", str(epochs), "--out", folder,
                "--no-progress", *(["--limit", str(limit), "--width", "16", "--samples", "2", "--sample-steps", "2"]
                                   if limit else [])]
        job = _job(ranks, argv, timeout, env)
        log(f"$ {' '.join(f'{k}={v}' for k, v in (env or {}).items())} mpiexec -n {ranks} anygpu train diffusion "
            f"--epochs {epochs} -> exit {job.returncode}")
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


# MPICH settings tried by --mpi-sweep (MPI alone, host arrays); see docs/DISTRIBUTED.md.
MPI_VARIANTS = [
    {},
    {"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "recursive_doubling"},
    {"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "reduce_scatter_allgather"},
    {"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "ring"},
    {"MPIR_CVAR_DEVICE_COLLECTIVES": "none"},
    {"MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE": "16384"},  # 32768 and up abort in MPI_Init
    {"MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD": "1048576"},
    {"MPIR_CVAR_CH4_CMA_ENABLE": "0"},
    {"MPIR_CVAR_NOLOCAL": "1"},
]


def _env_arg(text: str | None) -> dict:
    return dict(item.split("=", 1) for item in text.split(",") if item) if text else {}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--quick", action="store_true", help="small sizes (for a software adapter)")
    parser.add_argument("--mpi-sweep", action="store_true", help="also time MPI alone under several MPICH settings")
    parser.add_argument("--mpi-env", help="K=V,... MPICH settings for every job (e.g. a sweep's winner)")
    parser.add_argument("--only", default="allreduce,steps,diffusion", help="which parts to run (steps = mlp,unet)")
    parser.add_argument("--lean", action="store_true",
                        help="leave out the step rows that compare with earlier forms (waiting after backward)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default="1,4,16,64,256", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=256, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=50, help=argparse.SUPPRESS)
    parser.add_argument("--bucket", type=float, default=25.0, help=argparse.SUPPRESS)
    parser.add_argument("--no-overlap", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-ddp", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-defer", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--compiled", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        sizes = [float(s) for s in args.sizes.split(",")]
        if args.worker == "allreduce":
            result = _worker_allreduce(sizes, repeats=10 if not args.quick else 3)
        elif args.worker == "mpi":
            result = _worker_mpi(sizes, repeats=20 if not args.quick else 3)
        else:
            result = _worker_step(args.worker, args.batch, args.steps, args.bucket, overlap=not args.no_overlap,
                                  ddp=not args.no_ddp, defer=not args.no_defer, compiled=args.compiled,
                                  warm_seconds=0.0 if args.quick else WARM_SECONDS)
        rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
        Path(f"{args.out}.{rank}.json").write_text(json.dumps(result))
        return 0

    def log(text: str) -> None:
        print(text, flush=True)

    quick = args.quick
    env = _env_arg(args.mpi_env)
    parts = set(args.only.split(","))
    sizes = "0.25,1" if quick else args.sizes
    steps = "2" if quick else "30"
    report: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "ranks": args.ranks,
                    "mpi_env": env}
    if args.mpi_sweep:
        report["mpi_sweep"] = []
        for variant in MPI_VARIANTS:
            got = _run_worker(args.ranks, "mpi", ["--sizes", "0.25,1,16"], 120, log, {**env, **variant})
            report["mpi_sweep"].append({"env": variant, "rows": got and got[0]["rows"]})
    if "allreduce" in parts:
        report["allreduce"] = _run_worker(args.ranks, "allreduce", ["--sizes", sizes], 300, log, env)
    report["steps"] = []
    # (model, batch per rank, bucket MiB, overlap with backward, deferred: recording goes on behind gates,
    #  compiled: 1 and 2 ranks both through anygpu.compile)
    small = 32 if quick else 256
    plan = [("mlp", small, 25.0, True, True, False), ("mlp", small, 25.0, True, False, False),
            ("mlp", small, 25.0, True, True, True), ("mlp", small, 1.0, True, True, False)]
    if not quick:
        plan += [("mlp", 1024, 25.0, True, True, False)]
    tiny = 1 if quick else 32
    plan += [("unet", tiny, 2.0, True, True, False), ("unet", tiny, 2.0, True, False, False),
             ("unet", tiny, 25.0, True, True, False), ("unet", tiny, 2.0, True, True, True),
             ("unet", tiny, 25.0, True, True, True)]
    if args.lean:  # without the rows that compare with earlier forms (waiting after backward, batch 1024)
        plan = [row for row in plan if row[4] and row[1] != 1024]
    baselines: dict = {}
    for model_name, batch, bucket, overlap, defer, compiled in [row for row in plan if parts & {"steps", row[0]}]:
        flags = (["--compiled"] if compiled else []) + (["--quick"] if quick else [])
        if (model_name, batch, compiled) not in baselines:
            one = _run_worker(1, model_name, ["--batch", str(batch), "--steps", steps, *flags], 300, log, env)
            baselines[(model_name, batch, compiled)] = one and one[0]
        one = baselines[(model_name, batch, compiled)]
        many = _run_worker(args.ranks, model_name, ["--batch", str(batch), "--steps", steps, "--bucket", str(bucket),
                                                    *([] if overlap else ["--no-overlap"]),
                                                    *([] if defer else ["--no-defer"]), *flags], 300, log, env)
        row = {"model": model_name, "batch_per_rank": batch, "bucket_mb": bucket, "overlap": overlap,
               "defer": defer, "compiled": compiled, "one": one,
               "many": many and many[0], "rank_adapter_indices": many and [r["adapter_index"] for r in many]}
        if one and many:
            row["speedup"] = many[0]["global_samples_per_s"] / one["global_samples_per_s"]
        report["steps"].append(row)
    if "diffusion" in parts:
        epochs, limit = (2, 64) if quick else (3, None)
        one = _diffusion(1, epochs, limit, 400, log, env)
        eager = _diffusion(1, epochs, limit, 400, log, {**env, "ANYGPU_COMPILE": "0"})
        many = _diffusion(args.ranks, epochs, limit, 400, log, env)
        report["diffusion"] = {"one": one, "one_eager": eager, "many": many,
                               "speedup": many["samples_per_second"] / one["samples_per_second"] if one and many else None,
                               "speedup_vs_eager": (many["samples_per_second"] / eager["samples_per_second"]
                                                    if eager and many else None)}

    log("\n| benchmark | 1 rank | %d ranks | speed-up | reduction per step: map / MPI / caller waits |" % args.ranks)
    log("| --- | ---: | ---: | ---: | --- |")
    names = {"mlp": "MLP 784-512-512-10 SGD step", "unet": "diffusion UNet (width 64) AdamW step"}
    for row in report["steps"]:
        if row.get("speedup"):
            stats = row["many"]["per_step"]
            log(f"| {names[row['model']]}, batch {row['batch_per_rank']}/rank, buckets {row['bucket_mb']:g} MiB"
                f"{'' if row['overlap'] else ', no overlap'}{'' if row['defer'] else ', waiting after backward'}"
                f"{', captured (both)' if row.get('compiled') else ''} | "
                f"{row['one']['global_samples_per_s']:.0f} samples/s ({row['one']['step_ms']:.2f} ms) | "
                f"{row['many']['global_samples_per_s']:.0f} samples/s ({row['many']['step_ms']:.2f} ms) | "
                f"{row['speedup']:.2f}x | {stats.get('map_ms', 0):.2f} / {stats.get('mpi_ms', 0):.2f} / "
                f"{stats.get('wait_ms', 0):.2f} ms |")
    d = report.get("diffusion")
    if d and d["speedup"]:
        log(f"| train diffusion, batch 32/rank (1 rank captured) | {d['one']['samples_per_second']:.0f} samples/s | "
            f"{d['many']['samples_per_second']:.0f} samples/s | {d['speedup']:.2f}x | |")
    if d and d["speedup_vs_eager"]:
        log(f"| train diffusion, batch 32/rank (1 rank eager, ANYGPU_COMPILE=0) | "
            f"{d['one_eager']['samples_per_second']:.0f} samples/s | {d['many']['samples_per_second']:.0f} samples/s | "
            f"{d['speedup_vs_eager']:.2f}x | |")
    if report.get("allreduce"):
        log("\n| all-reduce float32 | staged (map + MPI) | numpy path: read + MPI + write | MPI alone (host) |")
        log("| ---: | ---: | ---: | ---: |")
        for row in report["allreduce"][0]["rows"]:
            log(f"| {row['mib']:g} MiB | {row['seconds'] * 1e3:.2f} ms, {row['gb_per_s']:.2f} GB/s "
                f"({row['staged_map_seconds'] * 1e3:.2f} + {row['staged_mpi_seconds'] * 1e3:.2f}) | "
                f"{row['numpy_path_seconds'] * 1e3:.2f} ms ({row['numpy_read_seconds'] * 1e3:.2f} + "
                f"{row['numpy_mpi_seconds'] * 1e3:.2f} + {row['numpy_write_seconds'] * 1e3:.2f}) | "
                f"{row['mpi_seconds'] * 1e3:.2f} ms, {row['mpi_gb_per_s']:.2f} GB/s |")
        log("ranks' adapters: " + ", ".join(f"rank {r['rank']} ANYGPU_ADAPTER={r['adapter_env']} index "
                                           f"{r['adapter_index']}" for r in report["allreduce"]))
    if report.get("mpi_sweep"):
        log("\n| MPICH setting | 0.25 MiB | 1 MiB | 16 MiB (MPI alone, GB/s) |")
        log("| --- | ---: | ---: | ---: |")
        for entry in report["mpi_sweep"]:
            name = ", ".join(f"{k}={v}" for k, v in entry["env"].items()) or "default"
            cells = [f"{r['gb_per_s']:.2f}" for r in entry["rows"]] if entry["rows"] else ["failed"] * 3
            log(f"| {name} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
