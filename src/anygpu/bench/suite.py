"""The benchmarks of `anygpu bench`: each returns a `Row` with anygpu's time per call
and NumPy's and PyTorch's on the same work, measured in the same process.

Rates: GFLOP/s for matmul, conv2d and the training step (flops counted as 2 per
multiply-add), GB/s for elementwise add and softmax (bytes read + written once).
A ratio is peer time / anygpu time: 0.5 means anygpu runs at half the peer's speed."""

from __future__ import annotations

import functools
import importlib
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from ..ops import matmul_tune, norm_tune, softmax_tune, tuner
from ..ops.matmul_gen import Problem
from .timing import WARM_S, time_anygpu, time_host, time_torch


@dataclass
class Row:
    """One benchmark: work per call and seconds per call of anygpu and its peers."""

    name: str
    unit: str                       # "GFLOP/s", "GB/s" or "us/op" (then lower is better)
    work: float = 0.0               # flops or bytes per call
    anygpu: float | None = None     # seconds per call
    peers: dict = field(default_factory=dict)   # "numpy" / "torch" -> seconds per call, or None
    note: str = ""
    detail: dict = field(default_factory=dict)

    def rate(self, seconds: float | None) -> float | None:
        if seconds is None or seconds <= 0:
            return None
        if self.unit == "us/op":
            return seconds * 1e6
        return self.work / seconds / 1e9

    def ratio(self, peer: str) -> float | None:
        """peer seconds / anygpu seconds (above 1: anygpu is faster)."""
        theirs = self.peers.get(peer)
        if theirs is None or not self.anygpu:
            return None
        return theirs / self.anygpu

    def to_json(self) -> dict:
        out = asdict(self)
        out["anygpu_rate"] = self.rate(self.anygpu)
        out["peer_rates"] = {peer: self.rate(s) for peer, s in self.peers.items()}
        out["ratios"] = {peer: self.ratio(peer) for peer in self.peers}
        return out


@dataclass
class Sizes:
    """Problem sizes of one run (see `sizes_for`)."""

    matmul: list            # (m, n, k) triples
    conv: tuple             # batch, in_c, out_c, height/width, kernel
    add: int                # elements
    softmax: tuple          # rows, cols
    train_batch: int
    chain: int = 2000       # ops in the small-op chain
    budget_s: float = 0.2   # time per measurement (split over rounds)
    matmul_f16: tuple = (4096, 4096, 4096)   # (m, n, k) of the f16 matmul row
    gpt: tuple = (6, 384, 6, 256, 64)        # layers, width, heads, block, batch of the GPT rows (nanoGPT's)


def sizes_for(dev, quick: bool = False, matmul=None) -> Sizes:
    """Default sizes for the adapter: full-size work on GPUs, small on CPU adapters
    (software Vulkan runs a GPU's workload thousands of times slower), tiny with --quick."""
    cpu = getattr(dev, "adapter_type", "") == "CPU"
    if quick:
        sizes = Sizes([(64, 64, 64), (128, 128, 128)], (1, 8, 8, 16, 3), 1 << 16, (64, 256), 16,
                      chain=200, budget_s=0.02, matmul_f16=(128, 128, 128), gpt=(1, 32, 2, 16, 2))
    elif cpu:
        sizes = Sizes([(n, n, n) for n in (128, 256, 512)], (2, 32, 32, 28, 3), 1 << 22, (1024, 1024), 64,
                      matmul_f16=(512, 512, 512), gpt=(2, 64, 2, 64, 4))
    else:
        sizes = Sizes([(n, n, n) for n in (256, 512, 1024, 2048, 4096, 8192)], (32, 64, 64, 56, 3),
                      1 << 26, (4096, 4096), 256)
    if matmul:
        sizes.matmul = list(matmul)
    return sizes


# ---------------------------------------------------------------------------- peers


