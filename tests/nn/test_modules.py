"""ag.nn modules against torch.nn: names, shapes, state dicts, initialisation, forward passes.

The same builder code makes a torch model and an anygpu one (it is given `torch.nn`
or `anygpu.nn`), so every comparison is against an independent torch reference."""

import copy
import math

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu import io, nn

RTOL, ATOL = 1e-4, 1e-5


def build_net(lib):
    """A model touching every parametrised layer (the same code for torch.nn and ag.nn)."""

    class Net(lib.Module):
        def __init__(self):
            super().__init__()
            self.conv = lib.Conv2d(3, 8, 3, padding=1)
            self.bn = lib.BatchNorm2d(8)
            self.gn = lib.GroupNorm(2, 8)
            self.up = lib.ConvTranspose2d(8, 4, 2, stride=2, bias=False)
            self.pool = lib.MaxPool2d(2)
            self.avg = lib.AvgPool2d(4)
            self.proj = lib.Linear(4, 16)
            self.blocks = lib.ModuleList([lib.Sequential(lib.Linear(16, 16), lib.GELU()) for _ in range(2)])
            self.ln = lib.LayerNorm(16)
            self.emb = lib.Embedding(10, 16, padding_idx=0)
            self.attn = lib.MultiheadAttention(16, 4, batch_first=True)
            self.head = lib.Sequential(lib.Flatten(), lib.Dropout(0.1), lib.Linear(16 * 4, 3))

        def forward(self, image, tokens):
            x = self.gn(self.bn(self.conv(image)).relu())
            x = self.avg(self.pool(self.up(x)))           # (N, 4, 2, 2)
            x = self.proj(x.flatten(2).transpose(1, 2))     # (N, 4, 16)
            x = x + self.emb(tokens)
            for block in self.blocks:
                x = x + block(x)
            x = self.ln(x)
            x = x + self.attn(x, x, x, need_weights=False)[0]
            return self.head(x)

    return Net()


def build_seq(lib):
    return lib.Sequential(lib.Conv2d(1, 4, 3, stride=2, bias=False), lib.BatchNorm2d(4), lib.SiLU(),
                          lib.Conv2d(4, 4, 3, padding=1, groups=2), lib.Tanh(), lib.Flatten(),
                          lib.Linear(4 * 3 * 3, 5), lib.Sigmoid(), lib.Identity())


def _shapes(named):
    return [(name, tuple(t.shape)) for name, t in named]


def _torch_state_as_numpy(model):
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


# ---------------------------------------------------------------- structure

@pytest.mark.parametrize("builder", [build_net, build_seq])
def test_names_and_shapes_equal_torch(builder):
    ours, theirs = builder(nn), builder(torch.nn)
    assert _shapes(ours.named_parameters()) == _shapes(theirs.named_parameters())
    assert _shapes(ours.named_buffers()) == _shapes(theirs.named_buffers())
    assert _shapes(ours.state_dict().items()) == _shapes(theirs.state_dict().items())
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    assert [n for n, _ in ours.named_children()] == [n for n, _ in theirs.named_children()]


@pytest.mark.parametrize("make", [
    lambda lib: lib.MultiheadAttention(8, 2, kdim=6, vdim=4),
    lambda lib: lib.MultiheadAttention(8, 2, bias=False),
    lambda lib: lib.LayerNorm((4, 5), bias=False),
    lambda lib: lib.LayerNorm(4, elementwise_affine=False),
    lambda lib: lib.GroupNorm(2, 4, affine=False),
    lambda lib: lib.BatchNorm2d(3, affine=False, track_running_stats=False),
    lambda lib: lib.ConvTranspose2d(4, 6, (3, 2), stride=2, padding=1, output_padding=1, groups=2),
    lambda lib: lib.Linear(3, 2, bias=False),
])
def test_layer_variants_state_dict_equal_torch(make):
    ours, theirs = make(nn), make(torch.nn)
    assert _shapes(ours.state_dict().items()) == _shapes(theirs.state_dict().items())
    assert _shapes(ours.named_parameters()) == _shapes(theirs.named_parameters())


@pytest.mark.skipif(tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) < (2, 13),
                    reason="our repr follows torch 2.13 (norm layers print bias=); older torch prints less")
