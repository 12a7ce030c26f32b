"""Device's Layer-0 methods are named in its class body (go-to-definition works)."""

import anygpu
from anygpu import ops


def test_every_op_function_is_a_device_method():
    assert ops.unbound_ops() == [], "add these to ops.Device's class body"


def test_methods_are_the_op_functions():
    assert anygpu.Device.conv2d is ops.conv.conv2d
    assert anygpu.Device.broadcast_binary is ops.nd.broadcast_binary
    assert "setattr" not in open(ops.__file__).read()
