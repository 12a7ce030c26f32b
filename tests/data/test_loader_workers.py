"""DataLoader(num_workers > 0): real worker processes, torch's order, seeding and errors;
persistent workers; the in-process fallback for a dataset that does not pickle."""

import os

import numpy as np
import pytest
import worker_datasets as wd

import anygpu as ag
from anygpu.utils.data import DataLoader, get_worker_info


def rows(loader):
    return [[np.asarray(field.numpy()) if isinstance(field, ag.Tensor) else field for field in batch]
            for batch in loader]


def test_workers_are_processes_and_keep_the_sampler_order():
    dataset = wd.Numbered(37)
    serial = rows(DataLoader(dataset, batch_size=5))
    loader = DataLoader(dataset, batch_size=5, num_workers=3, prefetch_factor=1)
    parallel = rows(loader)
    assert len(parallel) == len(serial) == 8
    for ours, main in zip(parallel, serial):
        np.testing.assert_array_equal(ours[0], main[0])
        np.testing.assert_array_equal(ours[1], main[1])
    # Batch k goes to worker k % 3; each worker is another process.
    workers = [set(b[2].tolist()) for b in parallel]
    assert workers == [{k % 3} for k in range(8)]
    pids = {int(p) for b in parallel for p in b[3].tolist()}
    assert len(pids) == 3 and os.getpid() not in pids
    assert set(serial[0][2].tolist()) == {-1} and get_worker_info() is None
    assert isinstance(parallel[0][0], np.ndarray) and parallel[0][0].dtype == np.float32


def test_worker_seeds_follow_the_generator():
    def draws(seed):
        loader = DataLoader(wd.Numbered(8), batch_size=2, num_workers=2,
                            generator=ag.Generator().manual_seed(seed))
        return np.concatenate([np.stack([b[4], b[5]]) for b in rows(loader)], axis=1)

    first = draws(5)
    np.testing.assert_array_equal(first, draws(5))
    assert not np.array_equal(first, draws(6))
    # The two workers draw different streams (seeds base + 0 and base + 1).
    assert not np.array_equal(first[:, :2], first[:, 2:4])


def test_tensors_made_in_workers_and_held_by_the_dataset_arrive_as_tensors():
    data = ag.tensor(np.arange(24, dtype=np.float32).reshape(8, 3))
    loader = DataLoader(wd.MadeOnDevice(data), batch_size=3, num_workers=2, shuffle=True,
                        generator=ag.Generator().manual_seed(0))
    seen = []
    for values, ids in loader:
        assert isinstance(values, ag.Tensor) and ids.dtype == ag.long
        np.testing.assert_array_equal(values.numpy(), np.arange(24, dtype=np.float32).reshape(8, 3)[ids.numpy()] * 2)
        seen += ids.numpy().tolist()
    assert sorted(seen) == list(range(8))
    # Without batching too (default_convert in the worker).
    samples = list(DataLoader(wd.MadeOnDevice(data), batch_size=None, num_workers=2))
    assert [int(i.item()) for _, i in samples] == list(range(8))


def test_an_error_in_a_worker_is_raised_naming_the_worker():
    loader = DataLoader(wd.Numbered(20, fail_at=13), batch_size=4, num_workers=2)
    got = []
    with pytest.raises(KeyError, match=r"(?s)worker process 1.*sample 13 is broken"):
        for batch in loader:
            got.append(batch)
    assert len(got) == 3  # the batches before the broken one, in order
    with pytest.raises(ValueError, match=r"(?s)worker process 0.*init of worker 0 failed"):
        list(DataLoader(wd.Numbered(4), batch_size=2, num_workers=2, worker_init_fn=wd.failing_init))


