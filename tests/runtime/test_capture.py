"""anygpu.compile: replayed steps equal eager steps bit for bit (same kernels, same
order), shape changes and host-side changes fall back, the pool keeps pinned buffers."""

import numpy as np
import pytest

import anygpu as ag
import anygpu.nn.functional as F
from anygpu import nn
from anygpu.runtime.capture import Recording, same_step


def _mlp_sgd():
    ag.manual_seed(0)
    model = nn.Sequential(nn.Linear(13, 17), nn.ReLU(), nn.Linear(17, 5))
    return model, ag.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def _cnn_adam():
    ag.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(4, 6, 3), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 2 * 2, 5))
    return model, ag.optim.Adam(model.parameters(), lr=0.01)


def _step_fn(model, opt):
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def _batches(rng, shape, n):
    return [(rng.standard_normal(shape).astype(np.float32), rng.integers(0, 5, shape[0]).astype(np.int32))
            for _ in range(n)]


@pytest.mark.parametrize("build,shape", [(_mlp_sgd, (9, 13)), (_cnn_adam, (3, 1, 8, 8))])
def test_replay_equals_eager(build, shape, rng):
    eager_model, eager_opt = build()
    model, opt = build()
    eager = _step_fn(eager_model, eager_opt)
    step = ag.compile(_step_fn(model, opt))
    for x, y in _batches(rng, shape, 7):
        want = eager(ag.tensor(x), ag.tensor(y)).item()
        got = step(ag.tensor(x), ag.tensor(y)).item()
        assert got == want
    assert step.stats["replayed"] >= 3, step.reason(ag.tensor(x), ag.tensor(y))
    for p_eager, p in zip(eager_model.parameters(), model.parameters()):
        np.testing.assert_array_equal(p.numpy(), p_eager.numpy())
    # Python-side optimizer state advanced on every replay too.
    if isinstance(opt, ag.optim.Adam):
        assert all(opt.state[p]["step"] == 7 for p in model.parameters())


def test_replay_follows_a_scheduler_learning_rate(rng):
    eager_model, eager_opt = _mlp_sgd()
    model, opt = _mlp_sgd()
    eager_schedule = ag.optim.lr_scheduler.StepLR(eager_opt, 2, gamma=0.5)
    schedule = ag.optim.lr_scheduler.StepLR(opt, 2, gamma=0.5)
    eager = _step_fn(eager_model, eager_opt)
    # The scheduler steps outside the compiled step: Python code that launches no kernels
    # only runs on the eager calls. The optimizer reads the group's lr on every replay.
    step = ag.compile(_step_fn(model, opt))
    for x, y in _batches(rng, (6, 13), 8):
        assert step(ag.tensor(x), ag.tensor(y)).item() == eager(ag.tensor(x), ag.tensor(y)).item()
        schedule.step()
        eager_schedule.step()
    assert step.stats["replayed"] >= 4
    assert opt.param_groups[0]["lr"] == eager_opt.param_groups[0]["lr"] == 0.1 * 0.5 ** 4
    for p_eager, p in zip(eager_model.parameters(), model.parameters()):
        np.testing.assert_array_equal(p.numpy(), p_eager.numpy())


def test_shape_change_falls_back_and_captures_again(rng):
    eager_model, eager_opt = _mlp_sgd()
    model, opt = _mlp_sgd()
    eager = _step_fn(eager_model, eager_opt)
    step = ag.compile(_step_fn(model, opt), max_signatures=1)
    sizes = [8, 8, 8, 8, 5, 8, 5, 8]
    for n in sizes:
        (x, y), = _batches(rng, (n, 13), 1)
        assert step(ag.tensor(x), ag.tensor(y)).item() == eager(ag.tensor(x), ag.tensor(y)).item()
    # Batches of 8: two recorded calls differ (the first creates the momentum buffers), the
    # third matches the second; the later three replay. Batches of 5 (a second signature
    # over max_signatures=1) run eagerly.
    assert step.stats["replayed"] == 3
    assert step.stats["eager"] == 5
    for p_eager, p in zip(eager_model.parameters(), model.parameters()):
        np.testing.assert_array_equal(p.numpy(), p_eager.numpy())


def test_caller_inputs_and_returned_tensors_are_not_overwritten(rng):
    model, opt = _mlp_sgd()
    step = ag.compile(_step_fn(model, opt))
    data = _batches(rng, (4, 13), 6)
    inputs = [(ag.tensor(x), ag.tensor(y)) for x, y in data]
    losses = [step(x, y) for x, y in inputs]
    assert step.stats["replayed"] >= 3
    values = [loss.item() for loss in losses]
    assert len(set(values)) == len(values)  # each call kept its own loss
    for (x, _), tensor_x in zip(data, inputs):
        np.testing.assert_array_equal(tensor_x[0].numpy(), x)


