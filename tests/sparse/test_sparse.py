"""Sparse COO tensors (anygpu.sparse) against torch's sparse tensors on the CPU: values and
gradients (dense operand and values) on random patterns with duplicates, empty rows, odd
sizes, nnz = 0; errors; a GAT-style sparse attention layer trained for a few steps."""

import numpy as np
import pytest

import anygpu as ag
import anygpu.nn.functional as F

torch = pytest.importorskip("torch")


def _pattern(rng, rows: int, cols: int, nnz: int, duplicates: bool = True):
    """Random indices [2, nnz] (unsorted; with some repeated pairs when duplicates) and values."""
    if nnz == 0:
        return np.zeros((2, 0), np.int64), np.zeros(0, np.float32)
    idx = np.stack([rng.integers(0, rows, nnz), rng.integers(0, cols, nnz)]).astype(np.int64)
    if duplicates and nnz > 2:
        idx[:, -2:] = idx[:, :2]  # two pairs appear twice
    return idx, rng.standard_normal(nnz).astype(np.float32)


def _close(ours, theirs, tol=1e-5):
    theirs = theirs.detach().numpy() if hasattr(theirs, "detach") else np.asarray(theirs)
    ours = ours.numpy() if hasattr(ours, "numpy") else np.asarray(ours)
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    np.testing.assert_allclose(ours, theirs, rtol=tol, atol=tol)


def test_construction_and_queries_match_torch(rng):
    idx, vals = _pattern(rng, 5, 7, 9)
    s = ag.sparse_coo_tensor(idx, vals, (5, 7))
    t = torch.sparse_coo_tensor(torch.tensor(idx), torch.tensor(vals), (5, 7))
    assert isinstance(s, ag.Tensor) and s.is_sparse and not ag.ones(2).is_sparse
    assert s.layout is ag.sparse_coo and ag.ones(2).layout is ag.strided
    assert s.shape == tuple(t.shape) and s.size() == tuple(t.size()) and s.size(1) == 7
    assert s.dtype is ag.float32 and s._nnz() == t._nnz() == 9
    assert (s.sparse_dim(), s.dense_dim()) == (t.sparse_dim(), t.dense_dim()) == (2, 0)
    assert s.is_coalesced() == t.is_coalesced() is False
    with pytest.raises(RuntimeError, match="coalesce"):
        s.indices()
    with pytest.raises(RuntimeError, match="coalesce"):
        s.values()
    c, tc = s.coalesce(), t.coalesce()
    assert c.is_coalesced() and c._nnz() == tc._nnz() < 9
    np.testing.assert_array_equal(c.indices().numpy(), tc.indices().numpy())
    _close(c.values(), tc.values())
    _close(s.to_dense(), t.to_dense())
    assert c.coalesce() is c
    # size inferred from the indices, as torch does
    inferred = ag.sparse_coo_tensor(idx, vals)
    assert inferred.shape == tuple(torch.sparse_coo_tensor(torch.tensor(idx), torch.tensor(vals)).shape)
    assert "layout=torch.sparse_coo" in repr(c)


def test_hybrid_and_to_sparse_roundtrip(rng):
    dense = rng.standard_normal((6, 4, 3)).astype(np.float32)
    dense[[0, 3, 5]] = 0.0  # empty rows
    dense[1, 2] = 0.0
    x, tx = ag.tensor(dense), torch.tensor(dense)
    for sparse_dim in (None, 1, 2):
        s = x.to_sparse() if sparse_dim is None else x.to_sparse(sparse_dim)
        t = tx.to_sparse() if sparse_dim is None else tx.to_sparse(sparse_dim)
        assert s.is_coalesced() and t.is_coalesced()
        assert (s.sparse_dim(), s.dense_dim(), s._nnz()) == (t.sparse_dim(), t.dense_dim(), t._nnz())
        np.testing.assert_array_equal(s.indices().numpy(), t.indices().numpy())
        _close(s.values(), t.values())
        _close(s.to_dense(), t.to_dense())
    assert x.to_dense() is x


