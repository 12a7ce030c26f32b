"""Samplers at scale: RandomSampler / WeightedRandomSampler with num_samples=1e10 draw lazily
(peak RSS measured in a subprocess), their statistics, determinism and torch's order."""

import itertools
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.utils.data as tdata

import anygpu as ag
import anygpu.utils.data as adata
from anygpu import generator as streams

_PEAK_RSS = textwrap.dedent("""
    import resource, sys
    import numpy as np
    import anygpu as ag
    from anygpu.utils.data import DataLoader, RandomSampler, WeightedRandomSampler

    data = np.arange(1000, dtype=np.float32).reshape(100, 10)
    kind = sys.argv[1]
    if kind == "random":
        sampler = RandomSampler(range(100), replacement=True, num_samples=int(1e10))
    else:
        sampler = WeightedRandomSampler(np.linspace(0, 1, 100), num_samples=int(1e10))
    loader = DataLoader(data, sampler=sampler, batch_size=64)
    assert len(loader) == -(-int(1e10) // 64)
    next(iter(DataLoader(data, batch_size=64)))[0].numpy()  # the GPU device opened before measuring
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    batches = list(b.numpy() for _, b in zip(range(5), loader))
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert all(b.shape == (64, 10) for b in batches)
    print((after - before) // 1024)  # ru_maxrss is in KiB on Linux: MiB grown
""")


@pytest.mark.parametrize("kind", ["random", "weighted"])
def test_infinite_sampler_draws_lazily(kind):
    # Drawing every index up front would take 75 GiB (1e10 int64 values): the subprocess would
    # die or grow by far more than the bound below.
    run = subprocess.run([sys.executable, "-c", _PEAK_RSS, kind], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    grown_mib = int(run.stdout.strip().splitlines()[-1])
    assert grown_mib < 64, f"peak RSS grew by {grown_mib} MiB while drawing 5 batches"


def test_replacement_sampler_is_torchs_order_and_leaves_the_generator_where_torch_does():
    for seed in (0, 5):
        ours = adata.RandomSampler(range(1000), replacement=True, num_samples=100,
                                   generator=ag.Generator().manual_seed(seed))
        theirs = tdata.RandomSampler(range(1000), replacement=True, num_samples=100,
                                     generator=torch.Generator().manual_seed(seed))
        assert list(ours) == list(theirs)
        # Part of a pass: torch has drawn whole chunks of 32; so have we.
        g, tg = ag.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        a = list(itertools.islice(iter(adata.RandomSampler(range(50), True, 10**10, generator=g)), 40))
        t = list(itertools.islice(iter(tdata.RandomSampler(range(50), True, 10**10, generator=tg)), 40))
        assert a == t
        assert streams.randperm(20, g) == torch.randperm(20, generator=tg).tolist()


def test_replacement_sampler_statistics():
    n, draws = 7, 70_000
    picks = np.fromiter(adata.RandomSampler(range(n), replacement=True, num_samples=draws,
                                            generator=ag.Generator().manual_seed(1)), dtype=np.int64)
    counts = np.bincount(picks, minlength=n)
    assert counts.sum() == draws and picks.min() >= 0 and picks.max() < n
    expected = draws / n
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 30, counts  # 6 degrees of freedom: p < 1e-4
    assert len(set(picks[:20].tolist())) < 20  # repeats: it does draw with replacement


def test_weighted_sampler_respects_weights_and_is_deterministic():
    weights = [1.0, 0.0, 3.0, 6.0, 0.0]
    draws = 100_000

    def sample(seed, weights=weights, count=draws, replacement=True):
        return np.fromiter(adata.WeightedRandomSampler(weights, count, replacement=replacement,
                                                       generator=ag.Generator().manual_seed(seed)), dtype=np.int64)

    picks = sample(3)
    counts = np.bincount(picks, minlength=5)
    assert counts[1] == counts[4] == 0
    p = np.asarray(weights) / sum(weights)
    sigma = np.sqrt(draws * p * (1 - p))
    assert np.all(np.abs(counts - draws * p) <= 5 * sigma + 1e-9), counts
    np.testing.assert_array_equal(picks, sample(3))
    assert not np.array_equal(picks, sample(4))
    # A tensor of weights, a chunk boundary crossed, a zero weight first.
    ours = sample(0, ag.tensor([0.0, 2.0, 2.0]), 5000)
    assert set(ours.tolist()) == {1, 2}
    # Without replacement: distinct indices with non-zero weight.
    picks = sample(7, [1.0, 5.0, 0.0, 2.0, 3.0], 4, replacement=False)
    assert sorted(picks.tolist()) == [0, 1, 3, 4]
    with pytest.raises(ValueError, match="without replacement"):
        adata.WeightedRandomSampler([1.0, 0.0], 2, replacement=False)


def test_subset_random_sampler_permutes_its_indices_like_torch():
    indices = [3, 9, 27, 81, 243, 5, 10]
    for seed in (2, 11):
        ours = list(adata.SubsetRandomSampler(indices, generator=ag.Generator().manual_seed(seed)))
        theirs = list(tdata.SubsetRandomSampler(indices, generator=torch.Generator().manual_seed(seed)))
        assert ours == theirs and sorted(ours) == sorted(indices)
    ag.manual_seed(4)
    first = list(adata.SubsetRandomSampler(indices))
    ag.manual_seed(4)
    assert list(adata.SubsetRandomSampler(indices)) == first
