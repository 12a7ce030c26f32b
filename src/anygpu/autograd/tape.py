"""Layer 1: the seed's flat Tape (reverse-mode autograd over Layer-0 ops).

The tape owns every value it records: a leaf's uploaded data and each op's output
Buffer, addressed by `TensorId`. Each recorded method checks its ids, launches the
Layer-0 forward op and, right beside it, records the `Entry` whose backward closure
routes the output's gradient to the inputs through the op's rule in `rules.RULES`.
`backward(loss)` seeds d loss / d loss = 1 and runs the engine's one `reverse_walk`;
gradients of a value used by several ops are summed there.

    tape = Tape(dev)
    a = tape.leaf([1.0, 2.0, 3.0]); t = tape.leaf([0.0, 0.0, 0.0])
    loss = tape.mse_loss(tape.relu(a), t)
    tape.backward(loss)
    tape.read_grad(a)   # numpy float32, or None where no gradient reached
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ..ops import gpu
from ..ops._common import pair
from ..runtime import Buffer
from .rules import RULES
from .engine import Entry, reverse_walk

__all__ = ["Tape", "TensorId"]

_tape_serials = itertools.count(1)


@dataclass(frozen=True)
class TensorId:
    """A value on a Tape: its index there (the seed's `TensorId(u32)`) and which tape made it."""

    index: int
    tape: int


class Tape:
    """Flat reverse-mode autograd on one device (the seed's `Tape`).

    Leaves want gradients unless made with `requires_grad=False`; an op's output wants
    one when any of its inputs does, and only such ops are recorded for backward.
    Sizes and layouts are Layer 0's (row-major, NCHW), passed in its argument order.
    dev: the Device (`anygpu.gpu()` when None).
    """

    def __init__(self, dev=None):
        self.dev = gpu() if dev is None else dev
        self._serial = next(_tape_serials)
        self._bufs: list[Buffer] = []
        self._requires: list[bool] = []
        self._entries: list[Entry] = []
        self._grads: dict[TensorId, Buffer] = {}

    def __len__(self) -> int:
        """How many values the tape holds."""
        return len(self._bufs)

    @property
    def entries(self) -> tuple[Entry, ...]:
        """The recorded ops in order (only those through which a gradient can flow)."""
        return tuple(self._entries)

    def __repr__(self) -> str:
        return f"Tape({len(self._bufs)} values, {len(self._entries)} recorded ops, on {self.dev!r})"

    # ------------------------------------------------------------ values

    def leaf(self, data, requires_grad: bool = True) -> TensorId:
        """Register a leaf (a parameter or input): a list or array (flattened and
        uploaded as float32) or a float32 Buffer of this device (used as is, no copy)."""
        if isinstance(data, Buffer):
            if data.dtype != "f32":
                raise ValueError(f"leaf: the Buffer holds {data.dtype}, expected f32")
            buf = data
        else:
            buf = self.dev.upload(np.asarray(data, dtype=np.float32))
        return self._push(buf, bool(requires_grad))

    def read(self, id: TensorId) -> np.ndarray:
        """A value's data on the host: a 1-D float32 numpy array."""
        return self.dev.read(self._buffers("read", id=id)[0])

    def read_grad(self, id: TensorId) -> np.ndarray | None:
        """d loss / d value from the last `backward` (1-D float32), or None where no
        gradient reached the value (or backward has not run)."""
        grad = self.grad_buffer(id)
        return None if grad is None else self.dev.read(grad)

    def buffer(self, id: TensorId) -> Buffer:
        """A value's GPU Buffer (the tape's own: treat it as read-only)."""
        return self._buffers("buffer", id=id)[0]

    def grad_buffer(self, id: TensorId) -> Buffer | None:
        """A value's gradient Buffer from the last `backward`, or None (stays on the GPU)."""
        self._buffers("grad_buffer", id=id)
        return self._grads.get(id)

    # ------------------------------------------------------------ backward

    def backward(self, loss: TensorId) -> None:
        """Compute d loss / d value for every value the loss depends on.

        The loss must hold exactly one element (the seed gradient is 1.0). Gradients
        of an earlier backward are replaced, not added to."""
        (loss_buf,) = self._buffers("backward", loss=loss)
        if loss_buf.len != 1:
            raise ValueError(f"backward: loss must be a scalar (1 element), {loss} has {loss_buf.len} elements")
        grads = {loss: self.dev.upload(np.ones(1, np.float32))}
        self._grads = reverse_walk(self._entries, grads, self.dev.add,
                                   wants_grad=lambda key: self._requires[key.index])

    # ------------------------------------------------------------ recording

    def _push(self, buf: Buffer, requires_grad: bool) -> TensorId:
        id = TensorId(len(self._bufs), self._serial)
        self._bufs.append(buf)
        self._requires.append(requires_grad)
        return id

    def _buffers(self, op: str, **ids) -> list[Buffer]:
        """The Buffers behind named ids, or ValueError naming the op, argument and id."""
        bufs = []
        for name, id in ids.items():
            if not isinstance(id, TensorId):
                raise ValueError(f"{op}: {name} must be a TensorId of this tape, got {type(id).__name__} {id!r}")
            if id.tape != self._serial:
                raise ValueError(f"{op}: {name} is {id!r}, which belongs to another tape "
                                 f"(this is tape {self._serial})")
            if not 0 <= id.index < len(self._bufs):
                raise ValueError(f"{op}: {name} is {id!r}, which is not on this tape "
                                 f"(it holds {len(self._bufs)} values)")
            bufs.append(self._bufs[id.index])
        return bufs

    def _record(self, name: str, inputs: tuple, out: Buffer, backward) -> TensorId:
        """Push the op's output and, when any input wants a gradient, its Entry.

        backward(grad_out, needs) returns one gradient per input; `needs` says which
        inputs want one, so a rule can skip the work for the others."""
        needs = tuple(self._requires[i.index] for i in inputs)
        out_id = self._push(out, any(needs))
        if any(needs):
            self._entries.append(Entry(name, inputs, out_id, lambda grad_out: backward(grad_out, needs)))
        return out_id

    # ------------------------------------------------------------ elementwise

    def add(self, a: TensorId, b: TensorId) -> TensorId:
        """a + b elementwise (equal lengths)."""
        a_buf, b_buf = self._buffers("add", a=a, b=b)
        dev = self.dev
        out = dev.add(a_buf, b_buf)
        return self._record("add", (a, b), out, lambda g, needs: RULES["add"](dev, g, needs=needs))

    def sub(self, a: TensorId, b: TensorId) -> TensorId:
        """a - b elementwise."""
        a_buf, b_buf = self._buffers("sub", a=a, b=b)
        dev = self.dev
        out = dev.sub(a_buf, b_buf)
        return self._record("sub", (a, b), out, lambda g, needs: RULES["sub"](dev, g, needs=needs))

    def mul(self, a: TensorId, b: TensorId) -> TensorId:
        """a * b elementwise."""
        a_buf, b_buf = self._buffers("mul", a=a, b=b)
        dev = self.dev
        out = dev.mul(a_buf, b_buf)
        return self._record("mul", (a, b), out,
                            lambda g, needs: RULES["mul"](dev, g, a_buf, b_buf, needs=needs))

    def scale(self, a: TensorId, s: float) -> TensorId:
        """a * s for a number s."""
        (a_buf,) = self._buffers("scale", a=a)
        dev = self.dev
        s = float(s)
        out = dev.scale(a_buf, s)
        return self._record("scale", (a,), out, lambda g, needs: RULES["scale"](dev, g, a_buf, out, s))

    def relu(self, a: TensorId) -> TensorId:
        """max(a, 0); gradient grad * (a > 0)."""
        (x,) = self._buffers("relu", a=a)
        dev = self.dev
        out = dev.relu(x)
        return self._record("relu", (a,), out, lambda g, needs: RULES["relu"](dev, g, x, out))

    def sigmoid(self, a: TensorId) -> TensorId:
        """1 / (1 + exp(-a)); gradient from the output y: grad * y (1 - y)."""
        (x,) = self._buffers("sigmoid", a=a)
        dev = self.dev
        y = dev.sigmoid(x)
        return self._record("sigmoid", (a,), y, lambda g, needs: RULES["sigmoid"](dev, g, x, y))

    def swish(self, a: TensorId) -> TensorId:
        """a * sigmoid(a) (SiLU); gradient from the input."""
        (x,) = self._buffers("swish", a=a)
        dev = self.dev
        out = dev.swish(x)
        return self._record("swish", (a,), out, lambda g, needs: RULES["silu"](dev, g, x, out))

    def tanh_act(self, a: TensorId) -> TensorId:
        """tanh(a); gradient from the output y: grad * (1 - y^2)."""
        (x,) = self._buffers("tanh_act", a=a)
        dev = self.dev
        y = dev.tanh_act(x)
        return self._record("tanh_act", (a,), y, lambda g, needs: RULES["tanh"](dev, g, x, y))

    # ------------------------------------------------------------ products and shapes

    def matmul(self, a: TensorId, b: TensorId, m: int, n: int, k: int) -> TensorId:
        """A [m, k] @ B [k, n] -> [m, n]."""
        a_buf, b_buf = self._buffers("matmul", a=a, b=b)
        dev = self.dev
        out = dev.matmul(a_buf, b_buf, m, n, k)
        return self._record("matmul", (a, b), out,
                            lambda g, needs: RULES["matmul"](dev, g, a_buf, b_buf, m, n, k, needs))

    def batch_matmul(self, a: TensorId, b: TensorId, batch: int, m: int, n: int, k: int) -> TensorId:
        """A [batch, m, k] @ B [batch, k, n] -> [batch, m, n]."""
        a_buf, b_buf = self._buffers("batch_matmul", a=a, b=b)
        dev = self.dev
        out = dev.batch_matmul(a_buf, b_buf, batch, m, n, k)
        return self._record("batch_matmul", (a, b), out,
                            lambda g, needs: RULES["batch_matmul"](dev, g, a_buf, b_buf,
                                                                         batch, m, n, k, needs))

    def transpose(self, a: TensorId, outer: int, d0: int, d1: int, inner: int) -> TensorId:
        """[outer, d0, d1, inner] -> [outer, d1, d0, inner]."""
        (a_buf,) = self._buffers("transpose", a=a)
        dev = self.dev
        out = dev.transpose(a_buf, outer, d0, d1, inner)
        return self._record("transpose", (a,), out,
                            lambda g, needs: RULES["transpose"](dev, g, outer, d0, d1, inner))

    def concat(self, a: TensorId, b: TensorId, outer: int, a_inner: int, b_inner: int) -> TensorId:
        """a [outer, a_inner], b [outer, b_inner] -> [outer, a_inner + b_inner]."""
        a_buf, b_buf = self._buffers("concat", a=a, b=b)
        dev = self.dev
        out = dev.concat(a_buf, b_buf, outer, a_inner, b_inner)
        return self._record("concat", (a, b), out,
                            lambda g, needs: RULES["concat"](dev, g, outer, a_inner, b_inner, needs))

    def add_broadcast(self, a: TensorId, b: TensorId, outer: int, inner: int) -> TensorId:
        """a [outer, inner] + b [outer] along inner (a per-channel bias)."""
        a_buf, b_buf = self._buffers("add_broadcast", a=a, b=b)
        dev = self.dev
        out = dev.add_broadcast(a_buf, b_buf, outer, inner)
        return self._record("add_broadcast", (a, b), out,
                            lambda g, needs: RULES["add_broadcast"](dev, g, outer, inner, needs))

    def add_per_col(self, a: TensorId, b: TensorId, rows: int, cols: int) -> TensorId:
        """a [rows, cols] + b [cols] on every row (a linear layer's bias)."""
        a_buf, b_buf = self._buffers("add_per_col", a=a, b=b)
        dev = self.dev
        out = dev.add_per_col(a_buf, b_buf, rows, cols)
        return self._record("add_per_col", (a, b), out,
                            lambda g, needs: RULES["add_per_col"](dev, g, rows, cols, needs))

    # ------------------------------------------------------------ losses, softmax, attention

    def mse_loss(self, pred: TensorId, target: TensorId) -> TensorId:
        """mean((pred - target)^2) -> 1 element; both inputs get gradients."""
        pred_buf, target_buf = self._buffers("mse_loss", pred=pred, target=target)
        dev = self.dev
        out = dev.mse_loss(pred_buf, target_buf)
        return self._record("mse_loss", (pred, target), out,
                            lambda g, needs: RULES["mse_loss"](dev, g, pred_buf, target_buf, needs))

    def softmax(self, x: TensorId, rows: int, cols: int) -> TensorId:
        """Row-wise softmax of x [rows, cols]; gradient from the output."""
        (x_buf,) = self._buffers("softmax", x=x)
        dev = self.dev
        y = dev.softmax(x_buf, rows, cols)
        return self._record("softmax", (x,), y,
                            lambda g, needs: RULES["softmax"](dev, g, y, rows, cols))

    def scaled_dot_product_attention(self, q: TensorId, k: TensorId, v: TensorId,
                                     batch_heads: int, seq_len: int, d_k: int) -> TensorId:
        """softmax(q k^T / sqrt(d_k)) v, each [batch_heads, seq_len, d_k]. The backward
        recomputes the probabilities rather than keeping [batch_heads, seq_len, seq_len]."""
        q_buf, k_buf, v_buf = self._buffers("scaled_dot_product_attention", q=q, k=k, v=v)
        dev = self.dev
        out = dev.scaled_dot_product_attention(q_buf, k_buf, v_buf, batch_heads, seq_len, d_k)
        return self._record("scaled_dot_product_attention", (q, k, v), out,
                            lambda g, needs: RULES["scaled_dot_product_attention"](
                                dev, g, q_buf, k_buf, v_buf, batch_heads, seq_len, d_k))

    # ------------------------------------------------------------ images

    def conv2d(self, input: TensorId, weight: TensorId, bias: TensorId | None, batch: int, in_c: int,
               in_h: int, in_w: int, out_c: int, kh: int, kw: int, stride=1, padding=0, dilation=1,
               groups: int = 1) -> TensorId:
        """PyTorch's conv2d: input [batch, in_c, in_h, in_w], weight [out_c, in_c/groups, kh, kw],
        bias [out_c] or None -> [batch, out_c, out_h, out_w]. stride/padding/dilation: int or (h, w)."""
        named = {"input": input, "weight": weight} | ({} if bias is None else {"bias": bias})
        bufs = self._buffers("conv2d", **named)
        dev = self.dev
        input_buf, weight_buf = bufs[0], bufs[1]
        bias_buf = bufs[2] if bias is not None else None
        out = dev.conv2d(input_buf, weight_buf, bias_buf, batch, in_c, in_h, in_w, out_c, kh, kw,
                         stride, padding, dilation, groups)
        pairs = [pair(v) for v in (stride, padding, dilation)]  # conv2d checked them

        def backward(g, needs):
            return RULES["conv2d"](dev, g, input_buf, weight_buf, batch, in_c, in_h, in_w, out_c, kh, kw,
                                   pairs[0], pairs[1], pairs[2], groups, needs)[:len(needs)]
        return self._record("conv2d", tuple(named.values()), out, backward)

    def conv_transpose2d(self, input: TensorId, weight: TensorId, bias: TensorId | None, batch: int,
                         in_c: int, in_h: int, in_w: int, out_c: int, kh: int, kw: int, stride=1,
                         padding=0, output_padding=0, dilation=1, groups: int = 1) -> TensorId:
        """PyTorch's conv_transpose2d: input [batch, in_c, in_h, in_w], weight
        [in_c, out_c/groups, kh, kw], bias [out_c] or None -> [batch, out_c, out_h, out_w]."""
        named = {"input": input, "weight": weight} | ({} if bias is None else {"bias": bias})
        bufs = self._buffers("conv_transpose2d", **named)
        dev = self.dev
        input_buf, weight_buf = bufs[0], bufs[1]
        bias_buf = bufs[2] if bias is not None else None
        out = dev.conv_transpose2d(input_buf, weight_buf, bias_buf, batch, in_c, in_h, in_w, out_c,
                                   kh, kw, stride, padding, output_padding, dilation, groups)
        pairs = [pair(v) for v in (stride, padding, output_padding, dilation)]

        def backward(g, needs):
            return RULES["conv_transpose2d"](dev, g, input_buf, weight_buf, batch, in_c, in_h, in_w, out_c,
                                             kh, kw, *pairs, groups, needs)[:len(needs)]
        return self._record("conv_transpose2d", tuple(named.values()), out, backward)

    def group_norm(self, x: TensorId, gamma: TensorId, beta: TensorId, batch: int, channels: int,
                   spatial: int, groups: int, eps: float = 1e-5) -> TensorId:
        """GroupNorm of x [batch, channels, spatial] with gamma, beta [channels]; gradients
        for all three."""
        x_buf, gamma_buf, beta_buf = self._buffers("group_norm", x=x, gamma=gamma, beta=beta)
        dev = self.dev
        out = dev.group_norm(x_buf, gamma_buf, beta_buf, batch, channels, spatial, groups, eps)
        return self._record("group_norm", (x, gamma, beta), out,
                            lambda g, needs: RULES["group_norm"](dev, g, x_buf, gamma_buf, batch,
                                                                 channels, spatial, groups, eps, needs))

    def upsample_nearest2d(self, x: TensorId, batch: int, channels: int, in_h: int, in_w: int,
                           scale_h: int, scale_w: int) -> TensorId:
        """[batch, channels, in_h, in_w] -> [batch, channels, in_h*scale_h, in_w*scale_w] (nearest)."""
        (x_buf,) = self._buffers("upsample_nearest2d", x=x)
        dev = self.dev
        out = dev.upsample_nearest2d(x_buf, batch, channels, in_h, in_w, scale_h, scale_w)
        return self._record("upsample_nearest2d", (x,), out,
                            lambda g, needs: RULES["upsample_nearest2d"](dev, g, batch, channels, in_h, in_w,
                                                                         scale_h, scale_w))