def test_to_sparse_and_to_dense_gradients(rng):
    dense = rng.standard_normal((5, 6)).astype(np.float32) * (rng.random((5, 6)) < 0.4)
    weight = rng.standard_normal((5, 6)).astype(np.float32)
    x = ag.tensor(dense, requires_grad=True)
    tx = torch.tensor(dense, requires_grad=True)
    s, t = x.to_sparse(), tx.to_sparse()
    (s.to_dense() * ag.tensor(weight)).sum().backward()
    (t.to_dense() * torch.tensor(weight)).sum().backward()
    _close(x.grad, tx.grad)


def test_coalesce_sums_duplicates_with_gradients(rng):
    idx, vals = _pattern(rng, 4, 3, 12)
    idx[:, 5] = idx[:, 0]  # the same pair three times
    weight = rng.standard_normal((4, 3)).astype(np.float32)
    v = ag.tensor(vals, requires_grad=True)
    tv = torch.tensor(vals, requires_grad=True)
    c = ag.sparse_coo_tensor(idx, v, (4, 3)).coalesce()
    tc = torch.sparse_coo_tensor(torch.tensor(idx), tv, (4, 3)).coalesce()
    _close(c.values(), tc.values())
    (c.to_dense() * ag.tensor(weight)).sum().backward()
    (tc.to_dense() * torch.tensor(weight)).sum().backward()
    _close(v.grad, tv.grad)


def test_integer_values_coalesce_exactly(rng):
    idx = np.array([[0, 2, 0, 1, 2], [1, 0, 1, 1, 0]])
    vals = np.array([3, 4, 5, -7, 2**20])
    s = ag.sparse_coo_tensor(idx, vals, (3, 2), dtype=ag.int64)
    t = torch.sparse_coo_tensor(torch.tensor(idx), torch.tensor(vals), (3, 2), dtype=torch.int64)
    assert s.dtype is ag.int64
    np.testing.assert_array_equal(s.to_dense().numpy(), t.to_dense().numpy())
    np.testing.assert_array_equal(s.coalesce().values().numpy(), t.coalesce().values().numpy())


@pytest.mark.parametrize("rows,inner,cols,nnz", [(7, 5, 3, 11), (1, 1, 1, 1), (13, 17, 9, 40), (33, 8, 1, 20),
                                                 (6, 4, 70, 9), (4, 9, 5, 0)])
def test_spmm_values_and_gradients(rng, rows, inner, cols, nnz):
    idx, vals = _pattern(rng, rows, inner, nnz)
    if nnz:
        idx[0] = np.minimum(idx[0], rows - 2 if rows > 2 else 0)  # the last row stays empty
    dense = rng.standard_normal((inner, cols)).astype(np.float32)
    grad = rng.standard_normal((rows, cols)).astype(np.float32)
    v, x = ag.tensor(vals, requires_grad=True), ag.tensor(dense, requires_grad=True)
    tv, tx = torch.tensor(vals, requires_grad=True), torch.tensor(dense, requires_grad=True)
    out = ag.sparse.mm(ag.sparse_coo_tensor(idx, v, (rows, inner)), x)
    t_out = torch.sparse.mm(torch.sparse_coo_tensor(torch.tensor(idx), tv, (rows, inner)), tx)
    _close(out, t_out)
    (out * ag.tensor(grad)).sum().backward()
    (t_out * torch.tensor(grad)).sum().backward()
    _close(x.grad, tx.grad)
    _close(v.grad, tv.grad if tv.grad is not None else torch.zeros(nnz))


def test_matmul_forms_and_dense_times_sparse(rng):
    idx, vals = _pattern(rng, 6, 5, 14)
    v, tv = ag.tensor(vals, requires_grad=True), torch.tensor(vals, requires_grad=True)
    s = ag.sparse_coo_tensor(idx, v, (6, 5))
    t = torch.sparse_coo_tensor(torch.tensor(idx), tv, (6, 5))
    dense = rng.standard_normal((5, 4)).astype(np.float32)
    x, tx = ag.tensor(dense), torch.tensor(dense)
    for ours, theirs in ((s @ x, t @ tx), (ag.mm(s, x), torch.mm(t, tx)), (ag.matmul(s, x), torch.matmul(t, tx)),
                         (s.mm(x), t.mm(tx))):
        _close(ours, theirs)
    vec = rng.standard_normal(5).astype(np.float32)
    _close(s @ ag.tensor(vec), t @ torch.tensor(vec))
    left = rng.standard_normal((3, 6)).astype(np.float32)
    a, ta = ag.tensor(left, requires_grad=True), torch.tensor(left, requires_grad=True)
    out, t_out = a @ s, ta @ t
    _close(out, t_out)
    _close(ag.mm(a, s), torch.mm(ta, t))
    weight = rng.standard_normal((3, 5)).astype(np.float32)
    (out * ag.tensor(weight)).sum().backward()
    (t_out * torch.tensor(weight)).sum().backward()
    _close(a.grad, ta.grad)
    _close(v.grad, tv.grad)


