"""The pool hands out freed buffers in a fixed order (oldest made first, runtime/device.py
`_recycle`), so a loop that repeats the same work reuses the same buffers each time and
finds its bind groups cached instead of making new ones."""

import numpy as np

from anygpu.runtime import device as device_mod


def _work(dev, x_np, w_np, rng):
    # Temporaries of the work's size freed in a random order while work is pending: the free
    # list's order after the submit then depends on that order unless the pool sorts it.
    temps = [dev.empty(777) for _ in range(8)]
    dev.add(temps[0], temps[1])
    for i in rng.permutation(len(temps)):
        temps[i] = None
    dev.flush()
    x, w = dev.upload(x_np), dev.upload(w_np)
    y = dev.mul(dev.add(x, w), w)
    for _ in range(5):
        y = dev.add(dev.scale(y, 0.5), x)
    return dev.read(y)


def _reference(x_np, w_np):
    y = (x_np + w_np) * w_np
    for _ in range(5):
        y = np.float32(0.5) * y + x_np
    return y


def test_repeated_work_makes_no_new_bind_groups(dev, rng):
    made = [0]
    orig = dev._new_bind_group

    def counting(*args):
        made[0] += 1
        return orig(*args)

    dev._new_bind_group = counting
    try:
        per_round = []
        for _ in range(6):
            x_np = rng.standard_normal(777).astype(np.float32)
            w_np = rng.standard_normal(777).astype(np.float32)
            made[0] = 0
            np.testing.assert_allclose(_work(dev, x_np, w_np, rng), _reference(x_np, w_np), rtol=1e-5, atol=1e-6)
            per_round.append(made[0])
    finally:
        del dev._new_bind_group
    assert per_round[0] > 0
    assert per_round[-2:] == [0, 0], per_round


def test_freed_buffers_come_back_oldest_first(dev):
    dev.flush()
    size = device_mod._size_class(4 * 3001)
    bufs = [dev.empty(3001) for _ in range(6)]
    dev.add(bufs[0], bufs[1])  # something pending: freed buffers are retired until the submit
    for i in (3, 0, 5, 1, 4, 2):  # freed out of order
        bufs[i] = None
    dev.flush()
    bucket = dev._free[size]
    order = [m._uid for m in bucket]
    assert order == sorted(order, reverse=True)  # pop() gives the oldest
    taken = dev._take(size, True)
    assert taken._uid == min(order)
    dev._retire(taken, size)
