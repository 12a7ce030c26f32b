"""DistributedDataParallel communication hooks (register_comm_hook, GradBucket, the default
hooks) and anygpu.futures, against torch's semantics and torch's fp16 hook math.

The DDP tests start one `mpiexec -n 2` job (workers/comm_hooks.py); the Future and
GradBucket tests run in this process."""

import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import anygpu as ag
from anygpu.distributed import GradBucket
from anygpu.futures import Future, collect_all, wait_all

from . import mpi

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def hook_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("hooks") / "out"
    job = mpi.run_worker("comm_hooks.py", str(out), timeout=240)
    assert job.returncode == 0, job.stderr[-3000:]
    return mpi.results(out)


def _max_difference(a: dict, b: dict) -> float:
    return max(float(np.abs(np.asarray(a[key]) - np.asarray(b[key])).max()) for key in a)


def test_fp16_compress_hook_equals_torchs_fp16_math(hook_runs):
    """Several SGD-momentum steps with fp16_compress_hook give torch's parameters (torch CPU:
    each rank's gradient rounded to float16, halved in float16, summed in float16); the
    replicas stay identical, and the result really differs from float32 averaging."""
    fp16, plain = hook_runs[0]["fp16"], hook_runs[0]["none"]
    assert fp16["final"] == hook_runs[1]["fp16"]["final"]
    reference = hook_runs[0]["torch-fp16"]
    for key, value in reference.items():
        np.testing.assert_allclose(fp16["final"][key], value, rtol=1e-5, atol=5e-6, err_msg=key)
    assert _max_difference(fp16["final"], plain["final"]) > 2e-5  # float16 rounding is visible
    assert _max_difference(fp16["final"], fp16["initial"]) > 1e-2  # it trained
    for variant in ("fp16-wrapper", "spy", "compiled-fp16"):  # the same hook math: the same bits
        assert hook_runs[0][variant]["final"] == fp16["final"], variant


def test_fp16_hook_bucket_by_bucket_is_exactly_torchs_rounding(hook_runs):
    """What fp16_compress_hook returns for each bucket and step, from both ranks' inputs:
    float16(g0) / 2 + float16(g1) / 2 in float16 arithmetic, bit for bit."""
    seen = [hook_runs[rank]["spy"]["seen"] for rank in (0, 1)]
    assert len(seen[0]) == len(seen[1]) == 2 * 6  # two buckets, six steps
    half = np.float16(2)
    for mine, theirs in zip(*seen):
        assert mine["index"] == theirs["index"]
        a = np.asarray(mine["input"], np.float32).astype(np.float16) / half
        b = np.asarray(theirs["input"], np.float32).astype(np.float16) / half
        expected = (a + b).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(mine["output"], np.float32), expected)
        np.testing.assert_array_equal(np.asarray(theirs["output"], np.float32), expected)


def test_grad_bucket_methods_in_the_hook(hook_runs):
    seen = hook_runs[0]["spy"]["seen"][:2]
    assert [(s["index"], s["is_last"]) for s in seen] == [(0, False), (1, True)]
    assert [s["params"] for s in seen] == [[3, 2], [1, 0]]  # last layer first (weight, bias order as DDP packs)
    assert all(s["gradients_match"] for s in seen)
    assert [len(s["input"]) for s in seen] == [13 * 5 + 5, 7 * 13 + 13]


@pytest.mark.parametrize("variant", ["sum-divide", "then", "list", "python-allreduce"])
def test_custom_hooks_equal_the_default(hook_runs, variant):
    """A hook that all-reduces and divides (in place, through .then, returning a list of one
    Tensor, or torch's allreduce_hook run as Python) gives DDP's own averages, bit for bit."""
    for rank in (0, 1):
        assert hook_runs[rank][variant]["final"] == hook_runs[0]["none"]["final"], (rank, variant)


def test_allreduce_hook_keeps_the_overlapped_path(hook_runs):
    """allreduce_hook is DDP's own reduction: the buckets are reduced while backward runs and
    their uploads are still held behind gates after it, as with no hook; a step with it is
    captured and replayed. A custom hook runs at the end of backward (nothing held) and a
    captured step with it stays eager, saying why."""
    for rank in (0, 1):
        runs = hook_runs[rank]
        assert runs["none"]["buckets"] == runs["allreduce"]["buckets"] == 2
        assert runs["none"]["held"] == runs["allreduce"]["held"] == [2] * 6
        assert runs["fp16"]["held"] == [0] * 6
        assert runs["allreduce"]["final"] == runs["none"]["final"]
        assert runs["compiled-allreduce"]["replayed"] >= 2, runs["compiled-allreduce"]["reason"]
        np.testing.assert_allclose(np.concatenate([np.ravel(v) for v in runs["compiled-allreduce"]["final"].values()]),
                                   np.concatenate([np.ravel(v) for v in runs["none"]["final"].values()]),
                                   rtol=1e-6, atol=1e-7)
        assert runs["compiled-fp16"]["replayed"] == 0
        assert "communication hook" in runs["compiled-fp16"]["reason"]


