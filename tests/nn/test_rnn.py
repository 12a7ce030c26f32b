"""RNN, LSTM, GRU and their cells against torch.nn: torch's weights copied in through
load_state_dict, then outputs, final states and the gradients of every parameter, the
input and the initial state compared."""

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu import nn

RTOL, ATOL = 1e-4, 1e-5
torch.set_num_threads(1)


def _pair(torch_module, ours):
    ours.load_state_dict(torch_module.state_dict())
    return ours


def _assert_close(actual, expected, what):
    np.testing.assert_allclose(actual.numpy(), expected.detach().numpy(), rtol=RTOL, atol=ATOL, err_msg=what)


def _run(torch_module, ours, x, hx):
    """Forward both, backward a weighted sum of every output; return ([outputs], [inputs])."""
    rng = np.random.default_rng(9)
    tx = torch.tensor(x, requires_grad=True)
    ax = ag.tensor(x, requires_grad=True)
    if hx is None:
        thx = ahx = None
    elif isinstance(hx, tuple):
        thx = tuple(torch.tensor(h, requires_grad=True) for h in hx)
        ahx = tuple(ag.tensor(h, requires_grad=True) for h in hx)
    else:
        thx, ahx = torch.tensor(hx, requires_grad=True), ag.tensor(hx, requires_grad=True)
    tout, tstate = torch_module(tx, thx)
    aout, astate = ours(ax, ahx)
    touts = [tout] + (list(tstate) if isinstance(tstate, tuple) else [tstate])
    aouts = [aout] + (list(astate) if isinstance(astate, tuple) else [astate])
    tloss, aloss = 0, 0
    for t, a in zip(touts, aouts):
        assert a.shape == tuple(t.shape), f"shape {a.shape} vs torch {tuple(t.shape)}"
        w = rng.uniform(0.5, 1.5, size=a.shape).astype(np.float32)
        tloss = tloss + (t * torch.tensor(w)).sum()
        aloss = aloss + (a * ag.tensor(w)).sum()
    tloss.backward()
    aloss.backward()
    tins = [tx] + ([] if thx is None else (list(thx) if isinstance(thx, tuple) else [thx]))
    ains = [ax] + ([] if ahx is None else (list(ahx) if isinstance(ahx, tuple) else [ahx]))
    return touts, aouts, tins, ains


def _compare(torch_module, ours, x, hx=None):
    touts, aouts, tins, ains = _run(torch_module, ours, x, hx)
    for i, (t, a) in enumerate(zip(touts, aouts)):
        _assert_close(a, t, f"output {i}")
    for i, (t, a) in enumerate(zip(tins, ains)):
        _assert_close(a.grad, t.grad, f"gradient of input {i}")
    tparams = dict(torch_module.named_parameters())
    for name, p in ours.named_parameters():
        _assert_close(p.grad, tparams[name].grad, f"gradient of {name}")


RNN_CASES = [
    # (class, kwargs, sequence length, batch)
    ("RNN", dict(input_size=3, hidden_size=5), 4, 2),
    ("RNN", dict(input_size=3, hidden_size=5, num_layers=2, nonlinearity="relu", bias=False), 5, 3),
    ("RNN", dict(input_size=4, hidden_size=3, batch_first=True, bidirectional=True), 3, 2),
    ("LSTM", dict(input_size=3, hidden_size=5), 4, 2),
    ("LSTM", dict(input_size=5, hidden_size=7, num_layers=2, batch_first=True), 6, 3),
    ("LSTM", dict(input_size=3, hidden_size=4, num_layers=2, bidirectional=True, bias=False), 5, 1),
    ("GRU", dict(input_size=3, hidden_size=5), 4, 2),
    ("GRU", dict(input_size=6, hidden_size=3, num_layers=3, batch_first=True), 5, 2),
    ("GRU", dict(input_size=2, hidden_size=5, num_layers=2, bidirectional=True, batch_first=True), 3, 4),
]


