"""ModuleDict, ParameterList, ParameterDict and nn.utils (gradient clipping, parameter
vectors) against torch: the same keys, the same clipped gradients and returned norms."""

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu import nn


def _state_shapes(module):
    return [(k, tuple(v.shape)) for k, v in module.state_dict().items()]


def build(lib):
    class Net(lib.Module):
        def __init__(self):
            super().__init__()
            self.heads = lib.ModuleDict({"left": lib.Linear(3, 2), "right": lib.Linear(3, 4)})
            self.heads["extra"] = lib.Sequential(lib.Linear(3, 3), lib.ReLU())
            self.scales = lib.ParameterList([lib.Parameter(lib.init.ones_(torch.empty(2)) if lib is torch.nn
                                                            else ag.ones(2)) for _ in range(2)])
            self.table = lib.ParameterDict({"b": lib.Parameter(torch.zeros(3) if lib is torch.nn else ag.zeros(3))})

        def forward(self, x):
            out = self.heads["left"](self.heads["extra"](x)) * self.scales[0] + self.scales[1]
            return out.sum() + (self.heads["right"](x + self.table["b"])).sum()

    return Net()


def test_containers_register_like_torch():
    theirs, ours = build(torch.nn), build(nn)
    assert _state_shapes(ours) == _state_shapes(theirs)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    ours.load_state_dict(theirs.state_dict())
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_allclose(ours(ag.tensor(x)).item(), theirs(torch.tensor(x)).item(), rtol=1e-5)


def test_module_dict_behaves_like_a_dict():
    d = nn.ModuleDict([("a", nn.ReLU()), ("b", nn.Tanh())])
    assert list(d) == ["a", "b"] and len(d) == 2 and "a" in d
    d.update({"c": nn.Identity()})
    assert list(d.keys()) == ["a", "b", "c"]
    assert isinstance(d.pop("b"), nn.Tanh) and "b" not in d
    del d["a"]
    assert list(d.items())[0][0] == "c"
    d.clear()
    assert len(d) == 0
    with pytest.raises(TypeError):
        nn.ModuleDict({"x": 3})


def test_parameter_list_and_dict():
    plist = nn.ParameterList([ag.ones(2), nn.Parameter(ag.zeros(3))])
    assert all(isinstance(p, nn.Parameter) for p in plist) and plist[0].requires_grad
    plist.append(ag.ones(1))
    plist += [ag.ones(4)]
    assert [tuple(p.shape) for p in plist] == [(2,), (3,), (1,), (4,)]
    assert [n for n, _ in plist.named_parameters()] == ["0", "1", "2", "3"]
    assert tuple(plist[-1].shape) == (4,)
    pdict = nn.ParameterDict({"w": ag.ones(2)})
    pdict["v"] = ag.zeros(1)
    assert list(pdict) == ["w", "v"] and isinstance(pdict["v"], nn.Parameter)
    assert pdict.get("missing") is None and "w" in pdict
    assert [n for n, _ in pdict.named_parameters()] == ["w", "v"]
    pdict.pop("w")
    assert list(pdict.keys()) == ["v"]
    with pytest.raises(TypeError):
        nn.ParameterList([3.0])


# ---------------------------------------------------------------- nn.utils

def _grads_pair(seed, shapes=((3, 4), (5,), (2, 2, 3))):
    rng = np.random.default_rng(seed)
    grads = [rng.standard_normal(s).astype(np.float32) * 3 for s in shapes]
    ours = [nn.Parameter(ag.zeros(*s)) for s in shapes]
    theirs = [torch.zeros(s, requires_grad=True) for s in shapes]
    for p, tp, g in zip(ours, theirs, grads):
        p.grad = ag.tensor(g)
        tp.grad = torch.tensor(g)
    return ours, theirs


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf"), 0.5])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    ours, theirs = _grads_pair(1)
    kept = ours[0].grad
    total = nn.utils.clip_grad_norm_(ours, max_norm, norm_type=norm_type)
    ttotal = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type=norm_type)
    assert total.shape == ()
    np.testing.assert_allclose(total.item(), ttotal.item(), rtol=1e-5)
    for p, tp in zip(ours, theirs):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-7)
    assert ours[0].grad is kept  # scaled in place


def test_clip_grad_norm_skips_missing_grads_and_accepts_one_tensor():
    p, q = nn.Parameter(ag.zeros(3)), nn.Parameter(ag.zeros(2))
    p.grad = ag.tensor([3.0, 4.0, 0.0])
    total = nn.utils.clip_grad_norm_([p, q], max_norm=1.0)
    assert total.item() == pytest.approx(5.0)
    np.testing.assert_allclose(p.grad.numpy(), [0.6, 0.8, 0.0], rtol=1e-5)
    assert q.grad is None
    assert nn.utils.clip_grad_norm_(p, 10.0).item() == pytest.approx(1.0, rel=1e-5)
    assert nn.utils.clip_grad_norm_([q], 1.0).item() == 0.0


