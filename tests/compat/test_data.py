"""anygpu.utils.data against torch.utils.data: same batches for the same indices, same
collate structure, same lengths and split sizes, same argument errors."""

from collections import namedtuple

import numpy as np
import pytest
import torch
import torch.utils.data as tdata

import anygpu as ag
import anygpu.utils.data as adata
from anygpu.utils.data import DataLoader, TensorDataset

Pair = namedtuple("Pair", ["left", "right"])


def to_host(value):
    """A batch from either library as nested Python/NumPy values, keeping container types."""
    if isinstance(value, (torch.Tensor, ag.Tensor)):
        return np.asarray(value.numpy())
    if isinstance(value, dict):
        return {k: to_host(v) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(to_host(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(to_host(v) for v in value)
    return value


def assert_same(ours, theirs, where="batch"):
    assert type(ours) is type(theirs), f"{where}: {type(ours).__name__} vs torch {type(theirs).__name__}"
    if isinstance(theirs, np.ndarray):
        assert ours.shape == theirs.shape, where
        np.testing.assert_allclose(ours, theirs.astype(ours.dtype), rtol=1e-6, err_msg=where)
    elif isinstance(theirs, dict):
        assert list(ours) == list(theirs), where
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{where}[{key!r}]")
    elif isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, f"{where}[{i}]")
    else:
        assert ours == theirs, where


def batches(loader):
    return [to_host(b) for b in loader]


@pytest.fixture
def arrays(rng):
    return rng.standard_normal((23, 3, 2)).astype(np.float32), rng.integers(0, 10, 23)


def both_tensor_datasets(arrays):
    x, y = arrays
    return (TensorDataset(ag.tensor(x), ag.tensor(y)),
            tdata.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)))


@pytest.mark.parametrize("batch_size,drop_last", [(1, False), (5, False), (5, True), (23, True), (30, False)])
def test_sequential_batches_equal_torch(arrays, batch_size, drop_last):
    ours, theirs = both_tensor_datasets(arrays)
    a = DataLoader(ours, batch_size=batch_size, drop_last=drop_last)
    t = tdata.DataLoader(theirs, batch_size=batch_size, drop_last=drop_last)
    assert len(a) == len(t)
    assert_same(batches(a), batches(t))


def test_explicit_sampler_and_batch_sampler_give_torch_batches(arrays, rng):
    ours, theirs = both_tensor_datasets(arrays)
    order = [int(i) for i in rng.permutation(23)]
    assert_same(batches(DataLoader(ours, batch_size=4, sampler=order)),
                batches(tdata.DataLoader(theirs, batch_size=4, sampler=order)))
    groups = [order[:3], order[3:10], order[10:11], order[11:]]
    assert_same(batches(DataLoader(ours, batch_sampler=groups)),
                batches(tdata.DataLoader(theirs, batch_sampler=groups)))
    # A Subset of a TensorDataset (what random_split returns) takes the row-gather path.
    picks = order[:13]
    assert_same(batches(DataLoader(adata.Subset(ours, picks), batch_size=6)),
                batches(tdata.DataLoader(tdata.Subset(theirs, picks), batch_size=6)))


def test_no_batching_and_workers_accepted(arrays):
    ours, theirs = both_tensor_datasets(arrays)
    assert_same(batches(DataLoader(ours, batch_size=None, num_workers=2, pin_memory=True)),
                batches(tdata.DataLoader(theirs, batch_size=None)))
    a = DataLoader(ours, batch_size=7, num_workers=3, pin_memory=True, persistent_workers=True, prefetch_factor=2)
    assert_same(batches(a), batches(tdata.DataLoader(theirs, batch_size=7)))
    assert adata.get_worker_info() is None


class Records(tdata.Dataset):
    """Samples with every kind of field default_collate knows (usable by both libraries)."""

    def __init__(self, rng):
        self.rows = [dict(image=rng.standard_normal((2, 3)).astype(np.float32), label=int(rng.integers(0, 5)),
                          weight=float(rng.random()), flag=bool(i % 2), name=f"s{i}",
                          pair=(np.float32(i) / 3, [i, -i]), point=Pair(np.int64(i), np.ones(2, np.float32) * i))
                     for i in range(11)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


def test_default_collate_structure_matches_torch(rng):
    data = Records(rng)
    ours = batches(DataLoader(data, batch_size=4))
    theirs = batches(tdata.DataLoader(data, batch_size=4))
    assert_same(ours, theirs)
    first = next(iter(DataLoader(data, batch_size=4)))
    assert first["label"].dtype == ag.int64 and first["weight"].dtype == ag.float64  # as torch
    assert first["flag"].dtype == ag.bool and first["name"] == ["s0", "s1", "s2", "s3"]


def test_collate_of_tensor_samples_and_errors():
    samples = [(ag.tensor([1.0, 2.0]) * i, i) for i in range(3)]
    batch = adata.default_collate(samples)
    assert isinstance(batch, list)
    np.testing.assert_allclose(batch[0].numpy(), [[0, 0], [1, 2], [2, 4]])
    assert batch[1].tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="equal size"):
        adata.default_collate([[1, 2], [3]])
    with pytest.raises(TypeError, match="default_collate"):
        adata.default_collate([object(), object()])
    with pytest.raises(ValueError, match="equal size"):
        adata.default_collate([ag.zeros(2), ag.zeros(3)])


