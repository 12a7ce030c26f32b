"""torch.accelerator's names over anygpu's adapters, and the default backend per device."""

import pytest
import torch

import anygpu as ag
import anygpu.distributed as dist


def test_accelerator_reports_the_adapters_as_cuda():
    acc = ag.accelerator
    assert acc.is_available() is True and acc.device_count() == ag.cuda.device_count() >= 1
    current = acc.current_accelerator()
    assert current == ag.device("cuda") and str(current) == "cuda"
    assert ag.device(f"{current}:{acc.current_device_index()}") == ag.device("cuda", ag.cuda.current_device())
    assert acc.current_device_idx() == acc.current_device_index()
    acc.set_device_index(None)  # no change
    acc.set_device_index(acc.current_device_index())  # the adapter in use may be named
    acc.synchronize()
    with acc.device_index(None):
        pass
    with acc.device_index(acc.current_device_index()):
        ag.ones(2).sum().item()


def test_accelerator_refuses_an_adapter_that_does_not_exist():
    with pytest.raises(ValueError, match="adapter"):
        ag.accelerator.set_device_index(ag.accelerator.device_count() + 5)


def test_default_backend_for_device_matches_torch():
    for name in ("cpu", "cuda", "cuda:0"):
        assert dist.get_default_backend_for_device(ag.device(name)) == \
            torch.distributed.get_default_backend_for_device(torch.device(name))
    assert dist.get_default_backend_for_device("cpu") == "gloo"
