"""Recording an op on a float16 strided view launches nothing for the view (its dtype is
read from its base, not from a gathered copy)."""

import numpy as np

import anygpu as ag
from anygpu.tensor.recording import _record


def _dispatches_of_record(parent):
    dev = ag.gpu()
    out = ag.Tensor(dev.cast(dev.alloc(6), "f16"), (3, 2), ag.float16)
    dev.realize_lazy()
    before = dev.stats["dispatches"]
    result = _record("mul", out, (parent,), lambda grad: (grad,))
    dev.realize_lazy()
    assert result.requires_grad and result.dtype is ag.float16
    return dev.stats["dispatches"] - before


def test_recording_a_float16_view_gathers_nothing():
    a = ag.tensor(np.arange(6, dtype=np.float16).reshape(2, 3), requires_grad=True)
    view = a.t()
    assert view._base is a and view._view is not None   # a strided view of a's buffer
    contiguous = ag.tensor(np.arange(6, dtype=np.float16).reshape(3, 2), requires_grad=True)
    assert _dispatches_of_record(view) == _dispatches_of_record(contiguous) == 0
