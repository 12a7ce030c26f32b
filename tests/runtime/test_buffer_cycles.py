"""Buffers that die inside reference cycles (as autograd graphs make) go back to the pool
usable: the cyclic collector must not release a wgpu buffer the pool hands out again."""

import gc

import numpy as np


class Node:
    pass


def test_buffers_collected_in_cycles_are_reused_safely(dev):
    gc.collect()
    gc.disable()
    try:
        for _ in range(100):
            a, b = Node(), Node()
            a.buf, a.other, b.other = dev.upload(np.ones(300, np.float32)), b, a
            del a, b
        gc.collect()   # finalizes each cycle: its Buffer and, unless the pool holds it, its wgpu buffer
    finally:
        gc.enable()
    x = dev.upload(np.full(300, 2.0, np.float32))
    for _ in range(150):   # takes pooled buffers, among them those of the cycles
        x = dev.scale(dev.add(x, dev.alloc(300)), 1.0)
    np.testing.assert_array_equal(dev.read(x), 2.0)