def test_sparse_leaf_gradient_is_sparse(rng):
    idx = np.array([[0, 0, 2, 3], [1, 3, 2, 0]])
    vals = rng.standard_normal(4).astype(np.float32)
    dense = rng.standard_normal((4, 3)).astype(np.float32)
    s = ag.sparse_coo_tensor(idx, vals, (4, 4), requires_grad=True)
    t = torch.sparse_coo_tensor(torch.tensor(idx), torch.tensor(vals), (4, 4), requires_grad=True)
    assert s.requires_grad and s.is_leaf and s.grad is None
    (ag.sparse.mm(s, ag.tensor(dense)) ** 2).sum().backward()
    (torch.sparse.mm(t, torch.tensor(dense)) ** 2).sum().backward()
    assert s.grad.is_sparse and t.grad.is_sparse
    _close(s.grad.to_dense(), t.grad.to_dense())


def test_transpose(rng):
    idx, vals = _pattern(rng, 5, 3, 8)
    v, tv = ag.tensor(vals, requires_grad=True), torch.tensor(vals, requires_grad=True)
    s = ag.sparse_coo_tensor(idx, v, (5, 3)).t()
    t = torch.sparse_coo_tensor(torch.tensor(idx), tv, (5, 3)).t()
    assert s.shape == (3, 5) and s.is_coalesced() == t.is_coalesced()
    _close(s.to_dense(), t.to_dense())
    dense = rng.standard_normal((5, 2)).astype(np.float32)
    out, t_out = ag.sparse.mm(s, ag.tensor(dense)), torch.sparse.mm(t, torch.tensor(dense))
    _close(out, t_out)
    out.sum().backward()
    t_out.sum().backward()
    _close(v.grad, tv.grad)


def test_all_zero_and_empty(rng):
    zero = ag.zeros(4, 3).to_sparse()
    t_zero = torch.zeros(4, 3).to_sparse()
    assert zero._nnz() == t_zero._nnz() == 0
    _close(zero.to_dense(), t_zero.to_dense())
    x = ag.tensor(rng.standard_normal((3, 2)).astype(np.float32), requires_grad=True)
    out = ag.sparse.mm(zero, x)
    _close(out, np.zeros((4, 2), np.float32))
    out.sum().backward()
    _close(x.grad, np.zeros((3, 2), np.float32))
    empty = ag.sparse_coo_tensor(np.zeros((2, 0), np.int64), np.zeros(0, np.float32), (0, 3))
    assert empty.shape == (0, 3) and ag.sparse.mm(empty, ag.ones(3, 2)).shape == (0, 2)
    _close(ag.sparse.sum(zero), torch.sparse.sum(t_zero))


def test_sum_full_and_along_dims(rng):
    idx, vals = _pattern(rng, 5, 6, 13)
    weight = rng.standard_normal(6).astype(np.float32)
    for dim in (None, 0, 1, (0, 1), -1):
        v, tv = ag.tensor(vals, requires_grad=True), torch.tensor(vals, requires_grad=True)
        s = ag.sparse_coo_tensor(idx, v, (5, 6))
        t = torch.sparse_coo_tensor(torch.tensor(idx), tv, (5, 6))
        ours = ag.sparse.sum(s) if dim is None else ag.sparse.sum(s, dim)
        theirs = torch.sparse.sum(t) if dim is None else torch.sparse.sum(t, dim)
        assert ours.is_sparse == theirs.is_sparse, dim
        if ours.is_sparse:
            ours, theirs = ours.to_dense(), theirs.to_dense()
        _close(ours, theirs)
        w = weight[:ours.shape[0]] if ours.ndim else np.float32(1.0)
        (ours * ag.tensor(w)).sum().backward()
        (theirs * torch.tensor(w)).sum().backward()
        _close(v.grad, tv.grad)
    _close(s.sum(), t.sum())


