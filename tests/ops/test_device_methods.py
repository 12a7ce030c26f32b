"""Device's Layer-0 methods are named in its class body (go-to-definition works)."""

import anygpu
from anygpu import ops


def test_every_op_function_is_a_device_method():
    assert ops.unbound_ops() == [], "add these to ops.Device's class body"


def test_methods_are_the_op_functions():
    # Each is named in the class body; the class then wraps it so float64 (host) Buffers go to
    # the op's numpy counterpart (ops/host64): the wrapper is the op function otherwise.
    source = open(ops.__file__).read()
    assert "    conv2d = conv.conv2d\n" in source and "    broadcast_binary = nd.broadcast_binary\n" in source
    assert anygpu.Device.conv2d.__wrapped__ is ops.conv.conv2d
    assert anygpu.Device.broadcast_binary.__wrapped__ is ops.nd.broadcast_binary