def test_repr_equals_torch():
    ours, theirs = build_seq(nn), build_seq(torch.nn)
    assert repr(ours) == repr(theirs)
    for make in (lambda lib: lib.GroupNorm(2, 8), lambda lib: lib.LayerNorm(16), lambda lib: lib.GELU(),
                 lambda lib: lib.Embedding(10, 16, padding_idx=0), lambda lib: lib.Dropout(0.1),
                 lambda lib: lib.MaxPool2d(2), lambda lib: lib.AvgPool2d(3, 2, 1),
                 lambda lib: lib.ConvTranspose2d(8, 4, 2, stride=2, bias=False)):
        assert repr(make(nn)) == repr(make(torch.nn))


def test_parameter_is_a_tensor_and_registration_rules():
    layer = nn.Linear(3, 2)
    assert isinstance(layer.weight, nn.Parameter) and isinstance(layer.weight, ag.Tensor)
    assert layer.weight.requires_grad and layer.weight.is_leaf
    assert isinstance(layer.weight * 2, ag.Tensor) and not isinstance(layer.weight * 2, nn.Parameter)
    with pytest.raises(TypeError, match="Parameter or None"):
        layer.weight = ag.zeros(2, 3)
    layer.bias = None
    assert [n for n, _ in layer.named_parameters()] == ["weight"]
    module = nn.Module()
    module.register_buffer("seen", ag.zeros(2), persistent=False)
    module.register_buffer("kept", ag.ones(2))
    assert list(module.state_dict()) == ["kept"]
    assert [n for n, _ in module.named_buffers()] == ["seen", "kept"]


def test_shared_parameters_are_listed_once():
    shared = nn.Linear(2, 2)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    assert len(list(model.parameters())) == 2
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias"]