class Peers:
    """NumPy and, when importable, PyTorch (CUDA when available, else CPU; TF32 off)."""

    def __init__(self, use_torch: bool = True):
        self.torch = None
        self.device = "cpu"
        if use_torch:
            try:
                import torch
            except ImportError:
                torch = None
            if torch is not None:
                self.torch = torch
                self.device = "cuda" if torch.cuda.is_available() else "cpu"
                torch.backends.cuda.matmul.allow_tf32 = False   # the fp32 figure, not TF32's
                torch.backends.cudnn.allow_tf32 = False
                if self.device == "cuda":
                    # The CUDA context now, not at the first row's torch call: on the H200 anygpu's
                    # rows timed before torch's first CUDA work ran at about half their speed in
                    # some processes (softmax f32 88 us against 35; docs/NOTES.md), never after it.
                    torch.zeros(1, device="cuda")
                    torch.cuda.synchronize()

    def describe(self) -> dict:
        out = {"numpy": f"NumPy {np.__version__} (CPU)"}
        if self.torch is not None:
            where = self.device
            if self.device == "cuda":
                where += f": {self.torch.cuda.get_device_name(0)}"
            out["torch"] = f"PyTorch {self.torch.__version__} ({where}, TF32 off)"
        return out

    def tensor(self, array: np.ndarray):
        return self.torch.from_numpy(np.ascontiguousarray(array)).to(self.device)

    def time(self, fn, budget_s: float) -> float:
        return time_torch(self.torch, self.device, fn, budget_s=budget_s)

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - want).max() / (np.abs(want).max() + 1e-30))


# ---------------------------------------------------------------------------- rows


# Allowed max_rel_err of the f16 matmul row: its result carries one f16 rounding (2^-11 of
# each value) beside the f32 summation; a wrong kernel is off by far more.
F16_MATMUL_RTOL = 2e-3


def bench_matmul(dev, peers: Peers, m: int, n: int, k: int, budget_s: float, tune: bool = False,
                 dtype: str = "f32") -> Row:
    """C = A @ B of random [m, k] and [k, n] operands, checked against float64.

    dtype "f16": f16 operands and result, summed in f32. Its "torch" peer is torch's
    fp32 product (the yardstick of issue 11: the ratio column) and "torch fp16" torch's
    fp16 one; NumPy's figure is its float32 product of the same values (NumPy's float16
    matmul is a loop without BLAS)."""
    half = dtype == "f16"
    row = Row(f"matmul {m}x{n}x{k}" + (" f16" if half else ""), "GFLOP/s", work=2.0 * m * n * k)
    if half and not getattr(dev, "supports", lambda dtype: False)("f16"):
        row.note = "skipped: the adapter lacks shader-f16"
        return row
    rng = np.random.default_rng(0)
    a = rng.random((m, k), dtype=np.float32) - 0.5
    b = rng.random((k, n), dtype=np.float32) - 0.5
    if half:
        a, b = a.astype(np.float16), b.astype(np.float16)
    problem = Problem(1, m, n, k)
    tunable, key = matmul_tune.TUNABLES[dtype], matmul_tune.key(problem, dtype)
    if tune:
        result = tuner.tune(dev, tunable, key)
        tuner.store(dev, tunable, key, result)
        if result.choice is not None and result.choice.stream:  # and the list products with epilogues use
            unstreamed = matmul_tune.UNSTREAMED[dtype]
            tuner.store(dev, unstreamed, key, tuner.tune(dev, unstreamed, key))
        tuner.forget_choices(dev)
        row.detail["tuning"] = {name: t if isinstance(t, str) else t * 1e3
                                for name, t in result.timings.items()}   # ms per product, or why skipped
    a_gpu, b_gpu = dev.upload(a, dtype), dev.upload(b, dtype)
    row.anygpu = time_anygpu(dev, lambda: dev.matmul(a_gpu, b_gpu, m, n, k), budget_s, detail=row.detail)
    row.detail["config"] = tunable.label(matmul_tune.choose(dev, problem, dtype))
    want = a.astype(np.float64) @ b.astype(np.float64)
    row.detail["max_rel_err"] = _rel_err(dev.read(dev.matmul(a_gpu, b_gpu, m, n, k)).reshape(m, n), want)
    if half and not row.detail["max_rel_err"] <= F16_MATMUL_RTOL:
        row.note = f"WRONG: max_rel_err {row.detail['max_rel_err']:.2e} over the f16 tolerance {F16_MATMUL_RTOL}"
    a32, b32 = a.astype(np.float32, copy=False), b.astype(np.float32, copy=False)
    row.peers["numpy"] = time_host(lambda: a32 @ b32, budget_s=budget_s)
    if peers.torch is not None:
        ta, tb = peers.tensor(a32), peers.tensor(b32)
        row.peers["torch"] = peers.time(lambda: ta @ tb, budget_s)
        if half:
            ha, hb = ta.half(), tb.half()
            row.peers["torch fp16"] = peers.time(lambda: ha @ hb, budget_s)
            row.detail["torch_fp16_max_rel_err"] = _rel_err((ha @ hb).float().cpu().numpy(), want)
    return row


