"""anygpu.distributed, DistributedDataParallel, DistributedSampler and `mpiexec -n 2 anygpu train`.

Each test starts an `mpiexec -n 2` job (tests/distributed/mpi.py bounds its time) whose workers
write their results as JSON; expected values come from numpy or from torch on one process.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from anygpu.io import checkpoint
from anygpu.utils.data import DistributedSampler

from . import mpi

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def data(rank, salt, shape=(3, 5)):  # as workers/collectives.py draws it
    return np.random.default_rng([salt, rank]).standard_normal(shape).astype(np.float32)


# --------------------------------------------------------------------------- collectives


@pytest.mark.parametrize("shared", ["1", "0"], ids=["shared-memory", "mpi-allreduce"])
def test_collectives_on_tensors(tmp_path, shared):
    """Both reduction paths: MPI shared memory between the ranks of one host (the default
    here) and MPI's all-reduce (what ranks on several hosts use)."""
    job = mpi.run_worker("collectives.py", str(tmp_path / "out"), timeout=120,
                         env={"ANYGPU_DIST_SHARED_MEMORY": shared})
    assert job.returncode == 0, job.stderr
    ranks = mpi.results(tmp_path / "out")
    inputs = [data(r, 1) for r in range(2)]
    expected = {"SUM": inputs[0] + inputs[1], "AVG": (inputs[0] + inputs[1]) / 2,
                "MAX": np.maximum(*inputs), "MIN": np.minimum(*inputs)}
    for rank, got in enumerate(ranks):
        assert (got["rank"], got["world"], got["local_rank"], got["local_world"]) == (rank, 2, rank, 2)
        assert got["initialized"] is True and got["initialized_after"] is False
        assert got["switch_interval"] == pytest.approx(2e-5) and got["switch_interval_after"] == pytest.approx(0.005)
        # Several ranks on one host: each opens an adapter chosen by local rank (one card here).
        assert got["adapter_env"] is not None and got["adapter_index"] == int(got["adapter_env"])
        for op, value in expected.items():
            np.testing.assert_allclose(got[f"all_reduce_{op}"], value, rtol=1e-6, atol=1e-6)
            assert got[f"all_reduce_{op}_in_place"]
            assert got[f"all_reduce_{op}"] == ranks[0][f"all_reduce_{op}"]  # the same bits on every rank
        assert got["all_reduce_int"] == (np.arange(7) * 2 + np.arange(7) * 3).tolist()
        assert "AVG" in got["avg_int_error"] and "int32" in got["avg_int_error"]
        np.testing.assert_array_equal(got["broadcast"], data(1, 2, (4, 3)))
        for r in range(2):
            np.testing.assert_array_equal(got["all_gather"][r], data(r, 3, (2, 3)))
        np.testing.assert_allclose(got["reduce_scatter"], data(0, 4 + rank, (5,)) + data(1, 4 + rank, (5,)),
                                   rtol=1e-6, atol=1e-6)
        assert got["strings"][0].startswith("rank 0 on ") and got["strings"][1].startswith("rank 1 on ")
        expected_reduce = data(0, 6) + data(1, 6) if rank == 1 else data(0, 6)  # rank 0 keeps its own
        np.testing.assert_allclose(got["reduce"], expected_reduce, rtol=1e-6, atol=1e-6)
        if rank == 0:
            np.testing.assert_array_equal(got["gather"], [data(r, 7, (2, 2)) for r in range(2)])
        else:
            assert got["gather"] is None
        np.testing.assert_array_equal(got["scatter"], data(rank, 8, (3,)))
        assert got["backend"] == "mpi"
        np.testing.assert_array_equal(got["all_gather_into_tensor"],
                                      np.concatenate([data(r, 9, (2, 3)) for r in range(2)]))
        np.testing.assert_allclose(got["reduce_scatter_tensor"],
                                   (data(0, 10, (4, 2)) + data(1, 10, (4, 2)))[2 * rank:2 * rank + 2],
                                   rtol=1e-6, atol=1e-6)
        assert got["all_gather_object"] == [{"rank": r, "name": f"r{r}", "values": [r, 1.5]} for r in range(2)]
        assert got["broadcast_object_list"] == ["from 1", {"epoch": 8}, None]
        assert got["gather_object"] == ([["rank", 0], ["rank", 1]] if rank == 0 else None)  # JSON: tuples as lists
        assert got["scatter_object_list"] == [{"for": rank}]
        assert "world_size = 2 entries, got 1" in got["object_list_error"]
        assert got["new_group_is_world"] is True
        assert "a group of ranks [0] is not supported" in got["subgroup_error"]
        assert "ranks must be in [0, 2), got [0, 2]" in got["new_group_error"]
        assert "world_size = 2 times the input's 2" in got["into_tensor_error"]
        assert "dst must be a rank in [0, 2)" in got["reduce_error"]
        assert "needs gather_list" in got["gather_error"]
        assert "only rank" in got["scatter_error"] or "needs scatter_list" in got["scatter_error"]
        assert got["init_sync_false_keeps_own"] is True
        assert got["synced_weight"] == ranks[0]["synced_weight"]
        assert "dim must be 0" in got["dim_error"]
    # DistributedSampler with the group's world size and rank: disjoint shards covering everything
    shards = [set(got["sampler"]) for got in ranks]
    assert len(ranks[0]["sampler"]) == len(ranks[1]["sampler"]) == 12
    assert shards[0] | shards[1] == set(range(23))