def test_clip_grad_norm_nonfinite():
    p = nn.Parameter(ag.zeros(2))
    p.grad = ag.tensor([np.inf, 1.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    with pytest.raises(ValueError, match="norm_type"):
        nn.utils.clip_grad_norm_([p], 1.0, norm_type=-2.0)


def test_clip_grad_value_matches_torch():
    ours, theirs = _grads_pair(2)
    kept = ours[1].grad
    assert nn.utils.clip_grad_value_(ours, 1.3) is None
    torch.nn.utils.clip_grad_value_(theirs, 1.3)
    for p, tp in zip(ours, theirs):
        np.testing.assert_array_equal(p.grad.numpy(), tp.grad.numpy())
    assert ours[1].grad is kept


def test_parameters_to_vector_and_back():
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    ours = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    ours.load_state_dict(theirs.state_dict())
    vec = nn.utils.parameters_to_vector(ours.parameters())
    tvec = torch.nn.utils.parameters_to_vector(theirs.parameters())
    np.testing.assert_array_equal(vec.numpy(), tvec.detach().numpy())
    # Differentiable, as torch's: d(sum(v * w))/dp = w's pieces.
    w = np.arange(vec.numel(), dtype=np.float32)
    (vec * ag.tensor(w)).sum().backward()
    np.testing.assert_array_equal(ours[0].weight.grad.numpy(), w[:12].reshape(4, 3))
    new = np.random.default_rng(3).standard_normal(vec.numel()).astype(np.float32)
    nn.utils.vector_to_parameters(ag.tensor(new), ours.parameters())
    torch.nn.utils.vector_to_parameters(torch.tensor(new), theirs.parameters())
    for (name, p), tp in zip(ours.named_parameters(), theirs.parameters()):
        np.testing.assert_array_equal(p.numpy(), tp.detach().numpy(), err_msg=name)
    with pytest.raises(ValueError, match="elements"):
        nn.utils.vector_to_parameters(ag.zeros(3), ours.parameters())


def test_clipping_in_a_training_step_matches_torch():
    torch.manual_seed(1)
    rng = np.random.default_rng(4)
    theirs = torch.nn.Linear(6, 3)
    ours = nn.Linear(6, 3)
    ours.load_state_dict(theirs.state_dict())
    topt, aopt = torch.optim.SGD(theirs.parameters(), lr=0.1), ag.optim.SGD(ours.parameters(), lr=0.1)
    for _ in range(3):
        x = rng.standard_normal((8, 6)).astype(np.float32) * 10
        tloss = (theirs(torch.tensor(x)) ** 2).mean()
        aloss = (ours(ag.tensor(x)) ** 2).mean()
        topt.zero_grad()
        aopt.zero_grad()
        tloss.backward()
        aloss.backward()
        tn = torch.nn.utils.clip_grad_norm_(theirs.parameters(), 0.25)
        an = nn.utils.clip_grad_norm_(ours.parameters(), 0.25)
        np.testing.assert_allclose(an.item(), tn.item(), rtol=1e-4)
        topt.step()
        aopt.step()
    np.testing.assert_allclose(ours.weight.numpy(), theirs.weight.detach().numpy(), rtol=1e-4, atol=1e-6)


def test_module_list_extras_like_torch():
    ours = nn.ModuleList([nn.ReLU(), nn.Tanh()])
    theirs = torch.nn.ModuleList([torch.nn.ReLU(), torch.nn.Tanh()])
    ours += [nn.Identity()]
    theirs += [torch.nn.Identity()]
    assert isinstance(ours.pop(1), nn.Tanh) and isinstance(theirs.pop(1), torch.nn.Tanh)
    joined, tjoined = ours + nn.ModuleList([nn.Sigmoid()]), theirs + torch.nn.ModuleList([torch.nn.Sigmoid()])
    assert [type(m).__name__ for m in joined] == [type(m).__name__ for m in tjoined] == ["ReLU", "Identity", "Sigmoid"]
    assert list(joined._modules) == list(tjoined._modules) == ["0", "1", "2"]


@pytest.mark.parametrize("shape", [(6, 4), (3, 7), (4, 2, 3)])
def test_orthogonal_init(shape):
    t = nn.Parameter(ag.zeros(*shape))
    nn.init.orthogonal_(t, gain=2.0)
    flat = t.numpy().reshape(shape[0], -1)
    small = min(flat.shape)
    gram = flat.T @ flat if flat.shape[0] >= flat.shape[1] else flat @ flat.T
    np.testing.assert_allclose(gram, 4.0 * np.eye(small), atol=1e-5)


def test_eye_and_dirac_init_match_torch():
    ours, theirs = nn.Parameter(ag.zeros(3, 5)), torch.zeros(3, 5)
    nn.init.eye_(ours)
    torch.nn.init.eye_(theirs)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    for shape, groups in [((4, 2, 3), 2), ((6, 3, 3, 3), 1), ((4, 2, 3, 3), 2)]:
        ours, theirs = nn.Parameter(ag.zeros(*shape)), torch.zeros(shape)
        nn.init.dirac_(ours, groups)
        torch.nn.init.dirac_(theirs, groups)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