def bench_conv2d(dev, peers: Peers, sizes: Sizes) -> Row:
    batch, in_c, out_c, size, kernel = sizes.conv
    pad = kernel // 2
    name = f"conv2d {kernel}x{kernel} {in_c}->{out_c} {size}x{size} batch {batch}"
    row = Row(name, "GFLOP/s", work=2.0 * batch * out_c * size * size * in_c * kernel * kernel)
    if not hasattr(dev, "conv2d"):
        row.note = "skipped: dev.conv2d does not exist yet"
        return row
    rng = np.random.default_rng(0)
    x = rng.random((batch, in_c, size, size), dtype=np.float32) - 0.5
    w = (rng.random((out_c, in_c, kernel, kernel), dtype=np.float32) - 0.5) * 0.1
    bias = rng.random(out_c, dtype=np.float32)
    x_gpu, w_gpu, bias_gpu = dev.upload(x), dev.upload(w), dev.upload(bias)

    def run():
        return dev.conv2d(x_gpu, w_gpu, bias_gpu, batch, in_c, size, size, out_c, kernel, kernel,
                          1, pad, 1, 1)
    row.anygpu = time_anygpu(dev, run, sizes.budget_s)
    row.peers["numpy"] = None
    row.note = "NumPy has no conv2d"
    if peers.torch is not None:
        torch = peers.torch
        tx, tw, tbias = peers.tensor(x), peers.tensor(w), peers.tensor(bias)
        row.peers["torch"] = peers.time(lambda: torch.nn.functional.conv2d(tx, tw, tbias, padding=pad),
                                        sizes.budget_s)
        want = torch.nn.functional.conv2d(tx, tw, tbias, padding=pad).cpu().numpy().astype(np.float64)
        row.detail["max_rel_err"] = _rel_err(dev.read(run()).reshape(want.shape), want)
    return row


def bench_add(dev, peers: Peers, sizes: Sizes) -> Row:
    count = sizes.add
    row = Row(f"add 2^{count.bit_length() - 1} floats", "GB/s", work=3.0 * 4 * count)
    rng = np.random.default_rng(0)
    a = rng.random(count, dtype=np.float32)
    b = rng.random(count, dtype=np.float32)
    a_gpu, b_gpu = dev.upload(a), dev.upload(b)
    row.anygpu = time_anygpu(dev, lambda: dev.add(a_gpu, b_gpu), sizes.budget_s)
    row.detail["max_rel_err"] = _rel_err(dev.read(dev.add(a_gpu, b_gpu)), a.astype(np.float64) + b)
    row.peers["numpy"] = time_host(lambda: np.add(a, b), budget_s=sizes.budget_s)
    if peers.torch is not None:
        ta, tb = peers.tensor(a), peers.tensor(b)
        row.peers["torch"] = peers.time(lambda: ta + tb, sizes.budget_s)
    return row


