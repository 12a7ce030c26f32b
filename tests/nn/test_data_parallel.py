"""nn.DataParallel / nn.parallel.data_parallel against torch's (on the CPU, where torch's
DataParallel runs the module itself, as anygpu does on its one adapter per process)."""

import warnings

import numpy as np
import pytest

import anygpu as ag
from anygpu import placement
from anygpu.nn import parallel

torch = pytest.importorskip("torch")


def _pair(rng):
    """The same two-layer network in both libraries."""
    ours = ag.nn.Sequential(ag.nn.Linear(5, 7), ag.nn.ReLU(), ag.nn.Linear(7, 3))
    theirs = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3))
    for (name, p), (t_name, tp) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert name == t_name
        value = rng.standard_normal(tuple(tp.shape)).astype(np.float32)
        with torch.no_grad():
            tp.copy_(torch.tensor(value))
        p.data = ag.tensor(value)
    return ours, theirs


@pytest.fixture(autouse=True)
def _torch_on_the_cpu(monkeypatch):
    """The oracle is torch on the CPU: on a CUDA machine torch's DataParallel would move the
    module to the GPU (its outputs then refuse .numpy())."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def test_wrapper_matches_torch(rng):
    ours, theirs = _pair(rng)
    dp, t_dp = ag.nn.DataParallel(ours), torch.nn.DataParallel(theirs)
    assert dp.module is ours and t_dp.module is theirs
    assert list(dp.state_dict()) == list(t_dp.state_dict()) == [
        "module.0.weight", "module.0.bias", "module.2.weight", "module.2.bias"]
    assert dp.dim == 0 and dp.device_ids[0] == placement.current_index() == dp.output_device
    x = rng.standard_normal((6, 5)).astype(np.float32)
    opt = ag.optim.SGD(dp.parameters(), lr=0.1)
    t_opt = torch.optim.SGD(t_dp.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        t_opt.zero_grad()
        out, t_out = dp(ag.tensor(x)), t_dp(torch.tensor(x))
        np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), rtol=1e-5, atol=1e-5)
        (out ** 2).mean().backward()
        (t_out ** 2).mean().backward()
        for p, tp in zip(dp.parameters(), t_dp.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-5)
        opt.step()
        t_opt.step()


def test_state_dict_round_trip(rng):
    ours, theirs = _pair(rng)
    dp = ag.nn.DataParallel(ours)
    state = {k: v.numpy() for k, v in torch.nn.DataParallel(theirs).state_dict().items()}
    fresh = ag.nn.DataParallel(ag.nn.Sequential(ag.nn.Linear(5, 7), ag.nn.ReLU(), ag.nn.Linear(7, 3)))
    fresh.load_state_dict({k: ag.tensor(v) for k, v in state.items()})
    x = ag.tensor(rng.standard_normal((2, 5)).astype(np.float32))
    np.testing.assert_allclose(fresh(x).numpy(), dp(x).numpy(), rtol=1e-6)
    with pytest.raises(Exception, match="0.weight"):
        fresh.load_state_dict({k.removeprefix("module."): ag.tensor(v) for k, v in state.items()})


def test_functional_data_parallel(rng):
    ours, theirs = _pair(rng)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    out = ag.nn.parallel.data_parallel(ours, ag.tensor(x))
    t_out = theirs(torch.tensor(x))  # torch's data_parallel on one device (its CPU build refuses to run it)
    np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), rtol=1e-5, atol=1e-5)

    class Scaled(ag.nn.Module):
        def forward(self, a, b, scale=1.0):
            return (a + b) * scale

    a, b = ag.tensor([1.0, 2.0]), ag.tensor([3.0, 4.0])
    got = ag.nn.parallel.data_parallel(Scaled(), (a, b), module_kwargs={"scale": 2.0})
    np.testing.assert_array_equal(got.numpy(), [8.0, 12.0])


def test_device_ids_are_checked(rng):
    model = ag.nn.Linear(2, 2)
    count = placement.adapter_count()
    with pytest.raises(ValueError, match=rf"DataParallel: device_ids\[0\] = {count + 3} is not an adapter index"):
        ag.nn.DataParallel(model, device_ids=[count + 3])
    with pytest.raises(ValueError, match="DataParallel: device_ids is empty"):
        ag.nn.DataParallel(model, device_ids=[])
    with pytest.raises(ValueError, match="DataParallel: output_device"):
        ag.nn.DataParallel(model, output_device=count + 1)
    with pytest.raises(ValueError, match="DataParallel: device_ids.*GPU adapter"):
        ag.nn.DataParallel(model, device_ids=["cpu"])
    with pytest.raises(ValueError, match="DataParallel: dim must be an int"):
        ag.nn.DataParallel(model, dim="0")
    with pytest.raises(ValueError, match="DataParallel: expected an nn.Module"):
        ag.nn.DataParallel(lambda x: x)
    with pytest.raises(ValueError, match="data_parallel: device_ids"):
        ag.nn.parallel.data_parallel(model, ag.ones(1, 2), device_ids=[count])
    current = placement.current_index()
    for cpu in (-1, "cpu", ag.device("cpu")):  # torch gathers to the host; anygpu's cpu is the adapter
        dp = ag.nn.DataParallel(model, output_device=cpu)
        assert dp.output_device == -1
        np.testing.assert_allclose(dp(ag.ones(1, 2)).numpy(), model(ag.ones(1, 2)).numpy())
    for given in ([current], [f"cuda:{current}"], [ag.device("cuda", current)]):
        assert ag.nn.DataParallel(model, device_ids=given).device_ids == [current]


def test_several_adapters_warn_once_and_run_on_the_first(rng, monkeypatch):
    current = placement.current_index()
    monkeypatch.setattr(placement, "adapter_count", lambda: current + 2)
    monkeypatch.setattr(parallel, "_DATA_PARALLEL_WARNED", [])
    ours, theirs = _pair(rng)
    with pytest.warns(UserWarning, match="one adapter per process"):
        dp = ag.nn.DataParallel(ours, device_ids=[current, current + 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ag.nn.DataParallel(ours, device_ids=[current, current + 1])  # once per process
    x = rng.standard_normal((5, 5)).astype(np.float32)
    np.testing.assert_allclose(dp(ag.tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-5)