def test_register_comm_hook_errors_as_torch(hook_runs):
    found = hook_runs[0]["errors"]
    assert found["twice"] == "register_comm_hook or register_builtin_comm_hook can only be called once."
    assert found["not_callable"] == "Communication hook must be callable."
    assert "weight_by_samples" in found["weighted"]
    assert "bucket's 174 elements, got a Tensor of shape (2,)" in found["wrong_size"]
    assert "must return a Future" in found["no_future"]
    assert found["late_calls"] == [0]  # registered after a backward: used from the next one, as torch


# --------------------------------------------------------------------------- in this process


def test_future_result_wait_value_then():
    future = Future()
    assert not future.done()
    with pytest.raises(RuntimeError, match="not completed"):
        future.value()
    chained = future.then(lambda done: done.value() + 1)
    twice = chained.then(lambda done: done.wait() * 2)
    seen = []
    future.add_done_callback(lambda done: seen.append(done.value()))
    future.set_result(3)
    assert future.done() and future.wait() == 3 and future.value() == 3
    assert chained.wait() == 4 and twice.wait() == 8 and seen == [3]
    with pytest.raises(RuntimeError, match="only be marked completed once"):
        future.set_result(5)
    late = future.then(lambda done: done.value() - 1)  # on a completed Future: runs at once
    assert late.done() and late.value() == 2


def test_future_errors_and_threads():
    failed = Future()
    failed.set_exception(ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        failed.wait()
    with pytest.raises(RuntimeError, match="error when running the callback: ValueError: boom"):
        failed.then(lambda done: done.value()).wait()
    source = Future()
    chained = source.then(lambda done: 1 / 0)  # the callback fails once the source completes
    source.set_result(1)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        chained.wait()
    with pytest.raises(ValueError, match="expected an exception"):
        Future().set_exception("not an exception")
    pending = Future()
    threading.Timer(0.05, pending.set_result, args=("late",)).start()
    assert pending.wait() == "late"  # blocks until another thread completes it
    futures = [Future() for _ in range(3)]
    combined = collect_all(futures)
    for index, item in enumerate(futures):
        assert not combined.done()
        item.set_result(index)
    assert combined.wait() == futures and wait_all(futures) == [0, 1, 2]
    assert collect_all([]).wait() == []
    assert Future[ag.Tensor] is not None  # torch.futures.Future[torch.Tensor] in annotations


def test_grad_bucket_alone():
    from anygpu import nn

    model = nn.Linear(3, 2)
    params = list(model.parameters())
    flat = ag.tensor(np.arange(8, dtype=np.float32))
    bucket = GradBucket(1, 2, flat, params[::-1], [0, 2])  # bias (2), then weight (2, 3)
    assert bucket.index() == 1 and bucket.is_last() and bucket.buffer() is flat
    assert [p is q for p, q in zip(bucket.parameters(), params[::-1])] == [True, True]
    gradients = bucket.gradients()
    assert [g.shape for g in gradients] == [(2,), (2, 3)]
    np.testing.assert_array_equal(gradients[1].numpy(), np.arange(2, 8).reshape(2, 3))
    half = flat.to(ag.float16)
    bucket.set_buffer(half)
    assert bucket.buffer().dtype == ag.float16
    with pytest.raises(ValueError, match="GradBucket.set_buffer: expected a Tensor of 8 elements"):
        bucket.set_buffer(ag.zeros(3))


def test_torch_module_paths_resolve_through_the_drop_in(tmp_path):
    """`torch.distributed.algorithms.ddp_comm_hooks...`, `torch.futures.Future[torch.Tensor]`,
    `torch.distributed.GradBucket` and `dist.group.WORLD` as a torch script names them."""
    script = tmp_path / "paths.py"
    script.write_text(
        "import torch, torch.distributed as dist\n"
        "import torch.distributed.algorithms.ddp_comm_hooks.default_hooks as default_hooks\n"
        "from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as default\n"
        "from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook\n"
        "def hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:\n"
        "    return default.allreduce_hook(state, bucket)\n"
        "assert default is default_hooks and fp16_compress_hook is default.fp16_compress_hook\n"
        "assert not hasattr(default, 'bf16_compress_hook')\n"
        "fut = torch.futures.Future(); fut.set_result(torch.ones(2))\n"
        "print('ok', type(fut).__module__, dist.group.WORLD is not None, dist.GroupMember.WORLD is dist.group.WORLD)\n")
    shim = Path(__file__).parents[1] / "compat" / "torch_shim.py"
    done = subprocess.run([sys.executable, str(shim), "anygpu", str(script)], capture_output=True, text=True,
                          timeout=120, env={**__import__("os").environ, "PYTHONPATH": mpi.python_path()})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok anygpu.futures True True"