def bench_add_f16(dev, peers: Peers, sizes: Sizes) -> Row:
    """The add row on float16 storage (computed in f32): half the bytes of the f32 row."""
    count = sizes.add
    row = Row(f"add 2^{count.bit_length() - 1} halves (f16)", "GB/s", work=3.0 * 2 * count)
    if not getattr(dev, "supports", lambda dtype: False)("f16"):
        row.note = "skipped: the adapter lacks shader-f16"
        return row
    rng = np.random.default_rng(0)
    a = rng.random(count, dtype=np.float32).astype(np.float16)
    b = rng.random(count, dtype=np.float32).astype(np.float16)
    a_gpu, b_gpu = dev.upload(a, "f16"), dev.upload(b, "f16")
    row.anygpu = time_anygpu(dev, lambda: dev.add(a_gpu, b_gpu), sizes.budget_s)
    want = (a.astype(np.float64) + b).astype(np.float16).astype(np.float64)
    row.detail["max_rel_err"] = _rel_err(dev.read(dev.add(a_gpu, b_gpu)).astype(np.float64), want)
    row.peers["numpy"] = time_host(lambda: np.add(a, b), budget_s=sizes.budget_s)
    if peers.torch is not None:
        ta, tb = peers.tensor(a), peers.tensor(b)
        row.peers["torch"] = peers.time(lambda: ta + tb, sizes.budget_s)
    return row