def _ids(cases):
    return [f"{c[0]}-" + "-".join(f"{k}={v}" for k, v in c[1].items() if k not in ("input_size", "hidden_size"))
            for c in cases]


def _hidden(rng, name, kwargs, batch, batched=True):
    count = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    shape = (count, batch, kwargs["hidden_size"]) if batched else (count, kwargs["hidden_size"])
    h = rng.standard_normal(shape).astype(np.float32)
    if name == "LSTM":
        return h, rng.standard_normal(shape).astype(np.float32)
    return h


@pytest.mark.parametrize("name,kwargs,length,batch", RNN_CASES, ids=_ids(RNN_CASES))
@pytest.mark.parametrize("with_hidden", [False, True], ids=["zero-state", "given-state"])
def test_matches_torch(name, kwargs, length, batch, with_hidden):
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    theirs = getattr(torch.nn, name)(**kwargs)
    ours = _pair(theirs, getattr(nn, name)(**kwargs))
    shape = (batch, length, kwargs["input_size"]) if kwargs.get("batch_first") else \
        (length, batch, kwargs["input_size"])
    x = rng.standard_normal(shape).astype(np.float32)
    _compare(theirs, ours, x, _hidden(rng, name, kwargs, batch) if with_hidden else None)


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
def test_unbatched_input(name):
    torch.manual_seed(1)
    rng = np.random.default_rng(2)
    kwargs = dict(input_size=3, hidden_size=4, num_layers=2)
    theirs = getattr(torch.nn, name)(**kwargs)
    ours = _pair(theirs, getattr(nn, name)(**kwargs))
    x = rng.standard_normal((5, 3)).astype(np.float32)
    _compare(theirs, ours, x, _hidden(rng, name, kwargs, 1, batched=False))


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
def test_parameter_names_shapes_and_init_match_torch(name):
    kwargs = dict(input_size=3, hidden_size=8, num_layers=2, bidirectional=True)
    theirs = getattr(torch.nn, name)(**kwargs)
    ours = getattr(nn, name)(**kwargs)
    assert [(n, tuple(p.shape)) for n, p in ours.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in theirs.named_parameters()]
    bound = 1 / np.sqrt(8)
    values = np.concatenate([p.numpy().ravel() for p in ours.parameters()])
    assert np.abs(values).max() <= bound
    assert values.std() > 0.5 * bound / np.sqrt(3)  # U(-b, b) has std b/sqrt(3)
    assert repr(ours) == repr(theirs)


def test_positional_arguments_as_torch():
    theirs = torch.nn.RNN(3, 4, 2, "relu", False, True)
    ours = nn.RNN(3, 4, 2, "relu", False, True)
    assert (ours.num_layers, ours.nonlinearity, ours.bias, ours.batch_first) == (2, "relu", False, True)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]


def test_dropout_between_layers_only_in_training():
    ag.manual_seed(0)
    rng = np.random.default_rng(3)
    model = nn.LSTM(4, 6, num_layers=3, dropout=0.5)
    x = ag.tensor(rng.standard_normal((5, 2, 4)).astype(np.float32))
    first = model(x)[0].numpy()
    second = model(x)[0].numpy()
    assert not np.allclose(first, second)  # two different dropout masks
    model.eval()
    np.testing.assert_array_equal(model(x)[0].numpy(), model(x)[0].numpy())
    # In eval mode it equals torch's with the same weights.
    theirs = torch.nn.LSTM(4, 6, num_layers=3, dropout=0.5).eval()
    model.load_state_dict(theirs.state_dict())
    expected = theirs(torch.tensor(x.numpy()))[0].detach().numpy()
    np.testing.assert_allclose(model(x)[0].numpy(), expected, rtol=RTOL, atol=ATOL)