def test_worker_init_fn_and_persistent_workers():
    loader = DataLoader(wd.InitSeen(6), batch_size=None, num_workers=2, worker_init_fn=wd.record_pid,
                        persistent_workers=True)
    epochs = [list(loader) for _ in range(2)]
    for samples in epochs:
        assert all(init_pid == pid and pid != os.getpid() for init_pid, pid in samples)
    pids = [{pid for _, pid in samples} for samples in epochs]
    assert len(pids[0]) == 2 and pids[0] == pids[1]  # the same two processes both epochs
    # Leaving an epoch half-read: the next one starts afresh from the first sample.
    iterator = iter(loader)
    next(iterator)
    assert len(list(loader)) == 6
    loader._shutdown_workers()
    # Without persistent_workers every epoch starts new processes.
    fresh = DataLoader(wd.InitSeen(4), batch_size=None, num_workers=2, worker_init_fn=wd.record_pid)
    first, second = ({pid for _, pid in fresh} for _ in range(2))
    assert first.isdisjoint(second)


def test_iterable_dataset_split_by_get_worker_info():
    loader = DataLoader(wd.Shards(11), batch_size=2, num_workers=3)
    batches = [b.numpy().tolist() for b in loader]
    # torch's order: worker 0, 1, 2, 0, 1, 2, ... while each has data.
    assert batches == [[0, 3], [1, 4], [2, 5], [6, 9], [7, 10], [8]]


def test_unpicklable_dataset_falls_back_to_the_main_process_with_a_warning():
    class Local(wd.Numbered):  # a local class does not pickle
        pass

    with pytest.warns(UserWarning, match="cannot be pickled.*main process"):
        batches = rows(DataLoader(Local(6), batch_size=4, num_workers=2))
    assert [b[1].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5]]
    assert {p for b in batches for p in b[3].tolist()} == {os.getpid()}
    with pytest.warns(UserWarning, match="cannot be pickled"):
        DataLoader(wd.Numbered(3), num_workers=1, collate_fn=lambda b: b).__iter__()


def test_argument_errors_like_torch():
    with pytest.raises(ValueError, match="prefetch_factor"):
        DataLoader(wd.Numbered(3), prefetch_factor=2)
    with pytest.raises(ValueError, match="persistent_workers"):
        DataLoader(wd.Numbered(3), persistent_workers=True)
    with pytest.raises(ValueError, match="multiprocessing_context"):
        iter(DataLoader(wd.Numbered(3), num_workers=1, multiprocessing_context="nope"))


def test_timeout_dead_worker_and_out_of_order_delivery():
    with pytest.raises(RuntimeError, match="timed out after 0.3 seconds"):
        list(DataLoader(wd.Slow(4, delay=2.0), batch_size=None, num_workers=1, timeout=0.3))
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid\(s\) \d+\) exited unexpectedly"):
        list(DataLoader(wd.Slow(6, die_at=3), batch_size=2, num_workers=2))
    # in_order=False: every batch, in whatever order the workers finish them.
    batches = [b.numpy().tolist() for b in DataLoader(wd.Slow(8, delay=0.05), batch_size=2, num_workers=2,
                                                      in_order=False)]
    assert sorted(batches) == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_fork_workers_load_host_data_and_refuse_gpu_work():
    batches = rows(DataLoader(wd.Numbered(6), batch_size=3, num_workers=2, multiprocessing_context="fork"))
    assert [b[1].tolist() for b in batches] == [[0, 1, 2], [3, 4, 5]]
    assert {p for b in batches for p in b[3].tolist()}.isdisjoint({os.getpid()})
    data = ag.tensor(np.ones((4, 2), np.float32))
    with pytest.raises(RuntimeError, match="started by fork and cannot use the GPU"):
        list(DataLoader(wd.MadeOnDevice(data), batch_size=2, num_workers=1, multiprocessing_context="fork"))


def test_each_epoch_of_fresh_workers_sees_the_dataset_as_it_is_then():
    dataset = wd.Numbered(4)
    loader = DataLoader(dataset, batch_size=2, num_workers=1)
    assert [b[1].tolist() for b in rows(loader)] == [[0, 1], [2, 3]]
    dataset.n = 6  # torch's workers fork from the dataset of that epoch
    assert [b[1].tolist() for b in rows(loader)] == [[0, 1], [2, 3], [4, 5]]