def _softmax_np(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _row_op_bench(dev, peers: Peers, sizes: Sizes, kind: str, dtype: str) -> Row:
    """softmax or layer norm (with gamma and beta) of a rows x cols array on f32 or f16
    storage (computed in f32): bytes = one read and one write of the array."""
    rows, cols = sizes.softmax
    host = np.float16 if dtype == "f16" else np.float32
    label = "softmax" if kind == "softmax" else "layer norm"
    row = Row(f"{label} {rows}x{cols}" + (" f16" if dtype == "f16" else ""), "GB/s",
              work=2.0 * np.dtype(host).itemsize * rows * cols)
    if dtype == "f16" and not getattr(dev, "supports", lambda dtype: False)("f16"):
        row.note = "skipped: the adapter lacks shader-f16"
        return row
    rng = np.random.default_rng(0)
    x = ((rng.random((rows, cols), dtype=np.float32) - 0.5) * 8).astype(host)
    gamma, beta = (rng.standard_normal(cols).astype(host) for _ in range(2))
    x_gpu, g_gpu, b_gpu = dev.upload(x, dtype), dev.upload(gamma, dtype), dev.upload(beta, dtype)
    x64 = x.astype(np.float64)
    if kind == "softmax":
        def run():
            return dev.softmax(x_gpu, rows, cols)
        want = _softmax_np(x64)
    else:
        def run():
            return dev.layer_norm(x_gpu, g_gpu, b_gpu, rows, cols, 1e-5)[0]
        mean = x64.mean(axis=1, keepdims=True)
        want = (x64 - mean) / np.sqrt(((x64 - mean) ** 2).mean(axis=1, keepdims=True) + 1e-5) * gamma + beta
    row.anygpu = time_anygpu(dev, run, sizes.budget_s)
    problem = (dtype, rows, cols)
    if kind == "softmax":  # the kernel the tuner chose, printed as the matmul rows print theirs
        tunable = (softmax_tune.F16_TUNABLES if dtype == "f16" else softmax_tune.TUNABLES)["softmax"]
        row.detail["config"] = tunable.label(softmax_tune.choose(dev, "softmax", problem))
    else:
        row.detail["config"] = norm_tune.TUNABLES[dtype].label(norm_tune.choose(dev, problem))
    row.detail["max_rel_err"] = _rel_err(dev.read(run()).reshape(rows, cols).astype(np.float64), want)
    if kind == "softmax":
        row.peers["numpy"] = time_host(lambda: _softmax_np(x), budget_s=sizes.budget_s)
    else:
        row.peers["numpy"] = None
    if peers.torch is not None:
        torch = peers.torch
        tx, tg, tb = peers.tensor(x), peers.tensor(gamma), peers.tensor(beta)
        if kind == "softmax":
            row.peers["torch"] = peers.time(lambda: torch.softmax(tx, dim=1), sizes.budget_s)
        else:
            row.peers["torch"] = peers.time(lambda: torch.nn.functional.layer_norm(tx, (cols,), tg, tb, 1e-5),
                                            sizes.budget_s)
    return row


def bench_softmax(dev, peers: Peers, sizes: Sizes) -> Row:
    return _row_op_bench(dev, peers, sizes, "softmax", "f32")


def bench_softmax_f16(dev, peers: Peers, sizes: Sizes) -> Row:
    return _row_op_bench(dev, peers, sizes, "softmax", "f16")


def bench_layer_norm(dev, peers: Peers, sizes: Sizes) -> Row:
    return _row_op_bench(dev, peers, sizes, "layer_norm", "f32")


def bench_layer_norm_f16(dev, peers: Peers, sizes: Sizes) -> Row:
    return _row_op_bench(dev, peers, sizes, "layer_norm", "f16")


def bench_overhead(dev, peers: Peers, sizes: Sizes) -> Row:
    """Host cost per small op, end to end: a chain of `scale` ops on 1000 floats, then a read."""
    chain = sizes.chain
    row = Row(f"small-op overhead: {chain} chained scale(1000)", "us/op")
    x = np.ones(1000, np.float32)
    x_gpu = dev.upload(x)

    def run_anygpu():
        y = x_gpu
        for _ in range(chain):
            y = dev.scale(y, 1.0)
        dev.read(y)

    def run_numpy():
        y = x
        for _ in range(chain):
            y = y * np.float32(1.0)
    row.anygpu = time_host(run_anygpu, budget_s=sizes.budget_s, rounds=3) / chain
    before = dev.stats["dispatches"]
    run_anygpu()
    # Elementwise chains are fused (ops/fusion.py; ANYGPU_FUSE=0 runs one kernel per op).
    row.detail["dispatches_per_chain"] = dev.stats["dispatches"] - before
    row.detail["fused"] = bool(getattr(dev, "fuse", False))
    row.peers["numpy"] = time_host(run_numpy, budget_s=sizes.budget_s, rounds=3) / chain
    if peers.torch is not None:
        tx = peers.tensor(x)

        def run_torch():
            y = tx
            for _ in range(chain):
                y = y * 1.0
            y.cpu()
        row.peers["torch"] = time_host(run_torch, budget_s=sizes.budget_s, rounds=3) / chain
    row.note = "wall clock, host included; lower is better"
    return row


def _warm_s(dev) -> float:
    """How long a wall-clock row keeps the device busy before timing (GPUs only: their
    clocks come up under steady work; a software driver has none to raise)."""
    return 0.0 if getattr(dev, "adapter_type", "") == "CPU" else WARM_S


def _train_step_row(dev, peers: Peers, sizes: Sizes, row: Row, build, x: np.ndarray, labels: np.ndarray,
                    captured: bool = False, mixed: bool = False) -> Row:
    """Time one optimizer step (forward, cross-entropy, backward, update) of the model that
    `build(nn_module, optim_module)` returns as (model, optimizer), anygpu beside torch
    (eager). captured: the anygpu step goes through `anygpu.compile` (capture and replay).
    mixed: the forward under autocast, anygpu's float16 with a GradScaler beside torch's
    bfloat16 (what a torch user on an H200 takes); labels as int64 tokens."""
    try:
        ag = importlib.import_module("anygpu")
        nn = importlib.import_module("anygpu.nn")
        optim = importlib.import_module("anygpu.optim")
    except ImportError as exc:
        row.note = f"skipped: anygpu.nn is not importable yet ({exc})"
        return row
    try:
        ag.manual_seed(0)
        model, opt = build(nn, optim)
        x_t, y_t = ag.tensor(x), ag.tensor(labels.astype(np.int32), dtype="int32")
        scaler = ag.amp.GradScaler("cuda", enabled=mixed)

        def train_step(x_in, y_in):
            opt.zero_grad()
            with ag.autocast("cuda", dtype=ag.float16, enabled=mixed):
                loss = nn.functional.cross_entropy(model(x_in), y_in)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            return loss
        run = ag.compile(train_step) if captured else train_step
        row.anygpu = time_host(lambda: run(x_t, y_t), sync=dev.synchronize, budget_s=sizes.budget_s, rounds=3,
                               warm_s=_warm_s(dev))
    except Exception as exc:   # report, do not abort the suite
        row.note = f"skipped: {type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
        return row
    row.note = "wall clock, host included"
    if not captured:  # the kernels one eager step records (fusion and epilogues lower it)
        dev.synchronize()
        before = dev.stats["dispatches"]
        run(x_t, y_t)
        dev.synchronize()
        row.detail["dispatches_per_step"] = dev.stats["dispatches"] - before
        row.detail["fused"] = bool(getattr(dev, "fuse", False))
    if captured:
        row.detail["compiled"] = dict(run.stats)
        if not run.stats["replayed"]:
            row.note += f"; not replayed: {run.reason(x_t, y_t) or 'too few calls to capture'}"
    if peers.torch is not None:
        torch = peers.torch
        torch.manual_seed(0)
        tmodel, topt = build(torch.nn, torch.optim)
        tmodel.to(peers.device)  # moves the parameters in place: the optimizer keeps them
        tx, ty = peers.tensor(x), peers.tensor(labels)

        def torch_step():
            topt.zero_grad()
            with torch.autocast(peers.device, dtype=torch.bfloat16, enabled=mixed):
                loss = torch.nn.functional.cross_entropy(tmodel(tx), ty)
            loss.backward()
            topt.step()
        row.peers["torch"] = time_host(torch_step, sync=peers.sync, budget_s=sizes.budget_s, rounds=3,
                                       warm_s=WARM_S if peers.device == "cuda" else 0.0)
    return row


def bench_train_step(dev, peers: Peers, sizes: Sizes, captured: bool = False) -> Row:
    """One SGD step of an MLP 784-512-512-10 on a batch (captured: through anygpu.compile)."""
    batch = sizes.train_batch
    dims = (784, 512, 512, 10)
    flops = 3 * 2.0 * batch * sum(a * b for a, b in zip(dims, dims[1:]))  # forward + 2x backward
    row = Row(f"train step MLP 784-512-512-10 batch {batch}" + (" captured" if captured else ""),
              "GFLOP/s", work=flops)
    rng = np.random.default_rng(0)

    def build(nn, optim):
        model = nn.Sequential(nn.Linear(dims[0], dims[1]), nn.ReLU(), nn.Linear(dims[1], dims[2]), nn.ReLU(),
                              nn.Linear(dims[2], dims[3]))
        return model, optim.SGD(model.parameters(), lr=0.01)
    return _train_step_row(dev, peers, sizes, row, build, rng.random((batch, dims[0]), dtype=np.float32),
                           rng.integers(0, dims[-1], batch), captured)


def bench_digits_step(dev, peers: Peers, sizes: Sizes, captured: bool = False) -> Row:
    """One Adam step of `anygpu train digits`' CNN on a batch of 32 8x8 images (its
    training setting), beside the same network in torch."""
    batch = 32
    # conv 1->16 and 16->32 (3x3 on 8x8), linear 512->64->10; forward + 2x backward
    flops = 3 * 2.0 * batch * (64 * 16 * 9 + 64 * 32 * 16 * 9 + 512 * 64 + 64 * 10)
    row = Row(f"train step digits CNN batch {batch}" + (" captured" if captured else ""), "GFLOP/s", work=flops)
    rng = np.random.default_rng(0)

    def build(nn, optim):
        model = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10))
        return model, optim.Adam(model.parameters(), lr=4e-3)
    return _train_step_row(dev, peers, sizes, row, build, rng.standard_normal((batch, 1, 8, 8), dtype=np.float32),
                           rng.integers(0, 10, batch), captured)


