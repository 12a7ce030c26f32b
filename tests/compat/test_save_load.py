"""torch.save / torch.load on anygpu: nested checkpoints round-trip as signed safetensors
(compared with what torch's own round trip gives), tampering is caught, PyTorch .pt files
load through the restricted reader (anygpu.io.pth), flat state dicts keep their old format."""

import io
import math

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu.io import checkpoint, serialization


def to_host(value):
    """Either library's object as nested Python/NumPy values, container types kept."""
    if isinstance(value, (torch.Tensor, ag.Tensor)):
        return ("tensor", np.asarray(value.detach().numpy() if hasattr(value, "detach") else value.numpy()))
    if isinstance(value, dict):
        return {k: to_host(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_host(v) for v in value)
    return value


def assert_same(ours, theirs, where="obj"):
    assert type(ours) is type(theirs), f"{where}: {type(ours).__name__} vs {type(theirs).__name__}"
    if isinstance(theirs, np.ndarray):
        assert ours.shape == theirs.shape, where
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=0, err_msg=where)
    elif isinstance(theirs, dict):
        assert list(ours) == list(theirs), where
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{where}[{key!r}]")
    elif isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, f"{where}[{i}]")
    elif isinstance(theirs, float) and math.isnan(theirs):
        assert math.isnan(ours), where
    else:
        assert ours == theirs, where


def sample_checkpoint(lib, rng):
    """The same nested checkpoint built with torch or with anygpu."""
    weights = rng.standard_normal((3, 5)).astype(np.float32)
    return {
        "model": {"fc.weight": lib.tensor(weights), "fc.bias": lib.tensor(weights[0]),
                  "steps": lib.tensor(np.arange(4))},
        "epoch": 3, "loss": 0.25, "best": float("inf"), "nan": float("nan"), "name": "run-1",
        "flags": [True, False, None], "betas": (0.9, 0.999), 7: "int key", (1, "a"): [1, [2.5, "x"]],
        "history": [{"lr": 0.1, "acc": 0.5}, {"lr": 0.01, "acc": 0.75}], "empty": {}, "none": None,
        "array": weights[:2], "scalar": np.float32(1.5),
    }


def test_nested_round_trip_matches_torch(tmp_path, rng):
    state = rng.bit_generator.state
    ours_obj = sample_checkpoint(ag, rng)
    rng.bit_generator.state = state
    theirs_obj = sample_checkpoint(torch, rng)
    ag.save(ours_obj, tmp_path / "ours.ckpt")
    torch.save(theirs_obj, tmp_path / "theirs.pt")
    ours = ag.load(tmp_path / "ours.ckpt", map_location="cpu", weights_only=True)
    theirs = torch.load(tmp_path / "theirs.pt", weights_only=False)
    assert_same(to_host(ours), to_host(theirs))
    assert ours["model"]["steps"].dtype == ag.int64
    assert isinstance(ours["array"], np.ndarray) and isinstance(ours["scalar"], np.float32)