@pytest.mark.parametrize("seed", [0, 1234, 2**40 + 5])
def test_shuffle_with_a_seeded_generator_gives_torch_batches(arrays, seed):
    ours, theirs = both_tensor_datasets(arrays)
    a = DataLoader(ours, batch_size=4, shuffle=True, drop_last=True, generator=ag.Generator().manual_seed(seed))
    t = tdata.DataLoader(theirs, batch_size=4, shuffle=True, drop_last=True,
                         generator=torch.Generator().manual_seed(seed))
    for epoch in range(3):  # the generator's stream carries over from epoch to epoch
        assert_same(batches(a), batches(t), f"epoch {epoch}")


def test_seeded_samplers_and_split_visit_torch_indices():
    for seed in (3, 77):
        def both(make):
            return make(adata, ag.Generator().manual_seed(seed)), make(tdata, torch.Generator().manual_seed(seed))

        for ours, theirs in [
            both(lambda lib, g: list(lib.RandomSampler(range(19), generator=g))),
            both(lambda lib, g: list(lib.RandomSampler(range(19), num_samples=45, generator=g))),
            both(lambda lib, g: list(lib.RandomSampler(range(19), replacement=True, num_samples=70, generator=g))),
            both(lambda lib, g: list(lib.SubsetRandomSampler([4, 8, 15, 16, 23, 42], generator=g))),
            both(lambda lib, g: [list(s) for s in lib.random_split(range(31), [0.2, 0.5, 0.3], generator=g)]),
        ]:
            assert ours == theirs