def gpt_module(nn, layers: int, width: int, heads: int, block: int, vocab: int = 65):
    """A GPT of nanoGPT's form (pre-norm blocks of causal self-attention and a 4x MLP,
    tied embeddings off, no dropout) from `nn` (anygpu.nn or torch.nn); forward(idx [B, T])
    gives the logits as [B * T, vocab]."""
    F = nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(width, dim=2)
            q, k, v = (y.view(b, t, heads, c // heads).transpose(1, 2) for y in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(block, width)
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.ln, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)

        def forward(self, idx):
            b, t = idx.shape
            x = self.tok(idx) + self.pos.weight[:t]
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x)).view(b * t, vocab)
    return GPT()


def bench_gpt_step(dev, peers: Peers, sizes: Sizes, mixed: bool = False) -> Row:
    """One AdamW step of a GPT of nanoGPT's shape (sizes.gpt; 6 layers, 384 wide, block 256,
    batch 64 on GPUs), in float32 or (mixed) under autocast."""
    layers, width, heads, block, batch = sizes.gpt
    # forward + 2x backward of the linear layers and attention's two products; vocabulary 65
    flops = 3 * 2.0 * batch * block * (layers * (12 * width * width + 2 * block * width) + 65 * width)
    label = f"train step GPT {layers}x{width} block {block} batch {batch}" + (" autocast" if mixed else "")
    row = Row(label, "TFLOP/s" if getattr(dev, "adapter_type", "") != "CPU" else "GFLOP/s",
              work=flops / (1e3 if getattr(dev, "adapter_type", "") != "CPU" else 1.0))
    rng = np.random.default_rng(0)

    def build(nn, optim):
        model = gpt_module(nn, layers, width, heads, block)
        return model, optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    idx = rng.integers(0, 65, (batch, block))
    return _train_step_row(dev, peers, sizes, row, build, idx, rng.integers(0, 65, batch * block), mixed=mixed)