def test_containers():
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert len(seq) == 3 and isinstance(seq[-1], nn.Linear) and isinstance(seq[1], nn.ReLU)
    assert [type(m).__name__ for m in seq] == ["Linear", "ReLU", "Linear"]
    head = seq[1:]
    assert isinstance(head, nn.Sequential) and [n for n, _ in head.named_children()] == ["1", "2"]
    seq.append(nn.Sigmoid())
    assert len(seq) == 4 and list(seq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    with pytest.raises(IndexError):
        seq[4]
    layers = nn.ModuleList([nn.Linear(1, 1)])
    layers.append(nn.Linear(1, 2))
    layers.extend([nn.Linear(2, 3)])
    layers.insert(0, nn.Identity())
    assert len(layers) == 4 and isinstance(layers[0], nn.Identity)
    assert list(layers.state_dict()) == [f"{i}.{p}" for i in (1, 2, 3) for p in ("weight", "bias")]
    del layers[0]
    assert list(layers.state_dict())[0] == "0.weight"


def test_train_eval_zero_grad_to_and_children():
    model = build_seq(nn)
    assert model.training and all(m.training for m in model.modules())
    assert model.eval() is model and not any(m.training for m in model.modules())
    model.train()
    assert all(m.training for m in model.modules())
    assert model.to("cuda") is model and model.to(ag.gpu()) is model
    assert len(list(model.children())) == 9
    for p in model.parameters():
        p.grad = ag.ones(*p.shape)
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_deepcopy_has_its_own_buffers():
    model = build_seq(nn)
    twin = copy.deepcopy(model)
    for (name, a), (_, b) in zip(model.state_dict().items(), twin.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
    nn.init.zeros_(twin[0].weight)
    assert twin[0].weight._buf is not model[0].weight._buf
    assert np.abs(model[0].weight.numpy()).sum() > 0


# ---------------------------------------------------------------- initialisation

def _uniform_bound(torch_weight):
    fan_in, _ = torch.nn.init._calculate_fan_in_and_fan_out(torch_weight)
    return 1.0 / math.sqrt(fan_in)


@pytest.mark.parametrize("make", [
    lambda lib: lib.Linear(256, 64),
    lambda lib: lib.Conv2d(8, 32, 3),
    lambda lib: lib.Conv2d(8, 32, (3, 1), groups=4),
    lambda lib: lib.ConvTranspose2d(8, 32, 3, groups=2),
])
def test_kaiming_uniform_bounds_as_torch(make):
    ag.manual_seed(0)
    ours, theirs = make(nn), make(torch.nn)
    bound = _uniform_bound(theirs.weight)  # torch's fan_in for this layer
    for values in (ours.weight.numpy(), ours.bias.numpy()):
        assert np.abs(values).max() <= bound
    weight = ours.weight.numpy()
    assert np.abs(weight).max() > 0.95 * bound  # the whole range is used
    std = bound / math.sqrt(3)  # of U(-bound, bound)
    assert abs(weight.mean()) < 4 * std / math.sqrt(weight.size)  # 4 standard errors
    np.testing.assert_allclose(weight.std(), std, rtol=2 * math.sqrt(0.8 / weight.size))


def test_norm_embedding_and_attention_init():
    ag.manual_seed(1)
    for layer in (nn.GroupNorm(2, 6), nn.LayerNorm(6), nn.BatchNorm2d(6)):
        np.testing.assert_array_equal(layer.weight.numpy(), np.ones(6, np.float32))
        np.testing.assert_array_equal(layer.bias.numpy(), np.zeros(6, np.float32))
    bn = nn.BatchNorm2d(6)
    np.testing.assert_array_equal(bn.running_mean.numpy(), np.zeros(6))
    np.testing.assert_array_equal(bn.running_var.numpy(), np.ones(6))
    assert bn.num_batches_tracked.item() == 0
    emb = nn.Embedding(400, 50, padding_idx=3).weight.numpy()
    np.testing.assert_array_equal(emb[3], np.zeros(50))
    assert abs(emb.mean()) < 0.02 and abs(emb.std() - 1.0) < 0.02
    attn = nn.MultiheadAttention(32, 4)
    in_proj = attn.in_proj_weight.numpy()
    bound = math.sqrt(6.0 / (32 + 96))  # xavier_uniform over (3E, E)
    assert np.abs(in_proj).max() <= bound and np.abs(in_proj).max() > 0.95 * bound
    assert not attn.in_proj_bias.numpy().any() and not attn.out_proj.bias.numpy().any()
    assert np.abs(attn.out_proj.weight.numpy()).max() <= 1 / math.sqrt(32)


def test_init_follows_the_seed():
    ag.manual_seed(7)
    a = nn.Linear(5, 5).weight.numpy()
    ag.manual_seed(7)
    b = nn.Linear(5, 5).weight.numpy()
    c = nn.Linear(5, 5).weight.numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(b, c)


# ---------------------------------------------------------------- load_state_dict

def test_loads_a_torch_state_dict():
    theirs = build_net(torch.nn)
    with torch.no_grad():
        theirs.bn.running_mean.uniform_(-1, 1)
        theirs.bn.running_var.uniform_(0.5, 2)
        theirs.bn.num_batches_tracked += 5
    ours = build_net(nn)
    result = ours.load_state_dict(theirs.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    expected = _torch_state_as_numpy(theirs)
    for key, value in ours.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), expected[key], err_msg=key)
    assert ours.bn.num_batches_tracked.item() == 5


def test_state_dict_round_trip_through_a_checkpoint(tmp_path):
    ag.manual_seed(3)
    source = build_seq(nn)
    io.save(source.state_dict(), tmp_path / "model.safetensors")
    target = build_seq(nn)
    target.load_state_dict(io.load(tmp_path / "model.safetensors"))
    for (key, a), (_, b) in zip(source.state_dict().items(), target.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=key)


def test_load_state_dict_errors_name_keys_and_change_nothing():
    model = build_seq(nn)
    before = {k: v.numpy() for k, v in model.state_dict().items()}
    good = {k: np.full(v.shape, 0.5, np.float32) for k, v in before.items()}
    bad = dict(good)
    bad["6.weight"] = np.zeros((5, 4), np.float32)
    with pytest.raises(RuntimeError, match=r"size mismatch for 6\.weight.*\(5, 4\).*\(5, 36\)"):
        model.load_state_dict(bad)
    with pytest.raises(ValueError):  # the same error is also a ValueError
        model.load_state_dict(bad)
    missing = {k: v for k, v in good.items() if k != "0.weight"}
    missing["extra.weight"] = np.zeros(1, np.float32)
    with pytest.raises(RuntimeError, match=r'Missing key\(s\).*"0\.weight"[\s\S]*Unexpected key\(s\).*"extra'):
        model.load_state_dict(missing)
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), before[key], err_msg=key)
    result = model.load_state_dict(missing, strict=False)
    assert result.missing_keys == ["0.weight"] and result.unexpected_keys == ["extra.weight"]
    np.testing.assert_array_equal(model[6].weight.numpy(), good["6.weight"])
    np.testing.assert_array_equal(model[0].weight.numpy(), before["0.weight"])


def test_old_checkpoints_without_num_batches_tracked_load():
    model = nn.BatchNorm2d(3)
    state = {k: v.numpy() for k, v in model.state_dict().items() if k != "num_batches_tracked"}
    assert model.load_state_dict(state).missing_keys == []


# ---------------------------------------------------------------- forward passes (torch weights)

