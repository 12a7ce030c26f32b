"""torch.device, device= on factories, .to/.cuda/.cpu, torch.cuda and torch.backends on anygpu."""

import subprocess
import sys

import numpy as np
import pytest
import torch

import anygpu as ag


@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "cuda:1", "cpu", "mps", "mps:0", "xpu:3", ("cuda", 2)])
def test_device_objects_read_like_torch(spec):
    args = spec if isinstance(spec, tuple) else (spec,)
    ours, theirs = ag.device(*args), torch.device(*args)
    assert (ours.type, ours.index, str(ours), repr(ours)) == (theirs.type, theirs.index, str(theirs), repr(theirs))
    assert ours == ag.device(str(theirs)) and hash(ours) == hash(ag.device(ours))


def test_device_equality_and_gpu_strings():
    assert ag.device("cuda") != ag.device("cuda:0")
    assert ag.device(1) == ag.device("cuda:1")  # torch: the current accelerator type, index 1
    assert ag.device("gpu:2").type == "gpu" and ag.device("gpu:2").index == 2
    for bad in ["tpu", "cuda:x", "cuda:-1", "", "cpu:1"]:
        with pytest.raises(ValueError, match="device"):
            ag.device(bad)
    with pytest.raises(ValueError, match="index"):
        ag.device("cuda:0", 1)


def test_tensor_device_names_the_adapter():
    x = ag.randn(3, 5)
    assert isinstance(x.device, ag.device)
    assert x.device == ag.device("cuda", ag.cuda.current_device())
    assert x.is_cuda if hasattr(x, "is_cuda") else True
    assert str(x.device) == f"cuda:{ag.cuda.current_device()}"


@pytest.mark.parametrize("dev", [None, "cpu", "cuda", "mps", "gpu", "cuda:0", ag.device("cuda"), 0])
def test_factories_take_device(dev, rng):
    data = rng.standard_normal((3, 4)).astype(np.float32)
    index = ag.cuda.current_device()
    if isinstance(dev, str) and dev.endswith(":0") or dev == 0:
        dev = f"cuda:{index}" if isinstance(dev, str) else index
    made = [
        ag.tensor(data, device=dev), ag.zeros(3, 4, device=dev), ag.ones(3, 4, device=dev),
        ag.full((3, 4), 2.5, device=dev), ag.rand(3, 4, device=dev), ag.randn(3, 4, device=dev),
        ag.randint(0, 5, (3, 4), device=dev), ag.arange(12, device=dev), ag.zeros_like(ag.ones(3), device=dev),
        ag.ones_like(ag.ones(3), device=dev), ag.full_like(ag.ones(3), 7, device=dev),
    ]
    for name in ("empty", "eye", "linspace", "randn_like", "rand_like", "empty_like", "randperm"):
        factory = getattr(ag, name, None)
        if factory is None:
            continue
        args = {"empty": (2, 3), "eye": (3,), "linspace": (0, 1, 5), "randperm": (6,)}.get(name, (ag.ones(2),))
        made.append(factory(*args, device=dev))
    for t in made:
        assert t.device == ag.device("cuda", index)
    np.testing.assert_array_equal(made[0].numpy(), data)


def test_a_missing_adapter_index_is_refused_before_gpu_work():
    far = ag.cuda.device_count() + 3
    for call in (lambda: ag.zeros(2, device=f"cuda:{far}"), lambda: ag.tensor([1.0], device=far),
                 lambda: ag.ones(2).to(f"cuda:{far}"), lambda: ag.ones(2).cuda(far),
                 lambda: ag.nn.Linear(2, 2).to(f"cuda:{far}"), lambda: ag.nn.Linear(2, 2).cuda(far)):
        with pytest.raises(ValueError, match=f"adapter index {far} does not exist"):
            call()


def test_to_cuda_cpu_keep_values_and_convert_dtype(rng):
    data = rng.standard_normal((2, 3)).astype(np.float32)
    x = ag.tensor(data)
    assert x.to("cuda") is x and x.to("cpu") is x and x.cuda() is x and x.cpu() is x
    assert x.to(ag.device("cuda")) is x and x.to(device="cpu") is x
    y = x.to("cuda", ag.int64)
    z = x.to(device="cuda", dtype=ag.int64)
    expected = torch.from_numpy(data).to("cpu", torch.int64).numpy()
    np.testing.assert_array_equal(y.numpy(), expected)
    np.testing.assert_array_equal(z.numpy(), expected)
    assert y.dtype == ag.int64
    model = ag.nn.Linear(3, 2)
    assert model.to(ag.device("cuda")) is model and model.cuda() is model and model.cpu() is model


