"""Device.gate: work recorded after a gate is held back (not submitted) until the gate's
condition holds, keeps its order, and a failing gate leaves the device usable."""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from anygpu.runtime.device import HELD_MAX, MAX_PENDING
from anygpu.runtime.staging import AVAILABLE, HostStage


@pytest.fixture(autouse=True)
def unfused(dev, monkeypatch):
    """Every scale is its own dispatch (no deferred fusion), so the counts below are launches."""
    dev.flush()
    monkeypatch.setattr(dev, "fuse", False)


class Latch:
    """A gate condition the test opens by hand; counts the waits."""

    def __init__(self):
        self.event = threading.Event()
        self.waits = 0

    def ready(self) -> bool:
        return self.event.is_set()

    def wait(self) -> None:
        self.waits += 1
        assert self.event.wait(10)


def _chain(dev, x, n):
    for _ in range(n):
        x = dev.scale(x, 1.5)
        x = dev.scale(x, 1 / 1.5)
    return x


def test_gate_holds_back_the_work_after_it_past_max_pending(dev, rng):
    data = rng.standard_normal(257).astype(np.float32)
    x = dev.upload(data)
    dev.flush()
    latch = Latch()
    before = dev.stats["submits"]
    dev.gate(latch.ready, latch.wait)
    y = _chain(dev, x, MAX_PENDING)  # 2 * MAX_PENDING launches: a plain batch would have been submitted
    assert dev.stats["submits"] == before and latch.waits == 0
    latch.event.set()  # now the next launch past MAX_PENDING submits everything
    y = dev.scale(y, 2.0)
    assert dev.stats["submits"] > before and latch.waits == 1
    np.testing.assert_allclose(dev.read(y), data * 2.0, rtol=1e-5)


def test_a_read_behind_a_closed_gate_waits_for_it(dev, rng):
    data = rng.standard_normal(33).astype(np.float32)
    x = dev.upload(data)
    latch = Latch()
    dev.gate(latch.ready, latch.wait)
    y = dev.scale(x, -3.0)
    threading.Timer(0.05, latch.event.set).start()
    np.testing.assert_allclose(dev.read(y), data * -3.0, rtol=1e-6)
    assert latch.waits == 1