def test_sum_hybrid(rng):
    dense = rng.standard_normal((4, 3, 2)).astype(np.float32) * (rng.random((4, 3, 1)) < 0.6)
    s, t = ag.tensor(dense).to_sparse(2), torch.tensor(dense).to_sparse(2)
    for dim in (0, 2, (0, 1), (1, 2)):
        ours, theirs = ag.sparse.sum(s, dim), torch.sparse.sum(t, dim)
        assert ours.is_sparse == theirs.is_sparse, dim
        _close(ours.to_dense(), theirs.to_dense())


def test_add_and_scale(rng):
    ia, va = _pattern(rng, 4, 5, 7)
    ib, vb = _pattern(rng, 4, 5, 6)
    a, b = ag.sparse_coo_tensor(ia, va, (4, 5)), ag.sparse_coo_tensor(ib, vb, (4, 5))
    ta = torch.sparse_coo_tensor(torch.tensor(ia), torch.tensor(va), (4, 5))
    tb = torch.sparse_coo_tensor(torch.tensor(ib), torch.tensor(vb), (4, 5))
    for ours, theirs in ((a + b, ta + tb), (a.coalesce() + b.coalesce(), ta.coalesce() + tb.coalesce()),
                         (a * 2.5, ta * 2.5), (3 * a, 3 * ta), (a / 4, ta / 4), (-a, -ta), (a - b, ta - tb)):
        assert ours.is_sparse and ours.is_coalesced() == theirs.is_coalesced()
        _close(ours.to_dense(), theirs.to_dense())
    dense = rng.standard_normal((4, 5)).astype(np.float32)
    with pytest.raises(RuntimeError):
        ta + torch.tensor(dense)
    with pytest.raises(ValueError, match="add: sparse [+] dense"):
        a + ag.tensor(dense)
    _close(ag.tensor(dense) - a, torch.tensor(dense) - ta)
    _close(ag.tensor(dense) + a, torch.tensor(dense) + ta)
    # pytorch/examples gat: a float identity plus an int64 sparse adjacency is a float dense matrix
    adj = ag.sparse_coo_tensor(ia, np.ones(7), (4, 5), dtype=ag.int64)
    t_adj = torch.sparse_coo_tensor(torch.tensor(ia), torch.ones(7), (4, 5), dtype=torch.int64)
    ours, theirs = ag.eye(4, 5) + adj, torch.eye(4, 5) + t_adj
    assert not ours.is_sparse and ours.dtype is ag.float32
    _close(ours, theirs)
    # scaling keeps the gradient path to the values
    v, tv = ag.tensor(va, requires_grad=True), torch.tensor(va, requires_grad=True)
    (ag.sparse_coo_tensor(ia, v, (4, 5)) * 3.0).to_dense().sum().backward()
    (torch.sparse_coo_tensor(torch.tensor(ia), tv, (4, 5)) * 3.0).to_dense().sum().backward()
    _close(v.grad, tv.grad)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sparse_softmax_values_and_gradients(rng, dim):
    idx, vals = _pattern(rng, 6, 7, 20)
    vals[3] = 40.0  # a large score: the max is subtracted
    weight = rng.standard_normal(20).astype(np.float32)
    v, tv = ag.tensor(vals, requires_grad=True), torch.tensor(vals, requires_grad=True)
    s = ag.sparse.softmax(ag.sparse_coo_tensor(idx, v, (6, 7)), dim)
    # torch 2.13's backward of sparse.softmax does not wrap a negative dim (its gradient for
    # dim=-1 differs from dim=1 and from the dense masked softmax's): torch runs dim % 2.
    t = torch.sparse.softmax(torch.sparse_coo_tensor(torch.tensor(idx), tv, (6, 7)), dim % 2)
    assert s.is_sparse and s.is_coalesced()
    _close(s.to_dense(), t.to_dense())
    w = weight[:s._nnz()]
    (s.values() * ag.tensor(w)).sum().backward()
    (t.coalesce().values() * torch.tensor(w)).sum().backward()
    _close(v.grad, tv.grad)