def _load_from_torch(ours, theirs):
    ours.load_state_dict(theirs.state_dict())
    return ours


def _close(ours_out, torch_out, what=""):
    np.testing.assert_allclose(ours_out.numpy(), torch_out.detach().numpy(), rtol=RTOL, atol=ATOL, err_msg=what)


LAYERS = [
    ("linear", lambda lib: lib.Linear(6, 4), (3, 6)),
    ("linear3d", lambda lib: lib.Linear(6, 4, bias=False), (2, 3, 6)),
    ("conv", lambda lib: lib.Conv2d(3, 4, 3, stride=2, padding=1), (2, 3, 7, 7)),
    ("conv_groups", lambda lib: lib.Conv2d(4, 6, (3, 1), dilation=(1, 2), groups=2, bias=False), (1, 4, 6, 6)),
    ("conv_transpose", lambda lib: lib.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1),
     (2, 4, 4, 4)),
    ("group_norm", lambda lib: lib.GroupNorm(2, 4), (2, 4, 3, 3)),
    ("layer_norm", lambda lib: lib.LayerNorm(5), (2, 3, 5)),
    ("relu", lambda lib: lib.ReLU(), (3, 4)),
    ("silu", lambda lib: lib.SiLU(), (3, 4)),
    ("gelu", lambda lib: lib.GELU(), (3, 4)),
    ("gelu_tanh", lambda lib: lib.GELU(approximate="tanh"), (3, 4)),
    ("sigmoid", lambda lib: lib.Sigmoid(), (3, 4)),
    ("tanh", lambda lib: lib.Tanh(), (3, 4)),
    ("flatten", lambda lib: lib.Flatten(), (2, 3, 2, 2)),
    ("max_pool", lambda lib: lib.MaxPool2d(2), (1, 2, 4, 6)),
    ("avg_pool", lambda lib: lib.AvgPool2d(3, stride=2, padding=1), (1, 2, 5, 5)),
    ("identity", lambda lib: lib.Identity(), (2, 2)),
]


def _randomise(theirs):
    """Non-trivial affine parameters (norm layers start at ones/zeros)."""
    with torch.no_grad():
        for p in theirs.parameters():
            p.uniform_(-1.0, 1.0)


@pytest.mark.parametrize("name,make,shape", LAYERS, ids=[layer[0] for layer in LAYERS])
def test_layer_forward_and_gradients_match_torch(name, make, shape):
    torch.manual_seed(0)
    theirs = make(torch.nn)
    _randomise(theirs)
    ours = _load_from_torch(make(nn), theirs)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    ax = ag.tensor(x, requires_grad=True)
    out, tout = ours(ax), theirs(tx)
    _close(out, tout, name)
    (out * out).sum().backward()
    (tout * tout).sum().backward()
    _close(ax.grad, tx.grad, f"{name} input grad")
    for (pname, p), (_, tp) in zip(ours.named_parameters(), theirs.named_parameters()):
        _close(p.grad, tp.grad, f"{name} {pname} grad")


def test_embedding_forward():
    theirs = torch.nn.Embedding(10, 4, padding_idx=2)
    ours = _load_from_torch(nn.Embedding(10, 4, padding_idx=2), theirs)
    idx = np.array([[1, 2, 9], [0, 2, 5]])
    _close(ours(ag.tensor(idx)), theirs(torch.tensor(idx)))


@pytest.mark.parametrize("momentum", [0.2, None])  # None: a cumulative average
def test_batch_norm_train_updates_running_stats_and_eval_uses_them(momentum):
    theirs = torch.nn.BatchNorm2d(3, momentum=momentum)
    _randomise(theirs)
    ours = _load_from_torch(nn.BatchNorm2d(3, momentum=momentum), theirs)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = (rng.standard_normal((4, 3, 3, 3)) * 2 + 1).astype(np.float32)
        _close(ours(ag.tensor(x)), theirs(torch.tensor(x)), "train output")
    _close(ours.running_mean, theirs.running_mean, "running_mean")
    _close(ours.running_var, theirs.running_var, "running_var")
    assert ours.num_batches_tracked.item() == theirs.num_batches_tracked.item() == 3
    ours.eval()
    theirs.eval()
    x = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    _close(ours(ag.tensor(x)), theirs(torch.tensor(x)), "eval output")