def test_a_full_ring_behind_a_closed_gate_flushes_and_waits(dev, rng):
    x = dev.upload(rng.standard_normal(8).astype(np.float32))
    latch = Latch()
    latch.event.set()
    dev.gate(lambda: False, latch.wait)  # claims never to be ready
    y = _chain(dev, x, HELD_MAX // 2 + 1)
    assert latch.waits == 1  # the ring filled: the flush had to wait instead of growing further
    np.testing.assert_allclose(dev.read(y), dev.read(x), rtol=1e-4)


def test_a_failing_gate_raises_from_the_flush_and_the_device_keeps_working(dev, rng):
    x = dev.upload(rng.standard_normal(16).astype(np.float32))

    def fail():
        raise ValueError("gate: the other side went away")

    dev.gate(lambda: False, fail)
    dev.scale(x, 2.0)
    with pytest.raises(ValueError, match="went away"):
        dev.flush()
    data = rng.standard_normal(5).astype(np.float32)
    np.testing.assert_allclose(dev.read(dev.scale(dev.upload(data), 4.0)), data * 4.0, rtol=1e-6)


@pytest.mark.skipif(not AVAILABLE, reason="host staging needs wgpu-native's C API")
def test_host_round_trip_behind_a_gate_is_ordered(dev, rng):
    """DistributedDataParallel's pattern on one process: a stage's download submitted, its
    exchange on another thread, the upload and work that reads it recorded behind a gate
    before the exchange has run (the worker is held until the work is recorded)."""
    data = rng.standard_normal(1001).astype(np.float32)
    src = dev.upload(data)
    stage = HostStage(dev, data.nbytes)
    stage.record_download(src)
    stage.submit()
    hold = threading.Event()

    def work(download, upload):
        upload[:data.size] = download[:data.size] * 2 + 1

    def exchange():
        assert hold.wait(10)
        stage.exchange(work)

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(exchange)
        dev.gate(future.done, future.result)
        out = dev.empty(data.size)
        stage.record_upload(out)
        result = dev.scale(out, 0.5)
        assert not future.done()
        threading.Timer(0.05, hold.set).start()
        dev.flush()  # must wait for the exchange (which waits for `hold`) before submitting the upload
        assert future.done()
        got = dev.read(result)
    np.testing.assert_allclose(got, (data * 2 + 1) * 0.5, rtol=1e-6)
    stage.close()


def test_a_replayed_step_defers_its_last_gate_to_the_next_flush(dev, rng):
    """A captured step ending in a gate (a data-parallel step: the last bucket's exchange):
    the replay returns without waiting, the gate and the work it holds go to the device's
    next flush, which waits and submits them before anything recorded later."""
    import anygpu as ag

    latch = Latch()
    latch.event.set()  # recording runs the gate at once
    started = []

    def start():  # where DistributedDataParallel starts an exchange
        started.append(1)

    def step(x):
        y = x * 2.0
        dev.host_call(start)
        dev.gate(latch.ready, latch.wait)
        return y + 1.0  # held behind the gate

    compiled = ag.compile(step)
    data = rng.standard_normal(37).astype(np.float32)
    x = ag.tensor(data)
    for _ in range(3):
        out = compiled(x)
    assert compiled.stats["replayed"] >= 1
    np.testing.assert_allclose(out.numpy(), data * 2 + 1, rtol=1e-6)
    latch.event.clear()
    waits = latch.waits
    out = compiled(ag.tensor(data * 3))
    assert latch.waits == waits and dev._deferred is not None  # returned without waiting
    assert len(started) == 4
    later = dev.scale(dev.upload(data), 5.0)  # recorded after the step: runs after its tail
    threading.Timer(0.05, latch.event.set).start()
    np.testing.assert_allclose(out.numpy(), data * 6 + 1, rtol=1e-6)  # the read waited at the gate
    assert latch.waits == waits + 1 and dev._deferred is None
    np.testing.assert_allclose(dev.read(later), data * 5, rtol=1e-6)


class NotifyingLatch(Latch):
    """A Latch opened from another thread, which then calls what `notify` registered there
    (as a data-parallel exchange's done callbacks run on the MPI worker thread)."""

    def __init__(self):
        super().__init__()
        self.callbacks = []
        self.threads = []

    def notify(self, callback) -> None:
        if self.event.is_set():
            callback()
        else:
            self.callbacks.append(callback)

    def open_from_another_thread(self, succeeded: bool = True) -> None:
        def run():
            self.event.set()
            self.threads.append(threading.current_thread().name)
            callbacks, self.callbacks = self.callbacks, []
            for callback in callbacks if succeeded else ():
                callback()
        thread = threading.Thread(target=run, name="exchange")
        thread.start()
        thread.join(10)


def _no_op():  # a host call point (where DistributedDataParallel starts an exchange)
    pass


def _replaying(step, data):
    """anygpu.compile(step), called until its calls replay (gates open)."""
    import anygpu as ag

    compiled = ag.compile(step)
    for _ in range(3):
        compiled(ag.tensor(data))
    assert compiled.stats["replayed"] >= 1
    return compiled


def test_a_deferred_tail_is_submitted_by_the_thread_that_opens_its_gate(dev, rng):
    """With a notifier, the replay's deferred tail goes to the GPU as soon as its gate may
    open, from the thread that opened it, not at the caller's next flush; that flush still
    waits at the gate (its errors and bookkeeping) and submits nothing twice."""
    import anygpu as ag

    latch = NotifyingLatch()

    data = rng.standard_normal(41).astype(np.float32)
    compiled = _one_gate(dev, latch, data)
    for scale in (3.0, 5.0):
        dev.flush()  # the previous call's tail, before the gate closes
        latch.event.clear()
        waits, submits = latch.waits, dev.stats["submits"]
        out = compiled(ag.tensor(data * scale))
        tail = dev._deferred
        assert tail is not None and not tail.submitted and latch.callbacks
        latch.open_from_another_thread()
        assert tail.submitted and dev._deferred is tail and latch.threads[-1] == "exchange"
        assert dev.stats["submits"] == submits + 1  # the replay's own count; the tail adds none
        np.testing.assert_allclose(out.numpy(), data * 2 * scale + 1, rtol=1e-6)
        assert latch.waits == waits + 1 and dev._deferred is None


def _one_gate(dev, latch, data):
    """A replaying step: y = 2x, a host call, `latch`'s gate, then y + 1 (held by the gate)."""
    latch.event.set()

    def step(x):
        y = x * 2.0
        dev.host_call(_no_op)
        dev.gate(latch.ready, latch.wait, latch.notify)
        return y + 1.0

    return _replaying(step, data)


def _two_gates(dev, data, held_first, held_second):
    """A replaying step y = 2x, a host call, gate `first`, held_first(y), gate `second`,
    held_second(y, that); returned with both latches closed, ready for a call."""
    first, second = NotifyingLatch(), NotifyingLatch()
    for latch in (first, second):
        latch.event.set()

    def step(x):
        y = x * 2.0
        dev.host_call(_no_op)
        dev.gate(first.ready, first.wait, first.notify)
        held = held_first(y)
        dev.gate(second.ready, second.wait, second.notify)
        return held_second(y, held)

    compiled = _replaying(step, data)
    dev.flush()
    first.event.clear()
    second.event.clear()
    return compiled, first, second


def test_trailing_gates_submit_their_parts_in_gate_order_whichever_opens_first(dev, rng):
    """Several gates end the step (one per bucket): each part goes out as soon as its gate
    and every gate before it are open, in order, even when a later gate opens first."""
    import anygpu as ag

    data = rng.standard_normal(29).astype(np.float32)
    # held by the second gate: reads what the first holds wrote
    compiled, first, second = _two_gates(dev, data, lambda y: y + 1.0, lambda y, z: z * 3.0)
    out = compiled(ag.tensor(data * 7))
    chain = dev._deferred
    assert chain.submitted == 0
    second.open_from_another_thread()
    assert chain.submitted == 0  # the first gate is still closed
    first.open_from_another_thread()
    assert chain.submitted == 2 and dev._deferred is chain
    np.testing.assert_allclose(out.numpy(), (data * 14 + 1) * 3, rtol=1e-6)
    assert dev._deferred is None and first.waits == second.waits


def test_a_deferred_tail_whose_gate_fails_is_not_submitted_early(dev, rng):
    """A gate that fails never notifies: the next flush raises its error, the tail is
    dropped, and the device keeps working."""
    import anygpu as ag

    latch = NotifyingLatch()
    latch.event.set()
    failing = []

    def wait():
        latch.wait()
        if failing:
            raise RuntimeError("exchange: the other rank went away")

    def step(x):
        dev.host_call(_no_op)
        dev.gate(latch.ready, wait, latch.notify)
        return x * 4.0

    data = rng.standard_normal(9).astype(np.float32)
    compiled = _replaying(step, data)
    dev.flush()
    latch.event.clear()
    failing.append(1)
    compiled(ag.tensor(data))
    tail = dev._deferred
    assert tail is not None and not tail.submitted
    latch.open_from_another_thread(succeeded=False)
    assert not tail.submitted
    with pytest.raises(RuntimeError, match="went away"):
        dev.flush()
    assert not tail.submitted and dev._deferred is None
    np.testing.assert_allclose(dev.read(dev.scale(dev.upload(data), 2.0)), data * 2.0, rtol=1e-6)


def test_a_gpu_error_in_an_early_submit_comes_out_of_the_next_flush(dev, rng, monkeypatch):
    """The worker's submit of a gate's part fails (a GPU error on that thread): nothing after
    it is submitted, the caller's next flush raises it as GpuError, the device keeps working."""
    import anygpu as ag
    from anygpu.runtime.webgpu import wgpu  # the runtime's module: its GPUError is the one caught
    from anygpu.runtime.errors import GpuError

    latch = NotifyingLatch()
    latch.event.set()

    def step(x):
        dev.host_call(_no_op)
        dev.gate(latch.ready, latch.wait, latch.notify)
        return x + 2.0

    data = rng.standard_normal(13).astype(np.float32)
    compiled = _replaying(step, data)
    dev.flush()
    latch.event.clear()
    compiled(ag.tensor(data))
    chain = dev._deferred
    real = dev._queue

    class Failing:
        def submit(self, buffers):
            raise wgpu.GPUError("validation: the part could not be submitted")

        def __getattr__(self, name):
            return getattr(real, name)

    monkeypatch.setattr(dev, "_queue", Failing())
    latch.open_from_another_thread()
    monkeypatch.setattr(dev, "_queue", real)
    assert chain.submitted == 1  # tried (and failed) on the worker thread
    with pytest.raises(GpuError, match="could not be submitted"):
        dev.flush()
    assert dev._deferred is None
    np.testing.assert_allclose(dev.read(dev.scale(dev.upload(data), 3.0)), data * 3.0, rtol=1e-6)


def test_a_failing_deferred_tail_raises_from_the_next_flush_and_the_device_keeps_working(dev, rng):
    def fail():
        raise ValueError("tail: the other side went away")

    dev.defer(fail)
    with pytest.raises(ValueError, match="went away"):
        dev.flush()
    assert dev._deferred is None
    data = rng.standard_normal(5).astype(np.float32)
    np.testing.assert_allclose(dev.read(dev.scale(dev.upload(data), 4.0)), data * 4.0, rtol=1e-6)


def test_work_after_the_trailing_gates_moves_up_to_the_part_it_depends_on():
    """capture._hoisted: each command after the last trailing gate joins the latest gate's
    part that shares a buffer with it (an optimizer update right after its bucket's cut);
    commands that touch one buffer keep their order, whatever the gates; the last gate's
    own upload (a host-filled buffer) and what depends on it stay behind it."""
    from anygpu.runtime.capture import _hoisted

    up_a, up_b, grad_a, grad_b, p_a, p_b, w, free = (object() for _ in range(8))
    commands = [("dispatch", "forward"), ("call",), ("gate", "A"), ("copy", "cut A"), ("gate", "B"),
                ("copy", "cut B"), ("dispatch", "update A"), ("dispatch", "update B"), ("dispatch", "again A"),
                ("dispatch", "reads w"), ("dispatch", "independent")]
    touched = [(p_a, p_b), (), (), (up_a, grad_a), (), (up_b, grad_b, w), (p_a, grad_a), (p_b, grad_b),
               (p_a,), (w,), (free,)]
    # up_a / up_b: filled by the host while gate A / B waits (the buckets' upload buffers).
    order = [commands[i][-1] for i in _hoisted(commands, touched, {up_a, up_b})]
    assert order == ["forward", "call", "A", "cut A", "update A", "again A", "independent",
                     "B", "cut B", "update B", "reads w"]
    # One trailing gate (or none): nothing to move.
    assert _hoisted(commands[:5], touched[:5], {up_a, up_b}) == list(range(5))


def test_hoisted_updates_give_the_same_values_as_in_order(dev, rng):
    """A replayed step whose trailing gates hold two uploads, followed by work on each: the
    moved work reads what its gate's part wrote, the rest waits for the last gate."""
    import anygpu as ag

    def held_second(y, a):
        b = y - 1.0  # held by the second gate
        return a * 3.0, b * 5.0, (a + b) * 0.5  # a * 3 moves up to the first part

    data = rng.standard_normal(37).astype(np.float32)
    compiled, first, second = _two_gates(dev, data, lambda y: y + 1.0, held_second)
    outs = compiled(ag.tensor(data * 7))
    chain = dev._deferred
    first.open_from_another_thread()
    assert chain.submitted == 1
    second.open_from_another_thread()
    assert chain.submitted == 2
    y = data * 14
    for got, want in zip(outs, ((y + 1) * 3, (y - 1) * 5, ((y + 1) + (y - 1)) * 0.5)):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_work_independent_of_a_deferred_tail_is_submitted_ahead_of_it(dev, rng):
    """While a replay's tail waits at its gate, new work on fresh buffers (the next batch's
    preparation) goes to the GPU ahead of it; work on what the tail writes (reading the
    step's output) and everything after that stays behind it, in order."""
    import anygpu as ag

    latch = NotifyingLatch()
    latch.event.set()

    def step(x):
        y = x * 2.0
        dev.host_call(_no_op)
        dev.gate(latch.ready, latch.wait, latch.notify)
        return y + 1.0  # written by the tail

    data = rng.standard_normal(23).astype(np.float32)
    compiled = _replaying(step, data)
    dev.flush()
    latch.event.clear()
    out = compiled(ag.tensor(data))
    chain = dev._deferred
    assert chain is not None and not chain.submitted
    fresh = dev.upload(data * 3)
    prepared = dev.scale(fresh, 0.5)  # independent of the tail
    behind = dev.scale(out._buf, 4.0)  # reads the tail's output
    after_behind = dev.scale(behind, 2.0)  # depends on work held back
    submits = dev.stats["submits"]
    assert not dev.submit_ahead(chain.touched)  # something stays behind the tail
    assert dev.stats["submits"] == submits + 1 and len(dev._pending) == 2
    assert dev._deferred is chain and not chain.submitted
    latch.open_from_another_thread()
    np.testing.assert_allclose(dev.read(prepared), data * 1.5, rtol=1e-6)
    np.testing.assert_allclose(dev.read(after_behind), (data * 2 + 1) * 8, rtol=1e-6)
    np.testing.assert_allclose(out.numpy(), data * 2 + 1, rtol=1e-6)


def test_the_next_replay_starts_from_the_thread_that_submits_the_tail(dev, rng, monkeypatch):
    """A replay called while the previous one's tail waits: its first segment (and its new
    parameters) go out right behind the tail's last part, from the thread that opens the
    gate; values stay exact step after step."""
    import anygpu as ag
    from anygpu.runtime import capture

    latch = NotifyingLatch()
    latch.event.set()
    began = []
    real_begin = capture.Replay._begin

    def begin(self, first, patched):
        began.append(threading.current_thread().name)
        real_begin(self, first, patched)

    monkeypatch.setattr(capture.Replay, "_begin", begin)

    data = rng.standard_normal(31).astype(np.float32)
    compiled = _one_gate(dev, latch, data)
    dev.flush()
    latch.event.clear()
    first = compiled(ag.tensor(data))
    opener = threading.Timer(0.2, latch.open_from_another_thread)
    opener.start()
    second = compiled(ag.tensor(data * 3))  # waits in its flush until the timer opens the gate
    opener.join()
    assert began and began[-1] == "exchange"
    latch.event.set()
    np.testing.assert_allclose(first.numpy(), data * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(second.numpy(), data * 6 + 1, rtol=1e-6)