def test_all_reduce_on_three_ranks(tmp_path):
    """Three ranks of one host: the shared-memory reduction sums every slot in rank order,
    large tensors in pieces on three copy threads per rank (the same bits as one piece)."""
    job = mpi.run_worker("three_ranks.py", str(tmp_path / "out"), n=3, timeout=120,
                         env={"ANYGPU_DIST_COPY_THREADS": "3"})
    assert job.returncode == 0, job.stderr
    ranks = mpi.results(tmp_path / "out", n=3)
    inputs = [data(r, 5, (7, 3)) for r in range(3)]
    inputs[1][0, 0], inputs[2][1, 1] = np.nan, np.inf
    for got in ranks:
        np.testing.assert_allclose(got["sum"], (inputs[0] + inputs[1]) + inputs[2], rtol=1e-6)
        np.testing.assert_array_equal(got["max"], np.maximum(np.maximum(inputs[0], inputs[1]), inputs[2]))
        np.testing.assert_array_equal(got["min_int"], [-3, -2, -3])
        np.testing.assert_array_equal(got["sum"], ranks[0]["sum"])  # the same bits on every rank
    big = [data(r, 9, (300007,)) for r in range(3)]
    big[1][1000], big[2][2000] = np.nan, -np.inf
    for rank in range(3):
        got = np.load(tmp_path / f"out.{rank}.big.npy")
        np.testing.assert_array_equal(got, (big[0] + big[1]) + big[2])


def test_without_a_process_group():
    import anygpu.distributed as dist

    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="init_process_group"):
        dist.get_rank()
    for wrong in ("ucc", "nccl,mpi2", 3):  # torch's "nccl"/"gloo" mean MPI here; others are refused
        with pytest.raises(ValueError, match="backend must be 'mpi'"):
            dist.init_process_group(wrong)
    with pytest.raises(RuntimeError, match="init_process_group"):
        DistributedSampler(range(5))


def test_backend_names_of_torch_are_accepted():
    from anygpu.distributed.process_group import _known_backend

    for name in ("mpi", "nccl", "gloo", "NCCL", "cpu:gloo,cuda:nccl"):
        assert _known_backend(name), name
    for name in ("", "ucc", "cuda:ucc", None, 1):
        assert not _known_backend(name), name


@pytest.mark.parametrize("launcher, expected", [
    ({"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
     {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}),
    ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}),
    ({"PMI_RANK": "3", "PMI_SIZE": "4"}, {"RANK": "3", "WORLD_SIZE": "4"}),  # local rank unknown: left to init
    ({"PMI_RANK": "0", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2", "LOCAL_RANK": "5"},
     {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}),  # what the user set stays
    ({}, {}),  # not under a launcher: nothing
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}, {}),  # a batch job's plain process is no MPI rank
])
def test_torchrun_variables_from_the_mpi_launcher(monkeypatch, launcher, expected):
    from anygpu.distributed.process_group import export_launcher_env

    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "PMIX_SIZE", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in launcher.items():
        monkeypatch.setenv(name, value)
    environ = dict(launcher)
    assert export_launcher_env(environ) == expected
    assert all(environ[name] == value for name, value in expected.items())


