"""Transformer, TransformerEncoder(Layer), TransformerDecoder(Layer) against torch.nn:
torch's weights loaded through load_state_dict (same keys), dropout 0 so both are
deterministic, then outputs and the gradients of inputs and every parameter compared,
with bool and float masks, key padding masks, batch_first both ways, norm_first both ways."""

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu import nn

RTOL, ATOL = 1e-4, 2e-5
torch.set_num_threads(1)
# torch's own notes on nested tensors and mixed mask types are not about anygpu.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _keys_and_shapes(module):
    return [(k, tuple(v.shape)) for k, v in module.state_dict().items()]


def _load(theirs, ours):
    assert _keys_and_shapes(ours) == _keys_and_shapes(theirs)
    ours.load_state_dict(theirs.state_dict())
    return ours


def _to_torch(value):
    if value is None:
        return None
    return torch.tensor(value) if isinstance(value, np.ndarray) else value


def _to_ours(value):
    return None if value is None else ag.tensor(value)


def _compare(theirs, ours, arrays, kwargs_np=None, rtol=RTOL, atol=ATOL):
    """Forward both with float inputs `arrays` (positional) and masks `kwargs_np`,
    compare the output, then the gradients of every input and parameter."""
    kwargs_np = kwargs_np or {}
    tin = [torch.tensor(a, requires_grad=True) for a in arrays]
    ain = [ag.tensor(a, requires_grad=True) for a in arrays]
    tout = theirs(*tin, **{k: _to_torch(v) for k, v in kwargs_np.items()})
    aout = ours(*ain, **{k: _to_ours(v) for k, v in kwargs_np.items()})
    assert aout.shape == tuple(tout.shape)
    np.testing.assert_allclose(aout.numpy(), tout.detach().numpy(), rtol=rtol, atol=atol, err_msg="output")
    w = np.random.default_rng(11).uniform(0.5, 1.5, size=aout.shape).astype(np.float32)
    (tout * torch.tensor(w)).sum().backward()
    (aout * ag.tensor(w)).sum().backward()
    for i, (t, a) in enumerate(zip(tin, ain)):
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {i}")
    tparams = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), tparams[name].grad.numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"gradient of {name}")


def _causal_bool(n):
    return np.triu(np.ones((n, n), bool), k=1)


def _padding(batch, length, rng):
    mask = np.zeros((batch, length), bool)
    for b in range(batch):
        mask[b, length - 1 - b % max(length - 1, 1):] = True  # pad the tail, never every position
    return mask


LAYER_CASES = [
    dict(batch_first=False, norm_first=False, activation="relu"),
    dict(batch_first=True, norm_first=True, activation="gelu"),
    dict(batch_first=True, norm_first=False, activation="gelu", bias=False, layer_norm_eps=1e-3),
]


def _layer_ids(cases):
    return ["-".join(f"{k}={v}" for k, v in c.items()) for c in cases]


@pytest.mark.parametrize("options", LAYER_CASES, ids=_layer_ids(LAYER_CASES))
@pytest.mark.parametrize("masks", ["none", "bool", "float"])
def test_encoder_layer(options, masks):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    d_model, nhead, ff, length, batch = 12, 3, 20, 5, 3
    theirs = torch.nn.TransformerEncoderLayer(d_model, nhead, ff, dropout=0.0, **options)
    ours = _load(theirs, nn.TransformerEncoderLayer(d_model, nhead, ff, dropout=0.0, **options))
    shape = (batch, length, d_model) if options["batch_first"] else (length, batch, d_model)
    x = rng.standard_normal(shape).astype(np.float32)
    kwargs = {}
    if masks == "bool":
        kwargs = dict(src_mask=_causal_bool(length), src_key_padding_mask=_padding(batch, length, rng))
    elif masks == "float":
        kwargs = dict(src_mask=rng.standard_normal((length, length)).astype(np.float32),
                      src_key_padding_mask=np.where(_padding(batch, length, rng), -1e4, 0.0).astype(np.float32))
    _compare(theirs, ours, [x], kwargs)