def test_dropout_train_and_eval():
    drop = nn.Dropout(0.5)
    x = ag.ones(1000)
    y = drop(x).numpy()
    assert set(np.unique(y)) <= {0.0, 2.0} and 0.35 < (y == 0).mean() < 0.65
    drop.eval()
    np.testing.assert_array_equal(drop(x).numpy(), np.ones(1000))


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_matches_torch(batch_first, need_weights):
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(8, 2, batch_first=batch_first)
    _randomise(theirs)
    ours = _load_from_torch(nn.MultiheadAttention(8, 2, batch_first=batch_first), theirs)
    rng = np.random.default_rng(1)
    shape_q, shape_kv = ((2, 3, 8), (2, 5, 8)) if batch_first else ((3, 2, 8), (5, 2, 8))
    q = rng.standard_normal(shape_q).astype(np.float32)
    kv = rng.standard_normal(shape_kv).astype(np.float32)
    padding = np.array([[False, False, False, True, True], [False, False, False, False, False]])
    out, weights = ours(ag.tensor(q), ag.tensor(kv), ag.tensor(kv), key_padding_mask=padding,
                        need_weights=need_weights)
    tout, tweights = theirs(torch.tensor(q), torch.tensor(kv), torch.tensor(kv),
                            key_padding_mask=torch.tensor(padding), need_weights=need_weights)
    _close(out, tout, "output")
    if need_weights:
        _close(weights, tweights, "weights")
    else:
        assert weights is None


def test_multihead_self_attention_causal_and_gradients():
    torch.manual_seed(1)
    theirs = torch.nn.MultiheadAttention(8, 4, batch_first=True)
    _randomise(theirs)
    ours = _load_from_torch(nn.MultiheadAttention(8, 4, batch_first=True), theirs)
    x = np.random.default_rng(2).standard_normal((2, 4, 8)).astype(np.float32)
    causal = np.triu(np.ones((4, 4), bool), k=1)
    ax, tx = ag.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, weights = ours(ax, ax, ax, attn_mask=causal, average_attn_weights=False)
    tout, tweights = theirs(tx, tx, tx, attn_mask=torch.tensor(causal), average_attn_weights=False)
    _close(out, tout, "output")
    _close(weights, tweights, "per-head weights")
    out.sum().backward()
    tout.sum().backward()
    _close(ax.grad, tx.grad, "input grad")
    _close(ours.in_proj_weight.grad, theirs.in_proj_weight.grad, "in_proj_weight grad")
    causal_out, _ = ours(ag.tensor(x), ag.tensor(x), ag.tensor(x), is_causal=True, need_weights=False)
    _close(causal_out, tout, "is_causal")


def test_whole_model_forward_matches_torch():
    torch.manual_seed(2)
    theirs = build_net(torch.nn).eval()
    _randomise(theirs)
    ours = _load_from_torch(build_net(nn), theirs).eval()
    rng = np.random.default_rng(3)
    image = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    tokens = rng.integers(0, 10, (2, 4))
    _close(ours(ag.tensor(image), ag.tensor(tokens)), theirs(torch.tensor(image), torch.tensor(tokens)))


def test_multihead_attention_cross_dims_and_unbatched():
    torch.manual_seed(3)
    theirs = torch.nn.MultiheadAttention(8, 2, kdim=6, vdim=4)
    _randomise(theirs)
    ours = _load_from_torch(nn.MultiheadAttention(8, 2, kdim=6, vdim=4), theirs)
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((3, 8), (5, 6), (5, 4)))  # unbatched
    out, weights = ours(ag.tensor(q), ag.tensor(k), ag.tensor(v))
    tout, tweights = theirs(torch.tensor(q), torch.tensor(k), torch.tensor(v))
    _close(out, tout, "output")
    _close(weights, tweights, "weights")


def test_loss_and_resampling_modules_match_torch():
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((4, 3)).astype(np.float32)
    labels = np.array([0, 2, 1, 2])
    target = rng.standard_normal((4, 3)).astype(np.float32)
    _close(nn.CrossEntropyLoss()(ag.tensor(logits), ag.tensor(labels)),
           torch.nn.CrossEntropyLoss()(torch.tensor(logits), torch.tensor(labels)))
    _close(nn.MSELoss(reduction="sum")(ag.tensor(logits), ag.tensor(target)),
           torch.nn.MSELoss(reduction="sum")(torch.tensor(logits), torch.tensor(target)))
    image = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    _close(nn.Upsample(scale_factor=2)(ag.tensor(image)), torch.nn.Upsample(scale_factor=2)(torch.tensor(image)))
    _close(nn.Softmax(dim=1)(ag.tensor(logits)), torch.nn.Softmax(dim=1)(torch.tensor(logits)))