def test_trains_like_torch():
    """A few SGD steps of an LSTM + Linear on a regression target, losses step for step."""
    torch.manual_seed(2)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 6, 4)).astype(np.float32)
    y = rng.standard_normal((3, 2)).astype(np.float32)
    tl, th = torch.nn.LSTM(4, 5, batch_first=True), torch.nn.Linear(5, 2)
    al = _pair(tl, nn.LSTM(4, 5, batch_first=True))
    ah = _pair(th, nn.Linear(5, 2))
    topt = torch.optim.SGD(list(tl.parameters()) + list(th.parameters()), lr=0.5)
    aopt = ag.optim.SGD(list(al.parameters()) + list(ah.parameters()), lr=0.5)
    for _ in range(4):
        tloss = ((th(tl(torch.tensor(x))[0][:, -1]) - torch.tensor(y)) ** 2).mean()
        aloss = ((ah(al(ag.tensor(x))[0][:, -1]) - ag.tensor(y)) ** 2).mean()
        np.testing.assert_allclose(aloss.item(), tloss.item(), rtol=1e-4)
        topt.zero_grad()
        aopt.zero_grad()
        tloss.backward()
        aloss.backward()
        topt.step()
        aopt.step()


@pytest.mark.parametrize("make,message", [
    (lambda: nn.LSTM(3, 4)(ag.zeros(2, 3, 5)), "input_size"),
    (lambda: nn.GRU(3, 4)(ag.zeros(2, 3, 3), ag.zeros(2, 3, 4)), "hidden size"),
    (lambda: nn.LSTM(3, 4)(ag.zeros(2, 3, 3), ag.zeros(1, 3, 4)), "pair"),
    (lambda: nn.RNN(3, 4)(ag.zeros(2, 2, 2, 3)), "3-D"),
    (lambda: nn.RNN(3, 4, nonlinearity="gelu"), "nonlinearity"),
    (lambda: nn.LSTM(3, 4, dropout=1.5), "dropout"),
    (lambda: nn.LSTM(3, 4, proj_size=2), "proj_size"),
    (lambda: nn.LSTMCell(3, 4)(ag.zeros(2, 3), (ag.zeros(2, 5), ag.zeros(2, 5))), "hidden size"),
])
def test_bad_input_raises_a_clear_error(make, message):
    with pytest.raises(ValueError, match=message):
        make()


# ---------------------------------------------------------------- cells

CELL_CASES = [("RNNCell", dict(input_size=3, hidden_size=5)),
              ("RNNCell", dict(input_size=4, hidden_size=3, nonlinearity="relu", bias=False)),
              ("LSTMCell", dict(input_size=3, hidden_size=5)),
              ("LSTMCell", dict(input_size=6, hidden_size=2, bias=False)),
              ("GRUCell", dict(input_size=3, hidden_size=5)),
              ("GRUCell", dict(input_size=5, hidden_size=4, bias=False))]