@pytest.mark.parametrize("options", LAYER_CASES, ids=_layer_ids(LAYER_CASES))
@pytest.mark.parametrize("masks", ["none", "bool"])
def test_decoder_layer(options, masks):
    torch.manual_seed(1)
    rng = np.random.default_rng(1)
    d_model, nhead, ff, tgt_len, src_len, batch = 8, 2, 16, 4, 6, 2
    theirs = torch.nn.TransformerDecoderLayer(d_model, nhead, ff, dropout=0.0, **options)
    ours = _load(theirs, nn.TransformerDecoderLayer(d_model, nhead, ff, dropout=0.0, **options))
    first = options["batch_first"]
    tgt = rng.standard_normal((batch, tgt_len, d_model) if first else (tgt_len, batch, d_model)).astype(np.float32)
    memory = rng.standard_normal((batch, src_len, d_model) if first else (src_len, batch, d_model))
    kwargs = {}
    if masks == "bool":
        memory_mask = np.zeros((tgt_len, src_len), bool)
        memory_mask[0, -1] = True
        kwargs = dict(tgt_mask=_causal_bool(tgt_len), memory_mask=memory_mask,
                      tgt_key_padding_mask=_padding(batch, tgt_len, rng),
                      memory_key_padding_mask=_padding(batch, src_len, rng))
    _compare(theirs, ours, [tgt, memory.astype(np.float32)], kwargs)


@pytest.mark.parametrize("batch_first", [False, True])
def test_encoder_stack_with_final_norm(batch_first):
    torch.manual_seed(2)
    rng = np.random.default_rng(2)
    layer = torch.nn.TransformerEncoderLayer(8, 4, 12, dropout=0.0, batch_first=batch_first)
    theirs = torch.nn.TransformerEncoder(layer, num_layers=3, norm=torch.nn.LayerNorm(8),
                                         enable_nested_tensor=False)
    ours_layer = nn.TransformerEncoderLayer(8, 4, 12, dropout=0.0, batch_first=batch_first)
    ours = _load(theirs, nn.TransformerEncoder(ours_layer, num_layers=3, norm=nn.LayerNorm(8)))
    x = rng.standard_normal((2, 7, 8) if batch_first else (7, 2, 8)).astype(np.float32)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(7).numpy()
    _compare(theirs, ours, [x], dict(mask=mask, src_key_padding_mask=_padding(2, 7, rng)))


def test_decoder_stack():
    torch.manual_seed(3)
    rng = np.random.default_rng(3)
    theirs = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(8, 2, 10, dropout=0.0), num_layers=2)
    ours = _load(theirs, nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 10, dropout=0.0), num_layers=2))
    tgt = rng.standard_normal((5, 3, 8)).astype(np.float32)
    memory = rng.standard_normal((4, 3, 8)).astype(np.float32)
    _compare(theirs, ours, [tgt, memory], dict(tgt_mask=_causal_bool(5)))


@pytest.mark.parametrize("batch_first,norm_first", [(False, False), (True, True)])
def test_full_transformer(batch_first, norm_first):
    torch.manual_seed(4)
    rng = np.random.default_rng(4)
    options = dict(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=16, dropout=0.0,
                   batch_first=batch_first, norm_first=norm_first)
    theirs = torch.nn.Transformer(**options)
    ours = _load(theirs, nn.Transformer(**options))
    src_len, tgt_len, batch = 6, 5, 2
    src = rng.standard_normal((batch, src_len, 8) if batch_first else (src_len, batch, 8)).astype(np.float32)
    tgt = rng.standard_normal((batch, tgt_len, 8) if batch_first else (tgt_len, batch, 8)).astype(np.float32)
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(tgt_len).numpy()
    _compare(theirs, ours, [src, tgt], dict(tgt_mask=tgt_mask, src_key_padding_mask=_padding(batch, src_len, rng),
                                            memory_key_padding_mask=_padding(batch, src_len, rng)))


def test_unbatched_encoder_layer():
    torch.manual_seed(5)
    theirs = torch.nn.TransformerEncoderLayer(6, 2, 10, dropout=0.0)
    ours = _load(theirs, nn.TransformerEncoderLayer(6, 2, 10, dropout=0.0))
    x = np.random.default_rng(5).standard_normal((4, 6)).astype(np.float32)
    _compare(theirs, ours, [x], dict(src_mask=_causal_bool(4)))