def test_without_mpi4py_the_error_says_what_to_install(monkeypatch):
    import anygpu.distributed as dist

    monkeypatch.setitem(sys.modules, "mpi4py", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'anygpu\[dist\]'"):
        dist.init_process_group("mpi")
    assert not dist.is_initialized()


# --------------------------------------------------------------------------- DistributedSampler


@pytest.mark.parametrize("n, replicas, drop_last", [(23, 2, False), (23, 3, False), (23, 3, True), (4, 3, False),
                                                    (24, 4, True)])
def test_distributed_sampler_shards(n, replicas, drop_last):
    samplers = [DistributedSampler(range(n), num_replicas=replicas, rank=r, seed=7, drop_last=drop_last)
                for r in range(replicas)]
    shards = [list(s) for s in samplers]
    per_rank = (n // replicas) if drop_last else -(-n // replicas)
    assert all(len(shard) == per_rank == len(s) for shard, s in zip(shards, samplers))
    flat = [i for shard in shards for i in shard]
    if drop_last:
        assert len(set(flat)) == len(flat)  # disjoint
    else:
        assert set(flat) == set(range(n))  # everything, padded with repeats only up to a multiple
        assert len(flat) - len(set(flat)) == per_rank * replicas - n
    for s in samplers:
        s.set_epoch(1)
    again = [list(s) for s in samplers]
    flat_again = [i for shard in again for i in shard]
    assert len(flat_again) == len(flat) and (drop_last or set(flat_again) == set(range(n)))
    if n > 5:
        assert again != shards  # another permutation, the same on every rank
    ordered = [list(DistributedSampler(range(n), replicas, r, shuffle=False, drop_last=drop_last))
               for r in range(replicas)]
    assert ordered[0][:2] == [0, replicas]


@pytest.mark.parametrize("n, replicas, drop_last, seed", [(23, 2, False, 7), (23, 3, True, 0), (4, 3, False, 11),
                                                          (1000, 4, False, 3)])
def test_distributed_sampler_shards_are_torchs(n, replicas, drop_last, seed):
    """The same indices on the same ranks as torch's DistributedSampler, epoch after epoch."""
    torch_data = pytest.importorskip("torch.utils.data")
    for epoch in (0, 1, 5):
        for rank in range(replicas):
            ours = DistributedSampler(range(n), num_replicas=replicas, rank=rank, seed=seed, drop_last=drop_last)
            theirs = torch_data.DistributedSampler(range(n), num_replicas=replicas, rank=rank, seed=seed,
                                                   drop_last=drop_last)
            ours.set_epoch(epoch)
            theirs.set_epoch(epoch)
            assert list(ours) == list(theirs), (epoch, rank)


def test_distributed_sampler_bad_arguments():
    with pytest.raises(ValueError, match=r"rank must be in \[0, 2\), got 2"):
        DistributedSampler(range(5), num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="num_replicas must be a positive integer"):
        DistributedSampler(range(5), num_replicas=0, rank=0)


# --------------------------------------------------------------------------- DDP


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp") / "out"
    job = mpi.run_worker("ddp_equivalence.py", str(out), timeout=240)
    assert job.returncode == 0, job.stderr
    return mpi.results(out)


@pytest.mark.parametrize("variant", ["sgd-even-plain-sync", "adamw-even-plain-sync", "sgd-uneven-weighted-sync",
                                     "adamw-uneven-weighted-nosync"])
def test_ddp_equals_one_process_with_the_whole_batch(ddp_runs, variant):
    rank0, rank1 = ddp_runs[0][variant], ddp_runs[1][variant]
    # rank 0's initial parameters were broadcast (the ranks were seeded differently)
    assert rank0["initial"] == rank1["initial"]
    for name, reference in rank0["torch"].items():
        assert rank0["final"][name] == rank1["final"][name]  # replicas stay identical, bit for bit
        np.testing.assert_allclose(rank0["final"][name], reference, rtol=1e-5, atol=1e-6, err_msg=name)
        assert np.abs(np.asarray(reference) - np.asarray(rank0["initial"][name])).max() > 1e-3  # it trained


def test_backward_does_not_wait_for_the_reduction(ddp_runs):
    """Each bucket's upload is recorded behind a gate: backward returns with them held
    (the optimizer step is recorded before the sums arrive), and the results above still
    equal one process."""
    for rank in (0, 1):
        for variant, run in ddp_runs[rank].items():
            if "held" in run:  # the eager variants
                assert run["buckets"] == 2  # bucket_cap_mb=0.0005: (bias 2, weight 2) and (bias 1, weight 1)
                assert run["held"] == [2] * 6, (rank, variant)


@pytest.mark.parametrize("compiled, eager", [("sgd-even-plain-compiled", "sgd-even-plain-sync"),
                                             ("adamw-uneven-weighted-compiled", "adamw-uneven-weighted-nosync")])
def test_compiled_ddp_step_replays_and_equals_eager(ddp_runs, compiled, eager):
    """anygpu.compile of a whole DDP step (forward, backward with bucket exchanges, optimizer):
    replayed after the recordings, with the exchanges started and awaited at their places,
    and the same parameters as one process with the whole batch."""
    for rank in (0, 1):
        run = ddp_runs[rank][compiled]
        assert run["replayed"] >= 2, run["reason"]
        for name, value in run["final"].items():
            assert value == ddp_runs[0][compiled]["final"][name]  # replicas identical
            np.testing.assert_allclose(value, ddp_runs[0][compiled]["torch"][name], rtol=1e-5, atol=1e-6,
                                       err_msg=name)
    if compiled.startswith("sgd"):  # the same kernels as the eager run: the same bits
        assert ddp_runs[0][compiled]["final"] == ddp_runs[0][eager]["final"]


@pytest.mark.parametrize("mode", ["destroy", "exit", "exit-again"])
def test_leaving_right_after_backward_finishes_the_exchanges(tmp_path, mode):
    """A script may end (or destroy the group) right after backward, its bucket exchanges
    still running: both ranks must finish them and exit cleanly (before the fix, a rank that
    finalized MPI mid-all-reduce crashed or left the other hanging, about every other run).
    Two copy threads per rank: at exit, concurrent.futures refuses new work before the exit
    hook runs (the 2 MiB bucket is then copied in two pieces on the exchange's own thread)."""
    job = mpi.run_worker("exit_after_backward.py", str(tmp_path / "out"), mode.split("-")[0], timeout=120,
                         env={"ANYGPU_DIST_COPY_THREADS": "2"})
    assert job.returncode == 0, job.stderr[-3000:]
    for got in mpi.results(tmp_path / "out"):
        assert got["held_after_backward"] > 0  # the exchanges really were in flight
        if mode == "destroy":
            assert got["held_after_destroy"] == 0


def test_buckets_follow_backward_order_and_the_last_one_is_small():
    """Buckets in the order backward completes them (last layers first), each parameter once
    at contiguous offsets; the one completed last (the first layers) is cut at
    LAST_BUCKET_BYTES, the others at the cap."""
    from types import SimpleNamespace

    from anygpu import nn
    from anygpu.nn.parallel import LAST_BUCKET_BYTES, DistributedDataParallel

    model = nn.Sequential(*[nn.Linear(300, 300) for _ in range(8)])  # 360 KB per layer's weight
    params = list(model.parameters())
    fake = SimpleNamespace(_params=params)
    buckets = DistributedDataParallel._make_buckets(fake, 4 << 20)
    order = [p for bucket in buckets for p, _ in bucket]
    assert [id(p) for p in order] == [id(p) for p in reversed(params)]
    for bucket in buckets:
        offsets = [offset for _, offset in bucket]
        assert offsets == list(np.cumsum([0] + [p.numel() for p, _ in bucket[:-1]]))
    sizes = [sum(p.numel() for p, _ in bucket) * 4 for bucket in buckets]
    assert sizes[-1] <= LAST_BUCKET_BYTES < sizes[0] <= 4 << 20
    assert [len(b) for b in buckets] == [12, 4]  # 6 layers, then 2 layers (722 KB; a third would pass 1 MiB)
    tiny = DistributedDataParallel._make_buckets(fake, 1000.0)  # under LAST_BUCKET_BYTES: every bucket at the cap
    assert len(tiny) == 16


def test_uneven_split_needs_weighting(ddp_runs):
    """Plain averaging of a 3-sample and a 9-sample gradient is not the 12-sample gradient."""
    plain = ddp_runs[0]["sgd-uneven-plain-sync"]
    worst = max(np.abs(np.asarray(plain["final"][k]) - np.asarray(plain["torch"][k])).max() for k in plain["torch"])
    assert worst > 1e-3


def test_ddp_state_dict_keys_are_torchs(ddp_runs):
    run = ddp_runs[0]["sgd-even-plain-sync"]
    assert run["keys"] == ["module." + key for key in run["module_keys"]]
    assert run["module_keys"] == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_throughput_balance_gives_the_slow_rank_less(tmp_path):
    job = mpi.run_worker("balance.py", str(tmp_path / "out"), timeout=180)
    assert job.returncode == 0, job.stderr
    ranks = mpi.results(tmp_path / "out")
    splits = ranks[0]["splits"]
    assert splits == ranks[1]["splits"]
    assert splits[0] == [8, 8]  # equal until measured
    assert all(sum(split) == 16 for split in splits)
    assert splits[-1][0] > splits[-1][1], splits  # rank 1 sleeps per sample: it gets fewer
    assert ranks[0]["speeds"][0] > ranks[0]["speeds"][1]
    for name, reference in ranks[0]["torch"].items():
        assert ranks[0]["final"][name] == ranks[1]["final"][name]
        np.testing.assert_allclose(ranks[0]["final"][name], reference, rtol=1e-5, atol=1e-6, err_msg=name)


# --------------------------------------------------------------------------- faults


def test_a_killed_rank_ends_the_job():
    started = time.monotonic()
    job = mpi.run_worker("faults.py", "killed", timeout=90)
    assert job.returncode != 0
    assert "finished" not in job.stdout
    assert "Killed" in job.stdout + job.stderr  # the launcher names the rank's end
    assert time.monotonic() - started < 90


def test_a_rank_that_leaves_makes_the_others_fail_within_the_timeout(tmp_path):
    report = tmp_path / "error"
    job = mpi.run_worker("faults.py", "leaves", str(report), timeout=90, env={"ANYGPU_DIST_TIMEOUT": "2"})
    assert job.returncode != 0
    assert "finished" not in job.stdout
    # Read from the worker's file: MPICH's launcher forwards stderr asynchronously and may
    # end the job before all of it is out (process_group.ABORT_GRACE_S narrows that window).
    text = Path(f"{report}.0").read_text()
    assert text.startswith("DistributedError: ") and "did not answer within 2 s (rank 0 of 2)" in text


# --------------------------------------------------------------------------- CLI


def _train(out: Path, *extra: str, n: int = 2, timeout: float = 240.0):
    argv = [sys.executable, "-m", "anygpu", "train", "digits", "--limit", "48", "--batch-size", "8",
            "--out", str(out), "--no-progress", *extra]
    return mpi.run(argv, n=n, timeout=timeout)


def _weights(path: Path) -> dict:
    return checkpoint.load(path)


def test_cli_trains_data_parallel_and_equals_one_process(tmp_path):
    job = _train(tmp_path / "two", "--epochs", "2")
    assert job.returncode == 0, job.stderr
    assert job.stdout.count("data-parallel on 2 ranks (MPI): rank 0 ") == 1  # rank 0 alone prints
    assert "global batch 16" in job.stdout
    metrics = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["global_batch_size"] == 16
    assert metrics["samples_per_second"] > 0 and metrics["rank_batch_sizes"] == "8,8"
    assert metrics["replayed_steps"] > 0  # the data-parallel step was captured and replayed
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == [
        "checkpoint.safetensors", "loss.png", "metrics.json", "model.safetensors"]
    # One process with the global batch of 16 walks the same batches: the same weights.
    from anygpu.cli import main
    assert main(["train", "digits", "--limit", "48", "--batch-size", "16", "--epochs", "2",
                 "--out", str(tmp_path / "one"), "--no-progress"]) == 0
    two, one = _weights(tmp_path / "two" / "model.safetensors"), _weights(tmp_path / "one" / "model.safetensors")
    assert two.keys() == one.keys()
    for name in one:
        np.testing.assert_allclose(two[name], one[name], rtol=1e-4, atol=1e-5, err_msg=name)
    history = json.loads((tmp_path / "one" / "metrics.json").read_text())["history"]
    assert metrics["train_loss"] == pytest.approx(history[-1]["train_loss"], rel=1e-4)


def _pids_of_rank(launcher: int, rank: int) -> list[int]:
    """Descendants of the mpiexec we started that MPI made rank `rank` (found through /proc)."""
    parents, environs = {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                environs[int(entry.name)] = (entry / "environ").read_bytes().split(b"\0")
            except (OSError, ValueError, IndexError):
                continue

    def descends(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == launcher:
                return True
        return False

    return [pid for pid, environ in environs.items()
            if f"PMI_RANK={rank}".encode() in environ and descends(pid)]


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the rank's process through /proc")
def test_cli_killed_rank_stops_the_job_and_resume_continues(tmp_path):
    import subprocess

    out = tmp_path / "run"
    argv = [mpi.mpiexec(), "-n", "2", sys.executable, "-m", "anygpu", "train", "digits", "--limit", "48",
            "--batch-size", "8", "--epochs", "200", "--out", str(out), "--no-progress"]
    env = {**os.environ, "PYTHONPATH": mpi.python_path()}
    job = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not (out / "metrics.json").exists() and time.monotonic() < deadline and job.poll() is None:
            time.sleep(0.2)
        if not (out / "metrics.json").exists():
            job.kill()
            pytest.fail(f"no epoch finished (exit {job.poll()}):\n{job.communicate()[1]}")
        victims = _pids_of_rank(job.pid, 1)
        assert len(victims) == 1
        os.kill(victims[0], signal.SIGKILL)
        stdout, stderr = job.communicate(timeout=60)  # the others must stop, not hang
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
    assert job.returncode != 0
    assert "Killed" in stdout + stderr
    saved = checkpoint.load_with_metadata(out / "checkpoint.safetensors")[1]  # still valid (signature checked)
    epoch = int(saved["epoch"])
    resumed = _train(out, "--resume", "--epochs", str(epoch + 1))
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming at epoch {epoch + 1}" in resumed.stdout
    assert json.loads((out / "metrics.json").read_text())["epoch"] == epoch + 1


def test_balance_needs_several_ranks(capsys, tmp_path):
    from anygpu.cli import main
    code = main(["train", "digits", "--limit", "8", "--epochs", "1", "--out", str(tmp_path), "--balance", "throughput"])
    assert code == 2
    assert "--balance: needs several ranks" in capsys.readouterr().err


def test_grad_ready_hooks_see_each_final_gradient_once_last_layer_first():
    """DistributedDataParallel starts a bucket's reduction from Tensor.backward's gradient-ready
    hook: each leaf is reported once, with its final (accumulated) gradient, the last layer first."""
    import anygpu as ag
    from anygpu import nn
    from anygpu.tensor import grad_ready_hooks

    ag.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    params = list(model.parameters())
    x = ag.tensor(np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32))
    (model(x) ** 2).sum().backward()
    expected = [p.grad.numpy().copy() for p in params]
    seen = []
    grad_ready_hooks.append(lambda leaf: seen.append((leaf, leaf.grad.numpy().copy())))
    try:
        (model(x) ** 2).sum().backward()  # accumulates: every gradient doubles
    finally:
        grad_ready_hooks.pop()
    order = [next(i for i, p in enumerate(params) if p is leaf) for leaf, _ in seen]
    assert sorted(order) == list(range(len(params)))
    assert min(order[:2]) >= 2 and max(order[2:]) < 2  # the second Linear's weight and bias first
    for index, (_, grad) in zip(order, seen):
        np.testing.assert_allclose(grad, 2 * expected[index], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(params[index].grad.numpy(), 2 * expected[index], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("how", ["env", "argument"])
def test_a_world_not_started_by_mpi_is_refused(how):
    """torchrun / torch.multiprocessing start processes MPI does not know: each would train
    alone as a world of 1. init_process_group says to use mpiexec instead (before touching MPI)."""
    import subprocess
    import sys

    code = ("import anygpu.distributed as d\n"
            + ("d.init_process_group('gloo')\n" if how == "env" else "d.init_process_group('gloo', world_size=3, rank=0)\n"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "MV2_", "PMIX_"))}
    env.update(PYTHONPATH=mpi.python_path(), WORLD_SIZE="2" if how == "env" else "", RANK="0", LOCAL_RANK="0")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode != 0
    expected = "2" if how == "env" else "3"
    assert f"mpiexec -n {expected} python" in done.stderr and "RuntimeError" in done.stderr


def test_copy_threads_follow_the_cores_per_rank_and_the_variable(monkeypatch):
    from anygpu.distributed import process_group

    monkeypatch.delenv("ANYGPU_DIST_COPY_THREADS", raising=False)
    monkeypatch.setattr(process_group.os, "sched_getaffinity", lambda pid: set(range(32)), raising=False)
    assert process_group._copy_threads(2) == 8  # 16 cores per rank, at most 8
    assert process_group._copy_threads(8) == 4
    assert process_group._copy_threads(64) == 1
    monkeypatch.setenv("ANYGPU_DIST_COPY_THREADS", "3")
    assert process_group._copy_threads(2) == 3
    monkeypatch.setenv("ANYGPU_DIST_COPY_THREADS", "many")
    with pytest.raises(ValueError, match="ANYGPU_DIST_COPY_THREADS"):
        process_group._copy_threads(2)