@pytest.mark.parametrize("name,kwargs", CELL_CASES, ids=_ids(CELL_CASES))
@pytest.mark.parametrize("batched", [True, False], ids=["batched", "unbatched"])
def test_cells_match_torch_over_several_steps(name, kwargs, batched):
    torch.manual_seed(3)
    rng = np.random.default_rng(5)
    theirs = getattr(torch.nn, name)(**kwargs)
    ours = _pair(theirs, getattr(nn, name)(**kwargs))
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    batch = (3,) if batched else ()
    xs = [rng.standard_normal(batch + (kwargs["input_size"],)).astype(np.float32) for _ in range(3)]
    h0 = rng.standard_normal(batch + (kwargs["hidden_size"],)).astype(np.float32)
    th0, ah0 = torch.tensor(h0, requires_grad=True), ag.tensor(h0, requires_grad=True)
    tstate, astate = None, None
    txs = [torch.tensor(x, requires_grad=True) for x in xs]
    axs = [ag.tensor(x, requires_grad=True) for x in xs]
    for step, (tx, ax) in enumerate(zip(txs, axs)):
        if name == "LSTMCell":
            tstate = theirs(tx, tstate if step else (th0, th0 * 0.5))
            astate = ours(ax, astate if step else (ah0, ah0 * 0.5))
            for t, a in zip(tstate, astate):
                _assert_close(a, t, f"step {step}")
        else:
            tstate = theirs(tx, tstate if step else th0)
            astate = ours(ax, astate if step else ah0)
            _assert_close(astate, tstate, f"step {step}")
    tout = tstate[0] if name == "LSTMCell" else tstate
    aout = astate[0] if name == "LSTMCell" else astate
    w = rng.uniform(0.5, 1.5, size=aout.shape).astype(np.float32)
    (tout * torch.tensor(w)).sum().backward()
    (aout * ag.tensor(w)).sum().backward()
    _assert_close(ah0.grad, th0.grad, "gradient of h0")
    for i, (tx, ax) in enumerate(zip(txs, axs)):
        _assert_close(ax.grad, tx.grad, f"gradient of x{i}")
    tparams = dict(theirs.named_parameters())
    for pname, p in ours.named_parameters():
        _assert_close(p.grad, tparams[pname].grad, f"gradient of {pname}")


def test_cell_without_hidden_state_starts_from_zeros():
    torch.manual_seed(4)
    theirs = torch.nn.LSTMCell(3, 4)
    ours = _pair(theirs, nn.LSTMCell(3, 4))
    x = np.random.default_rng(6).standard_normal((2, 3)).astype(np.float32)
    for t, a in zip(theirs(torch.tensor(x)), ours(ag.tensor(x))):
        _assert_close(a, t, "LSTMCell without hx")


# ---------------------------------------------------------------- packed sequences

RU = torch.nn.utils.rnn


def _same(actual, expected, what):
    np.testing.assert_allclose(actual.numpy(), expected.detach().numpy(), rtol=RTOL, atol=ATOL, err_msg=what)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_pack_and_pad_match_torch(batch_first, enforce_sorted):
    rng = np.random.default_rng(7)
    lengths = [5, 3, 3, 1] if enforce_sorted else [3, 5, 1, 3]
    shape = (4, 5, 2) if batch_first else (5, 4, 2)
    x = rng.standard_normal(shape).astype(np.float32)
    tx, ax = torch.tensor(x, requires_grad=True), ag.tensor(x, requires_grad=True)
    tp = RU.pack_padded_sequence(tx, lengths, batch_first=batch_first, enforce_sorted=enforce_sorted)
    ap = nn.utils.rnn.pack_padded_sequence(ax, lengths, batch_first=batch_first, enforce_sorted=enforce_sorted)
    _same(ap.data, tp.data, "packed data")
    assert ap.batch_sizes.tolist() == tp.batch_sizes.tolist()
    if enforce_sorted:
        assert ap.sorted_indices is None and ap.unsorted_indices is None
    else:
        assert ap.sorted_indices.tolist() == tp.sorted_indices.tolist()
        assert ap.unsorted_indices.tolist() == tp.unsorted_indices.tolist()
    tpad, tlen = RU.pad_packed_sequence(tp, batch_first=batch_first, padding_value=-2.0, total_length=6)
    apad, alen = nn.utils.rnn.pad_packed_sequence(ap, batch_first=batch_first, padding_value=-2.0, total_length=6)
    _same(apad, tpad, "padded again")
    assert alen.tolist() == tlen.tolist()
    w = rng.uniform(0.5, 1.5, size=apad.shape).astype(np.float32)
    (tpad * torch.tensor(w)).sum().backward()
    (apad * ag.tensor(w)).sum().backward()
    _same(ax.grad, tx.grad, "gradient through pack and pad")