def test_host_random_values_keep_the_step_eager(rng):
    ag.manual_seed(3)
    lin = nn.Linear(6, 6)
    opt = ag.optim.SGD(lin.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad()
        loss = F.dropout(lin(x), 0.5, training=True).sum()  # a fresh host seed each call
        loss.backward()
        opt.step()
        return loss

    compiled = ag.compile(step)
    x = ag.tensor(rng.standard_normal((3, 6)).astype(np.float32))
    for _ in range(6):
        compiled(x)
    assert compiled.stats["replayed"] == 0
    assert "parameters" in compiled.reason(x)


def test_reading_back_inside_the_step_keeps_it_eager(rng):
    model, opt = _mlp_sgd()
    inner = _step_fn(model, opt)
    seen = []
    compiled = ag.compile(lambda x, y: seen.append(inner(x, y).item()))
    x, y = _batches(rng, (4, 13), 1)[0]
    for _ in range(4):
        compiled(ag.tensor(x), ag.tensor(y))
    assert compiled.stats["replayed"] == 0 and len(seen) == 4
    assert "reads" in compiled.reason(ag.tensor(x), ag.tensor(y))


def test_pinned_buffers_stay_out_of_the_pool(dev, rng):
    a = dev.upload(rng.standard_normal(300).astype(np.float32))
    rec = Recording(dev)
    rec.start()
    tmp = dev.scale(a, 2.0)
    out = dev.scale(tmp, 3.0)
    del tmp  # freed inside the step: replay still writes it
    rec.stop()
    from anygpu.runtime.capture import Replay
    replay = Replay(rec)
    pinned = set(map(id, rec.buffers()))
    handed = [dev.empty(300) for _ in range(20)]
    assert not pinned & {id(b._gpu) for b in handed}
    replay.run()
    np.testing.assert_allclose(dev.read(out), dev.read(a) * 6, rtol=1e-6)
    replay.release()
    assert not pinned & set(map(id, dev._pinned))


def test_same_step_compares_parameters_and_buffers(dev, rng):
    a = dev.upload(rng.standard_normal(50).astype(np.float32))
    recs = []
    for factor in (2.0, 2.0, 5.0):
        rec = Recording(dev)
        rec.start()
        dev.scale(a, factor)
        rec.stop()
        recs.append(rec)
    assert same_step(recs[0], recs[1]) is None
    assert "parameters" in same_step(recs[1], recs[2])


def test_read_later_returns_the_value_after_more_work(dev, rng):
    data = rng.standard_normal(33).astype(np.float32)
    buf = dev.upload(data)
    pending = dev.read_later(buf)
    dev.write(buf, np.zeros(33, np.float32))  # later work does not change what was read
    np.testing.assert_array_equal(pending.result(), data)


def test_read_when_done_gives_each_copy_at_its_place_in_queue_order(dev, rng):
    """runtime/staging.py read_when_done (how a pending read maps on a hardware adapter:
    non-blocking polls, since wgpu-py's map_sync waits until every submitted command is
    done) reads what each copy saw, however much work was submitted after it."""
    import wgpu

    from anygpu.runtime import staging

    if not staging.AVAILABLE:
        pytest.skip("wgpu-native's C API is not reachable through wgpu-py here")
    data = rng.standard_normal(257).astype(np.float32)
    buf = dev.upload(data)
    nbytes = 257 * 4
    targets = []
    for step in range(4):
        target = dev._device.create_buffer(size=1040, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        dev._pending.append(("copy", buf._gpu, 0, target, 0, nbytes))
        targets.append(target)
        buf = dev.scale(buf, 2.0)
        dev.flush()
    for step, target in enumerate(targets):
        got = np.frombuffer(staging.read_when_done(dev, target, nbytes), np.float32)
        np.testing.assert_allclose(got, data * 2.0 ** step, rtol=1e-6)
        target.destroy()


def test_paused_work_stays_out_of_the_recording(dev, rng):
    from anygpu.runtime.capture import paused
    a = dev.upload(rng.standard_normal(40).astype(np.float32))
    rec = Recording(dev)
    rec.start()
    b = dev.scale(a, 2.0)
    with paused(dev):  # e.g. an autotuner timing and reading back candidates
        dev.read(dev.scale(a, 5.0))
    c = dev.scale(b, 3.0)
    rec.stop()
    assert rec.reads == 0 and rec.n_dispatches == 2
    assert rec.why_not_replayable() is None
    np.testing.assert_allclose(dev.read(c), dev.read(a) * 6, rtol=1e-6)


def test_a_compiled_step_inside_another_is_recorded_by_the_outer_one(rng):
    eager_model, eager_opt = _mlp_sgd()
    model, opt = _mlp_sgd()
    inner = ag.compile(_step_fn(model, opt))
    outer = ag.compile(lambda x, y: inner(x, y) * 2.0)
    eager = _step_fn(eager_model, eager_opt)
    for x, y in _batches(rng, (5, 13), 6):
        assert outer(ag.tensor(x), ag.tensor(y)).item() == 2.0 * eager(ag.tensor(x), ag.tensor(y)).item()
    assert outer.stats["replayed"] >= 2 and inner.stats["replayed"] == 0


def test_release_records_afresh_and_stays_exact(rng):
    eager_model, eager_opt = _mlp_sgd()
    model, opt = _mlp_sgd()
    eager = _step_fn(eager_model, eager_opt)
    step = ag.compile(_step_fn(model, opt))
    batches = _batches(rng, (6, 13), 8)
    for i, (x, y) in enumerate(batches):
        if i == 4:
            assert step.stats["replayed"] >= 1
            step.release()
            eager_before = step.stats["eager"]
        assert step(ag.tensor(x), ag.tensor(y)).item() == eager(ag.tensor(x), ag.tensor(y)).item()
    assert step.stats["eager"] > eager_before  # recorded again after release
    for p_eager, p in zip(eager_model.parameters(), model.parameters()):
        np.testing.assert_array_equal(p.numpy(), p_eager.numpy())