def test_errors_name_the_op(rng):
    idx, vals = _pattern(rng, 3, 4, 5)
    s = ag.sparse_coo_tensor(idx, vals, (3, 4))
    with pytest.raises(ValueError, match=r"sparse\.mm.*cannot be multiplied"):
        ag.sparse.mm(s, ag.ones(5, 2))
    with pytest.raises(ValueError, match=r"matmul|sparse\.mm"):
        s @ ag.ones(3, 2)
    with pytest.raises(ValueError, match=r"sparse\.mm.*cannot be multiplied"):
        ag.ones(2, 4) @ s
    with pytest.raises(ValueError, match="sparse_coo_tensor: index 9 in dim 1 is out of range"):
        ag.sparse_coo_tensor(np.array([[0], [9]]), np.ones(1, np.float32), (3, 4))
    with pytest.raises(ValueError, match="sparse_coo_tensor: indices list 5 elements"):
        ag.sparse_coo_tensor(idx, np.ones(4, np.float32), (3, 4))
    with pytest.raises(ValueError, match="sparse_coo_tensor: indices must be non-negative"):
        ag.sparse_coo_tensor(np.array([[0], [-1]]), np.ones(1, np.float32), (3, 4))
    with pytest.raises(ValueError, match=r"sparse_coo_tensor: indices must have shape \[sparse_dim, nnz\]"):
        ag.sparse_coo_tensor(np.zeros((2, 2, 2), np.int64), np.ones(2, np.float32))
    with pytest.raises(ValueError, match="sparse_coo_tensor: size"):
        ag.sparse_coo_tensor(idx, vals, (3, 4, 2))
    with pytest.raises(ValueError, match="add: sparse tensors of shapes"):
        s + ag.sparse_coo_tensor(idx, vals, (3, 5))
    with pytest.raises(ValueError, match="sparse_coo_tensor: size .* more than anygpu indexes"):
        ag.sparse_coo_tensor(np.array([[1], [2]]), np.ones(1, np.float32), (2**40, 2**40))
    huge = ag.sparse_coo_tensor(np.array([[1], [2]]), np.ones(1, np.float32), (2**33, 3))
    with pytest.raises(ValueError, match="sparse.mm: a product .* 32-bit limit"):
        ag.sparse.mm(huge, ag.ones(3, 0))
    with pytest.raises(NotImplementedError, match="sparse @ sparse"):
        ag.sparse.mm(s, s)
    with pytest.raises(ValueError, match="float32"):
        ag.sparse.mm(ag.sparse_coo_tensor(idx, np.arange(5), (3, 4)), ag.ones(4, 2))
    with pytest.raises(NotImplementedError, match="to_dense"):
        s.exp()
    with pytest.raises(NotImplementedError, match="to_dense"):
        s.numpy()
    with pytest.raises(NotImplementedError, match="to_dense"):
        s * ag.ones(3, 4)


def test_pytorch_examples_gat_preprocessing(rng):
    """pytorch/examples gat's load_cora: a diagonal scaling matrix made sparse, times the features."""
    features = (rng.random((9, 6)) < 0.3).astype(np.float32)
    features[4] = 0.0
    for lib, x in ((ag, ag.tensor(features)), (torch, torch.tensor(features))):
        scale = 1 / lib.sum(x, dim=1)
        scale[scale == float("inf")] = 0
        out = lib.diag(scale).to_sparse() @ x
        if lib is ag:
            ours = out
        else:
            theirs = out
    _close(ours, theirs)