def test_pad_sequence_and_pack_sequence_match_torch():
    rng = np.random.default_rng(8)
    seqs = [rng.standard_normal((n, 3)).astype(np.float32) for n in (2, 5, 4)]
    for batch_first in (False, True):
        for side in ("right", "left"):
            expected = RU.pad_sequence([torch.tensor(s) for s in seqs], batch_first, 0.5, side)
            actual = nn.utils.rnn.pad_sequence([ag.tensor(s) for s in seqs], batch_first, 0.5, side)
            _same(actual, expected, f"pad_sequence batch_first={batch_first} {side}")
    tp = RU.pack_sequence([torch.tensor(s) for s in seqs], enforce_sorted=False)
    ap = nn.utils.rnn.pack_sequence([ag.tensor(s) for s in seqs], enforce_sorted=False)
    _same(ap.data, tp.data, "pack_sequence")
    for a, t in zip(nn.utils.rnn.unpack_sequence(ap), RU.unpack_sequence(tp)):
        _same(a, t, "unpack_sequence")
    with pytest.raises(ValueError, match="decreasing"):
        nn.utils.rnn.pack_sequence([ag.tensor(s) for s in seqs])


@pytest.mark.parametrize("name,kwargs", [
    ("LSTM", dict(input_size=3, hidden_size=4, num_layers=2, bidirectional=True)),
    ("GRU", dict(input_size=3, hidden_size=5, batch_first=True)),
    ("RNN", dict(input_size=3, hidden_size=4, num_layers=2)),
])
@pytest.mark.parametrize("with_hidden", [False, True], ids=["zero-state", "given-state"])
def test_rnns_on_packed_sequences_match_torch(name, kwargs, with_hidden):
    torch.manual_seed(5)
    rng = np.random.default_rng(9)
    theirs = getattr(torch.nn, name)(**kwargs)
    ours = _pair(theirs, getattr(nn, name)(**kwargs))
    lengths = [4, 6, 2]
    batch_first = kwargs.get("batch_first", False)
    x = rng.standard_normal((3, 6, 3) if batch_first else (6, 3, 3)).astype(np.float32)
    tx, ax = torch.tensor(x, requires_grad=True), ag.tensor(x, requires_grad=True)
    tp = RU.pack_padded_sequence(tx, lengths, batch_first=batch_first, enforce_sorted=False)
    ap = nn.utils.rnn.pack_padded_sequence(ax, lengths, batch_first=batch_first, enforce_sorted=False)
    hx = _hidden(rng, name, kwargs, 3) if with_hidden else None
    if hx is None:
        thx = ahx = None
    elif isinstance(hx, tuple):
        thx, ahx = tuple(torch.tensor(h) for h in hx), tuple(ag.tensor(h) for h in hx)
    else:
        thx, ahx = torch.tensor(hx), ag.tensor(hx)
    tout, tstate = theirs(tp, thx)
    aout, astate = ours(ap, ahx)
    assert isinstance(aout, nn.utils.rnn.PackedSequence)
    _same(aout.data, tout.data, "packed output")
    tstates = list(tstate) if isinstance(tstate, tuple) else [tstate]
    astates = list(astate) if isinstance(astate, tuple) else [astate]
    for a, t in zip(astates, tstates):
        _same(a, t, "final state")
    tpad, _ = RU.pad_packed_sequence(tout, batch_first=batch_first)
    apad, _ = nn.utils.rnn.pad_packed_sequence(aout, batch_first=batch_first)
    w = rng.uniform(0.5, 1.5, size=apad.shape).astype(np.float32)
    ws = rng.uniform(0.5, 1.5, size=astates[0].shape).astype(np.float32)
    ((tpad * torch.tensor(w)).sum() + (tstates[0] * torch.tensor(ws)).sum()).backward()
    ((apad * ag.tensor(w)).sum() + (astates[0] * ag.tensor(ws)).sum()).backward()
    _same(ax.grad, tx.grad, "gradient of the padded input")
    tparams = dict(theirs.named_parameters())
    for pname, p in ours.named_parameters():
        _same(p.grad, tparams[pname].grad, f"gradient of {pname}")