def test_shuffle_with_generator_is_repeatable_and_a_permutation(arrays):
    ours, _ = both_tensor_datasets(arrays)

    def epoch_orders(seed, epochs=2):
        loader = DataLoader(ours, batch_size=5, shuffle=True, generator=ag.Generator().manual_seed(seed))
        return [np.concatenate([b[1].numpy() for b in loader]) for _ in range(epochs)]

    first, second = epoch_orders(7), epoch_orders(7)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], first[1])  # a new order each epoch
    labels = arrays[1]
    for order in first:
        assert sorted(order.tolist()) == sorted(labels.tolist())
    # Without a generator, the global stream decides: anygpu.manual_seed makes it repeatable.
    ag.manual_seed(3)
    a = [b[1].numpy() for b in DataLoader(ours, batch_size=5, shuffle=True, drop_last=True)]
    ag.manual_seed(3)
    b = [b[1].numpy() for b in DataLoader(ours, batch_size=5, shuffle=True, drop_last=True)]
    assert len(a) == 4 and all(np.array_equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("lengths", [[10, 13], [0.3, 0.7], [0.25, 0.25, 0.5], [0.1] * 10, [1 / 3] * 3, [23]])
def test_random_split_sizes_match_torch(lengths):
    ours = adata.random_split(list(range(23)), lengths, generator=ag.Generator().manual_seed(0))
    theirs = tdata.random_split(list(range(23)), lengths, generator=torch.Generator().manual_seed(0))
    assert [len(s) for s in ours] == [len(s) for s in theirs]
    seen = sorted(i for split in ours for i in split)
    assert seen == list(range(23))


def test_random_split_errors():
    with pytest.raises(ValueError, match="does not equal"):
        adata.random_split(range(10), [3, 3])
    with pytest.raises(ValueError, match="non-negative"):
        adata.random_split(range(10), [12, -2])


def test_samplers_match_torch_lengths_and_ranges():
    data = list(range(9))
    assert list(adata.SequentialSampler(data)) == list(tdata.SequentialSampler(data))
    g = ag.Generator().manual_seed(1)
    for kwargs in [dict(), dict(replacement=True), dict(num_samples=20), dict(replacement=True, num_samples=4)]:
        ours = list(adata.RandomSampler(data, generator=g, **kwargs))
        theirs = list(tdata.RandomSampler(data, **kwargs))
        assert len(ours) == len(theirs) == len(adata.RandomSampler(data, **kwargs))
        assert all(0 <= i < 9 for i in ours)
        if not kwargs.get("replacement"):
            counts = np.bincount(ours, minlength=9)
            assert counts.max() - counts.min() <= 1  # whole permutations, the last cut short
    picks = [2, 5, 7]
    assert sorted(adata.SubsetRandomSampler(picks, generator=g)) == picks
    weighted = list(adata.WeightedRandomSampler([0.0, 1.0, 0.0, 3.0], 50, generator=g))
    assert set(weighted) <= {1, 3} and len(weighted) == 50
    for drop_last in (False, True):
        ours = list(adata.BatchSampler(adata.SequentialSampler(data), 4, drop_last))
        theirs = list(tdata.BatchSampler(tdata.SequentialSampler(data), 4, drop_last))
        assert ours == theirs and len(adata.BatchSampler(data, 4, drop_last)) == len(theirs)
    with pytest.raises(ValueError, match="batch_size"):
        adata.BatchSampler(data, 0, False)
    with pytest.raises(ValueError, match="num_samples"):
        tdata.RandomSampler([])
    with pytest.raises(ValueError, match="num_samples"):
        adata.RandomSampler([])


def test_concat_subset_and_iterable_datasets_match_torch(arrays):
    ours, theirs = both_tensor_datasets(arrays)
    a = adata.ConcatDataset([adata.Subset(ours, [3, 1]), ours])
    t = tdata.ConcatDataset([tdata.Subset(theirs, [3, 1]), theirs])
    assert len(a) == len(t) == 25
    for i in (0, 1, 2, 24, -1, -25):
        assert_same(to_host(a[i]), to_host(t[i]), f"concat[{i}]")
    with pytest.raises(IndexError):
        a[25]

    class Stream(adata.IterableDataset):
        def __iter__(self):
            return iter(range(11))

    class TorchStream(tdata.IterableDataset):
        def __iter__(self):
            return iter(range(11))

    for drop_last in (False, True):
        assert_same(batches(DataLoader(Stream(), batch_size=4, drop_last=drop_last)),
                    batches(tdata.DataLoader(TorchStream(), batch_size=4, drop_last=drop_last)))
    assert [x.tolist() for x in DataLoader(Stream() + Stream(), batch_size=11)] == [list(range(11))] * 2


def test_loader_argument_errors_like_torch(arrays):
    ours, theirs = both_tensor_datasets(arrays)
    cases = [dict(shuffle=True, sampler=[0, 1]), dict(batch_sampler=[[0]], batch_size=2),
             dict(batch_sampler=[[0]], drop_last=True), dict(batch_size=None, drop_last=True),
             dict(num_workers=-1)]
    for kwargs in cases:
        with pytest.raises(ValueError):
            tdata.DataLoader(theirs, **kwargs)
        with pytest.raises(ValueError):
            DataLoader(ours, **kwargs)

    class Stream(adata.IterableDataset):
        def __iter__(self):
            return iter(range(3))

    with pytest.raises(ValueError, match="shuffle"):
        DataLoader(Stream(), shuffle=True)
    with pytest.raises(ValueError, match="size mismatch"):
        TensorDataset(ag.zeros(3), ag.zeros(4))


def test_classes_subscript_in_annotations_like_torch():
    class Pairs(adata.Dataset[tuple]):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return (i, float(i))

    class Evens(adata.Sampler[int]):
        def __iter__(self):
            return iter([0, 2])

    batch = next(iter(DataLoader(Pairs(), batch_size=2, sampler=Evens())))
    assert batch[0].tolist() == [0, 2] and batch[1].tolist() == [0.0, 2.0]
    assert adata.IterableDataset[int] is not None


def test_generator_state_round_trip():
    g = ag.Generator().manual_seed(11)
    assert g.initial_seed() == 11
    state = g.get_state()
    first = list(adata.RandomSampler(range(50), generator=g))
    g.set_state(state)
    assert list(adata.RandomSampler(range(50), generator=g)) == first
    assert ag.Generator().manual_seed(11).get_state().tolist() == state.tolist()
    with pytest.raises(ValueError, match="set_state"):
        g.set_state(ag.tensor([1, 2, 3]))
    # The raw stream is torch's Mersenne Twister: the same seed, the same randperm.
    assert ag.generator.randperm(40, ag.Generator().manual_seed(-5)) == \
        torch.randperm(40, generator=torch.Generator().manual_seed(-5)).tolist()
    ours, theirs = ag.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    for n in (1, 17, 300):  # consecutive calls continue the same stream
        assert ag.randperm(n, generator=ours).tolist() == torch.randperm(n, generator=theirs).tolist()


def test_generators_drive_initialisers_and_factories():
    w = ag.zeros(3, 4)
    ag.nn.init.normal_(w, generator=ag.Generator().manual_seed(1))
    first = w.numpy().copy()
    ag.nn.init.normal_(w, generator=ag.Generator().manual_seed(1))
    np.testing.assert_array_equal(w.numpy(), first)
    assert first.std() > 0
    a = ag.randn(5, generator=ag.Generator().manual_seed(2)).numpy()
    np.testing.assert_array_equal(ag.randn(5, generator=ag.Generator().manual_seed(2)).numpy(), a)