def warm_up(dev, seconds: float = 0.5) -> None:
    """Keep a GPU busy for a moment, so the first row is not measured while its clocks
    still climb from idle (on an H200 that made a 256^3 product three times slower)."""
    if getattr(dev, "adapter_type", "") == "CPU":
        return
    a = dev.upload(np.full(1024 * 1024, 0.5, np.float32))
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            dev.matmul_strided(a, a, 1, 1024, 1024, 1024)
        dev.synchronize()


def run_suite(dev, sizes: Sizes, peers: Peers, only=None, tune: bool = False, progress=None) -> list[Row]:
    """Every benchmark (or those named in `only`: matmul, conv2d, add, softmax, norm,
    overhead, train, gpt), in order, after a warm-up."""
    def wanted(name: str) -> bool:
        return not only or name in only

    def done(row: Row) -> Row:
        if progress:
            progress(row)
        return row

    warm_up(dev)
    rows = []
    if wanted("matmul"):
        for m, n, k in sizes.matmul:
            rows.append(done(bench_matmul(dev, peers, m, n, k, sizes.budget_s, tune)))
        m, n, k = sizes.matmul_f16
        rows.append(done(bench_matmul(dev, peers, m, n, k, sizes.budget_s, tune, dtype="f16")))
    for name, bench in (("conv2d", bench_conv2d), ("add", bench_add), ("add", bench_add_f16),
                        ("softmax", bench_softmax), ("softmax", bench_softmax_f16),
                        ("norm", bench_layer_norm), ("norm", bench_layer_norm_f16),
                        ("overhead", bench_overhead), ("train", bench_train_step),
                        ("train", functools.partial(bench_train_step, captured=True)),
                        ("train", bench_digits_step), ("train", functools.partial(bench_digits_step, captured=True)),
                        ("gpt", bench_gpt_step), ("gpt", functools.partial(bench_gpt_step, mixed=True))):
        if wanted(name):
            start = time.perf_counter()
            row = bench(dev, peers, sizes)
            row.detail.setdefault("wall_s", round(time.perf_counter() - start, 3))
            rows.append(done(row))
    return rows