def test_cuda_namespace_reports_the_webgpu_adapters():
    adapters = ag.devices()
    assert ag.cuda.is_available() is True
    assert ag.cuda.device_count() == len(adapters) >= 1
    index = ag.cuda.current_device()
    assert ag.cuda.get_device_name() == adapters[index].name == ag.cuda.get_device_name(index)
    assert ag.cuda.get_device_properties(index).backend == adapters[index].backend
    assert ag.cuda.is_initialized()
    ag.cuda.synchronize()
    ag.cuda.empty_cache()
    ag.cuda.manual_seed(4)
    a = ag.randn(5).numpy()
    ag.cuda.manual_seed_all(4)
    np.testing.assert_array_equal(ag.randn(5).numpy(), a)
    assert ag.cuda.get_device_capability() == (0, 0) and ag.cuda.is_bf16_supported() is False
    with pytest.raises(ValueError, match="GPU device"):
        ag.cuda.get_device_name("cpu")
    ag.cuda.set_device(index)  # the adapter in use: accepted
    if ag.cuda.device_count() > 1:
        other = (index + 1) % ag.cuda.device_count()
        with pytest.raises(ValueError, match="one adapter per process"):
            ag.cuda.set_device(other)


def test_set_device_before_the_first_tensor_picks_the_adapter():
    """In a fresh process: set_device(N) opens adapter N, then tensors report it."""
    last = ag.cuda.device_count() - 1
    code = ("import anygpu as torch; torch.cuda.set_device({n}); "
            "print(torch.cuda.current_device(), torch.zeros(2, device='cuda').device, torch.gpu().adapter_name)")
    # Index 0 always exists; the last adapter too (a software OpenGL one may lack compute: skip it then).
    for n in sorted({0, last}):
        run = subprocess.run([sys.executable, "-c", code.format(n=n)], capture_output=True, text=True, timeout=300)
        if n != 0 and run.returncode != 0:
            pytest.skip(f"adapter {n} could not be opened here: {run.stderr.strip().splitlines()[-1:]}")
        assert run.returncode == 0, run.stderr
        index, device, name = run.stdout.split(" ", 2)
        assert (int(index), device) == (n, f"cuda:{n}")
        assert name.strip() == ag.devices()[n].name


def test_backends_flags_are_accepted():
    ag.backends.cudnn.benchmark = True
    ag.backends.cudnn.deterministic = True
    ag.backends.cuda.matmul.allow_tf32 = True
    ag.backends.cudnn.allow_tf32 = False
    assert ag.backends.cudnn.benchmark and ag.backends.cuda.matmul.allow_tf32
    assert ag.backends.cudnn.enabled is True
    assert isinstance(ag.backends.mps.is_available(), bool)
    ag.set_float32_matmul_precision("high")
    assert ag.get_float32_matmul_precision() == "high"
    with pytest.raises(ValueError, match="precision"):
        ag.set_float32_matmul_precision("fast")
    ag.set_float32_matmul_precision("highest")
    import anygpu.backends.cudnn as cudnn
    assert cudnn is ag.backends.cudnn


def test_torch_package_shape_resolves():
    import importlib
    for name in ["nn", "nn.functional", "optim", "optim.lr_scheduler", "utils.data", "cuda", "cuda.amp",
                 "backends", "backends.cudnn", "backends.cuda", "backends.mps", "amp", "distributed"]:
        module = importlib.import_module(f"anygpu.{name}")
        parent = ag
        for part in name.split("."):
            parent = getattr(parent, part)
        assert parent is module, name
    from anygpu.utils.data import DataLoader  # noqa: F401
    from anygpu.optim.lr_scheduler import StepLR  # noqa: F401
    from anygpu.cuda.amp import GradScaler, autocast  # noqa: F401
    assert ag.autocast is ag.amp.autocast and ag.Generator is ag.generator.Generator


def test_local_rank_names_the_ranks_adapter_under_distributed(monkeypatch):
    """DDP scripts write cuda:<local_rank>; under anygpu.distributed that is the rank's adapter."""
    import anygpu.distributed as dist
    far = ag.cuda.device_count() + 4
    with pytest.raises(ValueError, match="does not exist"):
        ag.zeros(2, device=f"cuda:{far}")
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_local_rank", lambda: far)
    x = ag.zeros(2, device=f"cuda:{far}")
    ag.cuda.set_device(far)
    assert x.to(f"cuda:{far}") is x and x.device.index == ag.cuda.current_device()
    with pytest.raises(ValueError, match="does not exist"):
        ag.zeros(2, device=f"cuda:{far + 1}")