def test_callable_activation_and_module_activation():
    torch.manual_seed(6)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 2, 4)).astype(np.float32)
    theirs = torch.nn.TransformerEncoderLayer(4, 1, 8, dropout=0.0, activation=torch.nn.functional.silu)
    ours = _load(theirs, nn.TransformerEncoderLayer(4, 1, 8, dropout=0.0, activation=nn.functional.silu))
    _compare(theirs, ours, [x])
    theirs = torch.nn.TransformerEncoderLayer(4, 1, 8, dropout=0.0, activation=torch.nn.Tanh())
    ours = _load(theirs, nn.TransformerEncoderLayer(4, 1, 8, dropout=0.0, activation=nn.Tanh()))
    _compare(theirs, ours, [x])


def test_defaults_names_and_init_match_torch():
    ours, theirs = nn.Transformer(d_model=16, nhead=4, num_encoder_layers=1, num_decoder_layers=1), \
        torch.nn.Transformer(d_model=16, nhead=4, num_encoder_layers=1, num_decoder_layers=1)
    assert _keys_and_shapes(ours) == _keys_and_shapes(theirs)
    layer = nn.TransformerEncoderLayer(16, 4)
    assert layer.linear1.out_features == 2048 and layer.dropout.p == 0.1 and layer.norm1.eps == 1e-5
    assert not layer.self_attn.batch_first and not layer.norm_first
    # Every matrix is xavier_uniform: |w| <= sqrt(6 / (fan_in + fan_out)).
    for name, p in ours.named_parameters():
        if p.ndim > 1:
            bound = np.sqrt(6.0 / (p.shape[0] + p.shape[1]))
            assert np.abs(p.numpy()).max() <= bound, name
    # Independent copies: each layer of a stack has its own buffers.
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 8), num_layers=2)
    a, b = encoder.layers[0].linear1.weight, encoder.layers[1].linear1.weight
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    ag.nn.init.zeros_(a)
    assert np.abs(b.numpy()).max() > 0


def test_generate_square_subsequent_mask_matches_torch():
    ours = nn.Transformer.generate_square_subsequent_mask(5).numpy()
    np.testing.assert_array_equal(ours, torch.nn.Transformer.generate_square_subsequent_mask(5).numpy())


def test_training_steps_match_torch():
    """A tiny causal language model on the encoder: Adam steps, losses compared step for step."""
    torch.manual_seed(7)
    rng = np.random.default_rng(7)
    vocab, d_model, length, batch = 11, 8, 6, 3
    tokens = rng.integers(0, vocab, size=(batch, length + 1))

    def build(lib):
        class LM(lib.Module):
            def __init__(self):
                super().__init__()
                self.emb = lib.Embedding(vocab, d_model)
                layer = lib.TransformerEncoderLayer(d_model, 2, 16, dropout=0.0, batch_first=True)
                self.body = lib.TransformerEncoder(layer, 2, **({"enable_nested_tensor": False}
                                                                  if lib is torch.nn else {}))
                self.head = lib.Linear(d_model, vocab)

            def forward(self, idx, mask):
                return self.head(self.body(self.emb(idx), mask=mask))
        return LM()

    theirs = build(torch.nn)
    ours = _load(theirs, build(nn))
    mask = nn.Transformer.generate_square_subsequent_mask(length)
    tmask = torch.nn.Transformer.generate_square_subsequent_mask(length)
    topt = torch.optim.Adam(theirs.parameters(), lr=1e-2)
    aopt = ag.optim.Adam(ours.parameters(), lr=1e-2)
    x, y = tokens[:, :-1], tokens[:, 1:]
    for _ in range(3):
        tloss = torch.nn.functional.cross_entropy(theirs(torch.tensor(x), tmask).reshape(-1, vocab),
                                                  torch.tensor(y).reshape(-1))
        aloss = nn.functional.cross_entropy(ours(ag.tensor(x.astype(np.int32)), mask).reshape(-1, vocab),
                                            ag.tensor(y.astype(np.int32)).reshape(-1))
        np.testing.assert_allclose(aloss.item(), tloss.item(), rtol=1e-4)
        topt.zero_grad()
        aopt.zero_grad()
        tloss.backward()
        aloss.backward()
        topt.step()
        aopt.step()


def test_bad_input_raises():
    model = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=8)
    with pytest.raises(ValueError, match="batch number"):
        model(ag.zeros(3, 2, 8), ag.zeros(3, 4, 8))
    with pytest.raises(ValueError, match="d_model"):
        model(ag.zeros(3, 2, 6), ag.zeros(3, 2, 6))
    with pytest.raises(ValueError, match="relu/gelu"):
        nn.TransformerEncoderLayer(8, 2, activation="swish")