class _GatLayer:
    """One GAT-style attention layer over a fixed edge list (written once, run on either library)."""

    def __init__(self, lib, weight, a_src, a_dst):
        self.lib = lib
        self.weight = lib.tensor(weight, requires_grad=True)
        self.a_src = lib.tensor(a_src, requires_grad=True)
        self.a_dst = lib.tensor(a_dst, requires_grad=True)

    def parameters(self):
        return [self.weight, self.a_src, self.a_dst]

    def __call__(self, x, edges, n):
        lib = self.lib
        h = x @ self.weight
        src, dst = lib.tensor(edges[0]), lib.tensor(edges[1])
        scores = (h @ self.a_src)[src] + (h @ self.a_dst)[dst]
        leaky = F.leaky_relu if lib is ag else torch.nn.functional.leaky_relu
        att = lib.sparse_coo_tensor(edges, leaky(scores, 0.2), (n, n))
        att = lib.sparse.softmax(att, dim=1)
        return lib.sparse.mm(att, h)


def test_gat_style_attention_trains_like_torch(rng):
    n, f_in, hidden, classes = 23, 7, 5, 3
    pairs = {(i, i) for i in range(n)} | {(int(a), int(b)) for a, b in rng.integers(0, n, (60, 2))}
    edges = np.array(sorted(pairs), np.int64).T
    edges = edges[:, rng.permutation(edges.shape[1])]  # unsorted, as an edge list comes
    x = rng.standard_normal((n, f_in)).astype(np.float32)
    labels = rng.integers(0, classes, n)
    weight = (rng.standard_normal((f_in, hidden)) * 0.5).astype(np.float32)
    a_src, a_dst = (rng.standard_normal((2, hidden)) * 0.5).astype(np.float32)
    head = (rng.standard_normal((hidden, classes)) * 0.5).astype(np.float32)
    losses = {}
    for lib in (ag, torch):
        layer = _GatLayer(lib, weight, a_src, a_dst)
        out_w = lib.tensor(head, requires_grad=True)
        params = layer.parameters() + [out_w]
        opt = (ag.optim.SGD if lib is ag else torch.optim.SGD)(params, lr=0.5)
        target = lib.tensor(labels)
        xs = lib.tensor(x)
        cross_entropy = F.cross_entropy if lib is ag else torch.nn.functional.cross_entropy
        elu = F.elu if lib is ag else torch.nn.functional.elu
        run = []
        for _ in range(5):
            opt.zero_grad()
            loss = cross_entropy(elu(layer(xs, edges, n)) @ out_w, target)
            loss.backward()
            opt.step()
            run.append(loss.item())
        losses[lib.__name__] = run
    np.testing.assert_allclose(losses["anygpu"], losses["torch"], rtol=1e-5, atol=1e-5)
    assert losses["torch"][-1] < losses["torch"][0]  # it learns: the comparison is not of constants


def test_log_softmax_and_addmm(rng):
    idx, vals = _pattern(rng, 5, 6, 14)
    v, tv = ag.tensor(vals, requires_grad=True), torch.tensor(vals, requires_grad=True)
    s = ag.sparse.log_softmax(ag.sparse_coo_tensor(idx, v, (5, 6)), 1)
    t = torch.sparse.log_softmax(torch.sparse_coo_tensor(torch.tensor(idx), tv, (5, 6)), 1)
    _close(s.values(), t.coalesce().values())
    s.values().sum().backward()
    t.coalesce().values().sum().backward()
    _close(v.grad, tv.grad)
    bias = rng.standard_normal((5, 3)).astype(np.float32)
    dense = rng.standard_normal((6, 3)).astype(np.float32)
    ours = ag.sparse.addmm(ag.tensor(bias), ag.sparse_coo_tensor(idx, vals, (5, 6)), ag.tensor(dense),
                           beta=0.5, alpha=2.0)
    theirs = torch.sparse.addmm(torch.tensor(bias), torch.sparse_coo_tensor(torch.tensor(idx), torch.tensor(vals),
                                                                            (5, 6)), torch.tensor(dense),
                                beta=0.5, alpha=2.0)
    _close(ours, theirs)