def test_training_resumes_exactly_from_a_checkpoint(tmp_path, rng):
    def make():
        ag.manual_seed(5)
        model = ag.nn.Sequential(ag.nn.Linear(4, 7), ag.nn.ReLU(), ag.nn.Linear(7, 2))
        return model, ag.optim.Adam(model.parameters(), lr=0.01, betas=(0.8, 0.99))

    x = ag.tensor(rng.standard_normal((9, 4)).astype(np.float32))
    y = ag.tensor(rng.standard_normal((9, 2)).astype(np.float32))

    def step(model, opt):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.item()

    model, opt = make()
    for _ in range(2):
        step(model, opt)
    ag.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 2}, tmp_path / "ckpt.pt")
    expected = [step(model, opt) for _ in range(3)]

    resumed, resumed_opt = make()
    checkpoint_obj = ag.load(tmp_path / "ckpt.pt")
    resumed.load_state_dict(checkpoint_obj["model"])
    resumed_opt.load_state_dict(checkpoint_obj["optimizer"])
    assert checkpoint_obj["epoch"] == 2
    assert checkpoint_obj["optimizer"]["param_groups"][0]["betas"] == (0.8, 0.99)
    got = [step(resumed, resumed_opt) for _ in range(3)]
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    for a, b in zip(resumed.parameters(), model.parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


def test_flat_state_dict_keeps_the_old_format(tmp_path, rng):
    state = {"w": ag.tensor(rng.standard_normal((4, 3)).astype(np.float32)), "b": np.arange(3, dtype=np.float32)}
    ag.save(state, tmp_path / "new.safetensors", metadata={"note": "x"})
    checkpoint.save(state, tmp_path / "old.safetensors", metadata={"note": "x"})
    assert (tmp_path / "new.safetensors").read_bytes() == (tmp_path / "old.safetensors").read_bytes()
    loaded = ag.load(tmp_path / "new.safetensors")
    assert list(loaded) == ["w", "b"] or sorted(loaded) == ["b", "w"]
    assert all(isinstance(v, ag.Tensor) for v in loaded.values())
    np.testing.assert_array_equal(loaded["w"].numpy(), state["w"].numpy())
    _, metadata = checkpoint.load_with_metadata(tmp_path / "new.safetensors")
    assert serialization.STRUCTURE_KEY not in metadata and metadata["note"] == "x"


def test_parameters_and_requires_grad_survive(tmp_path):
    param = ag.nn.Parameter(ag.tensor([[1.0, 2.0]]))
    leaf = ag.tensor([3.0], requires_grad=True)
    ag.save({"p": param, "leaf": leaf, "plain": ag.tensor([1.0])}, tmp_path / "p.ckpt")
    loaded = ag.load(tmp_path / "p.ckpt")
    # A flat dict of tensors: loaded as before (plain tensors).
    assert loaded["p"].tolist() == [[1.0, 2.0]]
    ag.save({"p": param, "leaf": leaf, "meta": {"n": 1}}, tmp_path / "n.ckpt")
    nested = ag.load(tmp_path / "n.ckpt")
    assert type(nested["p"]) is ag.nn.Parameter and nested["p"].requires_grad
    assert nested["leaf"].requires_grad and nested["leaf"].tolist() == [3.0]


def test_tampered_file_is_refused(tmp_path):
    path = tmp_path / "t.ckpt"
    ag.save({"w": ag.tensor(np.arange(64, dtype=np.float32)), "step": 9}, path)
    data = bytearray(path.read_bytes())
    data[-200] ^= 0x01  # inside the tensor data
    path.write_bytes(bytes(data))
    with pytest.raises(ag.TamperedError):
        ag.load(path)
    # The structure lives in the signed header too.
    ag.save({"w": ag.tensor([1.0]), "step": 9}, path)
    text = path.read_bytes().replace(b'\\"step\\",9', b'\\"step\\",8')  # JSON inside a JSON string
    assert text != path.read_bytes()
    path.write_bytes(text)
    with pytest.raises(ag.TamperedError):
        ag.load(path)


@pytest.mark.parametrize("zipfile", [True, False])
def test_pytorch_file_loads_through_the_restricted_reader(tmp_path, zipfile):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    path = tmp_path / "model.pt"
    torch.save({"model": model.state_dict(), "epoch": 4}, path, _use_new_zipfile_serialization=zipfile)
    for loaded in (ag.load(path), ag.load(io.BytesIO(path.read_bytes()))):
        assert loaded["epoch"] == 4
        np.testing.assert_array_equal(loaded["model"]["weight"].numpy(), model.weight.detach().numpy())


def test_file_objects_and_bad_objects(tmp_path):
    buffer = io.BytesIO()
    ag.save({"x": ag.tensor([1, 2]), "tag": "a"}, buffer)
    buffer.seek(0)
    loaded = ag.load(buffer)
    assert loaded["tag"] == "a" and loaded["x"].tolist() == [1, 2]
    with pytest.raises(ValueError, match=r"obj\['bad'\] is a object"):
        ag.save({"bad": object()}, tmp_path / "x.ckpt")
    with pytest.raises(ValueError, match="key"):
        ag.save({frozenset(): 1}, tmp_path / "x.ckpt")
    with pytest.raises(ValueError, match="never pickles"):
        ag.save({"a": 1}, tmp_path / "x.ckpt", pickle_module=object())
    assert not (tmp_path / "x.ckpt").exists()
    ag.save([1, (2.5, "s")], tmp_path / "list.ckpt")
    assert ag.load(tmp_path / "list.ckpt") == [1, (2.5, "s")]
    ag.save(ag.tensor([[1.0]]), tmp_path / "one.ckpt")
    assert ag.load(tmp_path / "one.ckpt").tolist() == [[1.0]]


@pytest.mark.parametrize("structure", [
    "[" * 100000 + "]" * 100000,                      # deeper than Python's stack
    '{"dict": 5}', '{"dict": [[1]]}', '{"list": 3}', '{"tensor": "missing"}', '{"what": 1}',
    '{"dict": [[{"list": []}, 1]]}', "not json",
])
def test_hostile_structure_is_a_value_error(tmp_path, structure):
    """A signed file proves its bytes are unchanged, not that its writer was friendly."""
    path = tmp_path / "hostile.ckpt"
    checkpoint.save({"w": np.zeros(2, np.float32)}, path,
                    metadata={serialization.FORMAT_KEY: serialization.FORMAT, serialization.STRUCTURE_KEY: structure})
    with pytest.raises(ValueError, match="load: "):
        ag.load(path)


def test_torch_bfloat16_tensors_convert_to_float32(tmp_path):
    """The conversion path: torch bfloat16 weights (no NumPy type) are widened exactly."""
    weights = torch.randn(3, 4).to(torch.bfloat16)
    for obj in ({"w": weights}, {"model": {"w": weights}, "step": 1}):
        ag.save(obj, tmp_path / "bf16.safetensors")
        loaded = ag.load(tmp_path / "bf16.safetensors")
        w = loaded["w"] if "w" in loaded else loaded["model"]["w"]
        assert w.dtype == ag.float32
        np.testing.assert_array_equal(w.numpy(), weights.float().numpy())
