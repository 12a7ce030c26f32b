"""The cooperative-matrix probe `anygpu info` prints: a child process asks wgpu for a device
with the feature and reports what came back, without failing the caller."""

import pytest

from anygpu.runtime import list_adapters, probe


def test_an_adapter_without_the_feature_is_not_asked():
    assert probe.cooperative_matrix(0, ["shader-f16"]) == "not offered by the adapter"


def test_the_request_result_is_reported_not_raised():
    adapters = list_adapters()
    index = next((i for i, a in enumerate(adapters) if a.info.get("backend_type") == "Vulkan"), None)
    if index is None:
        pytest.skip("no Vulkan adapter")
    # Pretend the adapter lists it: the request is then made and its outcome reported.
    answer = probe.cooperative_matrix(index, ["cooperative-matrix"])
    assert answer == "granted" or answer.startswith("refused: ")