def test_hybrid_softmax_and_coalesce(rng):
    idx, _ = _pattern(rng, 4, 5, 10)
    vals = rng.standard_normal((10, 3)).astype(np.float32)
    weight = rng.standard_normal((10, 3)).astype(np.float32)
    for dim in (0, 1, 2):
        v, tv = ag.tensor(vals, requires_grad=True), torch.tensor(vals, requires_grad=True)
        s = ag.sparse.softmax(ag.sparse_coo_tensor(idx, v, (4, 5, 3)), dim)
        t = torch.sparse.softmax(torch.sparse_coo_tensor(torch.tensor(idx), tv, (4, 5, 3)), dim)
        _close(s.to_dense(), t.to_dense())
        w = weight[:s._nnz()]
        (s.values() * ag.tensor(w)).sum().backward()
        (t.coalesce().values() * torch.tensor(w)).sum().backward()
        _close(v.grad, tv.grad)


def test_non_finite_values_stay_in_their_entries(rng):
    idx = np.array([[0, 1, 2], [0, 1, 1]])
    vals = np.array([np.nan, 2.0, np.inf], np.float32)
    dense = rng.standard_normal((3, 4)).astype(np.float32)
    dense[2] = np.inf  # row 2 of the dense operand is read by no entry: no NaN from 0 * inf
    ours = ag.sparse.mm(ag.sparse_coo_tensor(idx, vals, (3, 3)), ag.tensor(dense))
    theirs = torch.sparse.mm(torch.sparse_coo_tensor(torch.tensor(idx), torch.tensor(vals), (3, 3)),
                             torch.tensor(dense))
    np.testing.assert_array_equal(np.isnan(ours.numpy()), np.isnan(theirs.numpy()))
    np.testing.assert_array_equal(np.isinf(ours.numpy()), np.isinf(theirs.numpy()))
    finite = np.isfinite(theirs.numpy())
    np.testing.assert_allclose(ours.numpy()[finite], theirs.numpy()[finite], rtol=1e-6)


def test_larger_random_product(rng):
    rows, inner, cols, nnz = 301, 203, 33, 2500
    idx, vals = _pattern(rng, rows, inner, nnz)
    dense = rng.standard_normal((inner, cols)).astype(np.float32)
    grad = rng.standard_normal((rows, cols)).astype(np.float32)
    v, x = ag.tensor(vals, requires_grad=True), ag.tensor(dense, requires_grad=True)
    tv, tx = torch.tensor(vals, requires_grad=True), torch.tensor(dense, requires_grad=True)
    out = ag.sparse_coo_tensor(idx, v, (rows, inner)) @ x
    t_out = torch.sparse_coo_tensor(torch.tensor(idx), tv, (rows, inner)) @ tx
    _close(out, t_out, 1e-4)
    (out * ag.tensor(grad)).sum().backward()
    (t_out * torch.tensor(grad)).sum().backward()
    _close(x.grad, tx.grad, 1e-4)
    _close(v.grad, tv.grad, 1e-4)


def test_dtype_conversions(rng):
    idx = np.array([[0, 1], [1, 0]])
    s = ag.sparse_coo_tensor(idx, [3, 4], (2, 2))
    assert s.dtype is ag.int64
    f = s.float()
    assert f.is_sparse and f.dtype is ag.float32 and s.to("cuda") is s and s.cpu() is s
    _close(f.to_dense(), np.array([[0, 3], [4, 0]], np.float32))
    _close(ag.sparse.sum(s, dtype=ag.float32), np.float32(7))


def test_pattern_of_a_reused_index_tensor_is_kept_until_it_changes(rng):
    edges = ag.tensor(np.array([[2, 0, 1, 0], [0, 1, 2, 2]]))
    dense = ag.tensor(rng.standard_normal((3, 2)).astype(np.float32))
    first = ag.sparse_coo_tensor(edges, ag.ones(4), (3, 3))
    second = ag.sparse_coo_tensor(edges, ag.full((4,), 2.0), (3, 3))
    assert second._pattern is first._pattern
    edges[1, 3] = 1  # an in-place write: a new pattern, the right product
    third = ag.sparse_coo_tensor(edges, ag.ones(4), (3, 3))
    assert third._pattern is not first._pattern
    expected = np.zeros((3, 3), np.float32)
    np.add.at(expected, ([2, 0, 1, 0], [0, 1, 2, 1]), 1.0)
    _close(third @ dense, expected @ dense.numpy())
    _close(second @ dense, 2 * first.to_dense().numpy() @ dense.numpy())
