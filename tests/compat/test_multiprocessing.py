"""anygpu.multiprocessing (torch.multiprocessing): the standard library's names and spawn."""

import multiprocessing
import os

import pytest

import anygpu.multiprocessing as mp


def _write(index, folder, fail_on):
    if index == fail_on:
        raise ValueError(f"process {index} failed on purpose")
    with open(os.path.join(folder, f"{index}.txt"), "w") as handle:
        handle.write(str(index * 10))


def test_standard_names_are_there():
    assert mp.Queue is multiprocessing.Queue and mp.get_context is multiprocessing.get_context
    assert callable(mp.spawn) and "spawn" in mp.__all__


def test_spawn_runs_fn_with_the_index_and_args(tmp_path):
    assert mp.spawn(_write, args=(str(tmp_path), -1), nprocs=3) is None
    assert sorted(p.read_text() for p in tmp_path.iterdir()) == ["0", "10", "20"]


def test_spawn_raises_what_a_process_raised(tmp_path):
    with pytest.raises(mp.ProcessRaisedException, match="process 1 failed on purpose") as caught:
        mp.spawn(_write, args=(str(tmp_path), 1), nprocs=2)
    assert caught.value.error_index == 1


def test_spawn_without_join_gives_a_context(tmp_path):
    context = mp.spawn(_write, args=(str(tmp_path), -1), nprocs=2, join=False)
    assert len(context.pids()) == 2
    while not context.join():
        pass
    assert len(list(tmp_path.iterdir())) == 2


def test_spawn_bad_arguments():
    with pytest.raises(ValueError, match="nprocs"):
        mp.spawn(_write, nprocs=0)
    with pytest.raises(ValueError, match="callable"):
        mp.spawn("not a function", nprocs=1)
