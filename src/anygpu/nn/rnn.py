"""Recurrent layers with torch.nn's names, arguments, parameter names and initialisation:
RNN, LSTM, GRU and their single-step cells.

Built from Tensor ops, whose backward comes with them. The input projection of a whole
sequence is one matmul (x W_ih^T + b_ih for every time step at once); each time step then
adds h W_hh^T + b_hh and applies the gates. Parameters are registered in torch's order
(weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, then the `_reverse` direction, then
the next layer), so `load_state_dict` of a torch state dict works and optimizers index
them as torch does.

Gate layouts follow torch: LSTM rows are (input, forget, cell, output), GRU rows are
(reset, update, new), with n = tanh(x W_in^T + b_in + r * (h W_hn^T + b_hn)).
"""

from __future__ import annotations

import math

import numpy as np

from . import functional as F
from . import init
from .modules import Module, Parameter
from .utils.rnn import PackedSequence, _host_ints, _pack, _padded_time_major
from ..dtypes import float64 as _float64
from ..tensor import Tensor, cat, stack, tensor, where, zeros

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


# ====================================================================== one time step

def _rnn_step(gates_x: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None, relu: bool) -> Tensor:
    pre = gates_x + F.linear(h, w_hh, b_hh)
    return F.relu(pre) if relu else F.tanh(pre)


def _lstm_step(gates_x: Tensor, h: Tensor, c: Tensor, w_hh: Tensor, b_hh: Tensor | None):
    gates = gates_x + F.linear(h, w_hh, b_hh)
    size = h.shape[-1]
    # One sigmoid over all four gates (the cell gate's quarter is unused): fewer launches
    # per step than four slices with an activation each.
    squashed = F.sigmoid(gates)
    i = squashed[..., :size]
    f = squashed[..., size:2 * size]
    o = squashed[..., 3 * size:]
    g = F.tanh(gates[..., 2 * size:3 * size])
    c = f * c + i * g
    return o * F.tanh(c), c


def _gru_step(gates_x: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None) -> Tensor:
    gates_h = F.linear(h, w_hh, b_hh)
    size = h.shape[-1]
    r = F.sigmoid(gates_x[..., :size] + gates_h[..., :size])
    z = F.sigmoid(gates_x[..., size:2 * size] + gates_h[..., size:2 * size])
    n = F.tanh(gates_x[..., 2 * size:] + r * gates_h[..., 2 * size:])
    return n + z * (h - n)  # (1 - z) * n + z * h


def _check_input(name: str, input: Tensor, input_size: int, batched_ndim: int) -> bool:
    """True when the input has a batch dim; raises for a wrong rank or feature size."""
    if not isinstance(input, Tensor):
        raise TypeError(f"{name}: input must be an anygpu Tensor, got {type(input).__name__}")
    if input.ndim not in (batched_ndim - 1, batched_ndim):
        raise ValueError(f"{name}: expected input to be {batched_ndim - 1}-D or {batched_ndim}-D, "
                         f"got shape {input.shape}")
    if input.shape[-1] != input_size:
        raise ValueError(f"{name}: input.size(-1) must be equal to input_size. Expected {input_size}, "
                         f"got {input.shape[-1]}")
    return input.ndim == batched_ndim


def _check_hidden(name: str, hidden: Tensor, expected: tuple[int, ...], what: str = "hidden") -> None:
    if not isinstance(hidden, Tensor):
        raise TypeError(f"{name}: {what} state must be an anygpu Tensor, got {type(hidden).__name__}")
    if hidden.shape != expected:
        raise ValueError(f"{name}: expected {what} size {expected}, got {hidden.shape}")


# ====================================================================== multi-layer layers

def _state_dtype(x):
    """The dtype of zero initial states: float64 for float64 input (torch requires the input's
    dtype), float32 otherwise (float16 inputs keep float32 states, as before)."""
    return x.dtype if x.dtype is _float64 else None


class RNNBase(Module):
    """Shared by RNN, LSTM and GRU: arguments, parameters, initialisation and the layer loop.

    forward(input, hx=None): input (L, N, H_in), (N, L, H_in) with batch_first, unbatched
    (L, H_in), or a PackedSequence (then the output is one too); hx (num_layers * D, N, H_out) (unbatched: (num_layers * D, H_out)),
    zeros when None, a pair (h_0, c_0) for LSTM. Returns (output, h_n) (LSTM: (output,
    (h_n, c_n))): output (L, N, D * H_out) (batch_first: (N, L, D * H_out)) holds the last
    layer's h at every step, both directions side by side when bidirectional (D = 2)."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None):
        super().__init__()
        name = type(self).__name__
        if not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError(f"{name}: hidden_size must be a positive integer, got {hidden_size!r}")
        if not isinstance(num_layers, int) or num_layers <= 0:
            raise ValueError(f"{name}: num_layers must be a positive integer, got {num_layers!r}")
        if isinstance(dropout, bool) or not 0 <= dropout <= 1:
            raise ValueError(f"{name}: dropout should be a number in range [0, 1] representing the probability "
                             f"of an element being zeroed, got {dropout!r}")
        if proj_size:
            raise ValueError(f"{name}: proj_size is not supported (got {proj_size})")
        self.mode = mode
        self.input_size = int(input_size)
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = 0
        directions = 2 if bidirectional else 1
        gate_size = _GATES[mode] * hidden_size
        self._flat_weights_names: list[str] = []
        for layer in range(num_layers):
            layer_input = self.input_size if layer == 0 else hidden_size * directions
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                shapes = [("weight_ih", (gate_size, layer_input)), ("weight_hh", (gate_size, hidden_size))]
                if bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                for kind, shape in shapes:
                    self.register_parameter(kind + suffix, Parameter(zeros(*shape)))
                    self._flat_weights_names.append(kind + suffix)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every weight and bias ~ U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as torch."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for param in self.parameters():
            init.uniform_(param, -bound, bound)

    @property
    def all_weights(self) -> list[list[Parameter]]:
        per = 4 if self.bias else 2
        names = self._flat_weights_names
        return [[getattr(self, n) for n in names[i:i + per]] for i in range(0, len(names), per)]

    def flatten_parameters(self) -> None:
        """Accepted for PyTorch code (cuDNN's weight packing); nothing to do here."""

    def _weights(self, layer: int, direction: int):
        suffix = f"_l{layer}" + ("_reverse" if direction else "")
        get = self._parameters.get
        return get("weight_ih" + suffix), get("weight_hh" + suffix), get("bias_ih" + suffix), get("bias_hh" + suffix)

    def _run_direction(self, x: Tensor, state, layer: int, direction: int, running=None):
        """One layer, one direction over time-major x (L, N, H_in): (outputs (L, N, H), final state).

        running: None, or a bool (L, N, 1) mask of the steps inside each sequence (packed
        input): outside it the state is carried unchanged and the output is 0, so a
        sequence's final state is the one at its own last step, and the reverse direction
        starts at it."""
        w_ih, w_hh, b_ih, b_hh = self._weights(layer, direction)
        gates_x = F.linear(x, w_ih, b_ih)  # every time step's input projection in one matmul
        steps = range(x.shape[0] - 1, -1, -1) if direction else range(x.shape[0])
        outputs = [None] * x.shape[0]
        for t in steps:
            new = self._cell(gates_x[t], state, w_hh, b_hh)
            if running is not None:
                keep = running[t]
                new = tuple(where(keep, n, s) for n, s in zip(new, state)) if isinstance(new, tuple) \
                    else where(keep, new, state)
            state = new
            h = state[0] if isinstance(state, tuple) else state
            outputs[t] = h if running is None else where(running[t], h, 0.0)
        return stack(outputs, 0), state

    def _cell(self, gates_x, state, w_hh, b_hh):
        if self.mode == "LSTM":
            return _lstm_step(gates_x, state[0], state[1], w_hh, b_hh)
        if self.mode == "GRU":
            return _gru_step(gates_x, state, w_hh, b_hh)
        return _rnn_step(gates_x, state, w_hh, b_hh, relu=self.mode == "RNN_RELU")

    def _initial_states(self, hx, batch: int, batched: bool, dtype=None):
        """A list with one initial state per (layer, direction), each (N, H) (an (h, c) pair for LSTM)."""
        name = type(self).__name__
        count = self.num_layers * (2 if self.bidirectional else 1)
        expected = (count, batch, self.hidden_size) if batched else (count, self.hidden_size)
        lstm = self.mode == "LSTM"
        if hx is None:
            hx = (zeros(*expected, dtype=dtype), zeros(*expected, dtype=dtype)) if lstm else zeros(*expected, dtype=dtype)
        if lstm:
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise ValueError(f"{name}: hx must be a pair (h_0, c_0), got {type(hx).__name__}")
            _check_hidden(name, hx[0], expected)
            _check_hidden(name, hx[1], expected, "cell")
            parts = [t if batched else t.unsqueeze(1) for t in hx]
            return [(parts[0][i], parts[1][i]) for i in range(count)]
        _check_hidden(name, hx, expected)
        hx = hx if batched else hx.unsqueeze(1)
        return [hx[i] for i in range(count)]

    def _layers(self, x: Tensor, states, running=None):
        """Every layer over time-major x (L, N, H_in): (last layer's outputs, final states)."""
        directions = 2 if self.bidirectional else 1
        finals = []
        for layer in range(self.num_layers):
            if layer > 0 and self.dropout > 0 and self.training:
                x = F.dropout(x, self.dropout, True)
            outputs = []
            for direction in range(directions):
                out, final = self._run_direction(x, states[layer * directions + direction], layer, direction,
                                                 running)
                outputs.append(out)
                finals.append(final)
            x = outputs[0] if directions == 1 else cat(outputs, 2)
        return x, finals

    def _final_states(self, finals, batched: bool = True):
        if self.mode == "LSTM":
            h_n, c_n = stack([f[0] for f in finals], 0), stack([f[1] for f in finals], 0)
            return (h_n, c_n) if batched else (h_n.squeeze(1), c_n.squeeze(1))
        h_n = stack(finals, 0)
        return h_n if batched else h_n.squeeze(1)

    def _forward_packed(self, input: PackedSequence, hx):
        """A PackedSequence in, a PackedSequence out (same sort); hx and the final states are
        in the batch's original order, as torch's."""
        if not isinstance(input.data, Tensor) or input.data.ndim != 2 or input.data.shape[1] != self.input_size:
            raise ValueError(f"{type(self).__name__}: packed input data must be (sum(lengths), {self.input_size}), "
                             f"got {getattr(input.data, 'shape', None)}")
        x, lengths = _padded_time_major(input, 0.0, None)
        running = np.arange(x.shape[0])[:, None, None] < lengths[None, :, None]
        states = self._initial_states(hx, x.shape[1], True, _state_dtype(x))
        x, finals = self._layers(x, states, tensor(running))
        sorted_indices = None if input.sorted_indices is None else _host_ints(input.sorted_indices)
        return _pack(x, lengths, sorted_indices), self._final_states(finals)

    def forward(self, input, hx=None):
        if isinstance(input, PackedSequence):
            return self._forward_packed(input, hx)
        name = type(self).__name__
        batched = _check_input(name, input, self.input_size, 3)
        if not batched:
            x = input.unsqueeze(1)
        else:
            x = input.transpose(0, 1) if self.batch_first else input
        states = self._initial_states(hx, x.shape[1], batched, _state_dtype(x))
        x, finals = self._layers(x, states)
        output = x.squeeze(1) if not batched else (x.transpose(0, 1) if self.batch_first else x)
        return output, self._final_states(finals, batched)

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            text += f", num_layers={self.num_layers}"
        if self.mode == "RNN_RELU":
            text += ", nonlinearity='relu'"
        if not self.bias:
            text += ", bias=False"
        if self.batch_first:
            text += ", batch_first=True"
        if self.dropout:
            text += f", dropout={self.dropout}"
        if self.bidirectional:
            text += ", bidirectional=True"
        return text


def _rnn_arguments(args, kwargs):
    """RNN's arguments as torch takes them: positionally (input_size, hidden_size, num_layers,
    nonlinearity, bias, batch_first, dropout, bidirectional) or by keyword."""
    names = ("input_size", "hidden_size", "num_layers", "nonlinearity", "bias", "batch_first", "dropout",
             "bidirectional", "device", "dtype")
    if len(args) > len(names):
        raise TypeError(f"RNN takes at most {len(names)} positional arguments, got {len(args)}")
    values = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names:
            raise TypeError(f"RNN got an unexpected keyword argument {key!r}")
        if key in values:
            raise TypeError(f"RNN got multiple values for argument {key!r}")
        values[key] = value
    return values


class RNN(RNNBase):
    """Elman RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or relu with
    nonlinearity='relu'). RNN(input_size, hidden_size, num_layers=1, nonlinearity='tanh',
    bias=True, batch_first=False, dropout=0.0, bidirectional=False)."""

    def __init__(self, *args, **kwargs):
        values = _rnn_arguments(args, kwargs)
        nonlinearity = values.pop("nonlinearity", "tanh")
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: unknown nonlinearity {nonlinearity!r}, select from 'tanh' or 'relu'")
        self.nonlinearity = nonlinearity
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", **values)


class LSTM(RNNBase):
    """Long short-term memory: i, f, g, o = sigmoid/sigmoid/tanh/sigmoid of
    x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh; c_t = f c_{t-1} + i g; h_t = o tanh(c_t).
    LSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
    bidirectional=False); proj_size is not supported."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size)


class GRU(RNNBase):
    """Gated recurrent unit: r, z = sigmoid of the summed projections; n = tanh(x W_in^T +
    b_in + r (h W_hn^T + b_hn)); h_t = (1 - z) n + z h_{t-1}. Same arguments as LSTM."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, device=None,
                 dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional)


# ====================================================================== cells

class RNNCellBase(Module):
    """One time step: weight_ih (G*H, H_in), weight_hh (G*H, H), bias_ih, bias_hh (G*H,),
    all ~ U(-1/sqrt(H), 1/sqrt(H)). Input (N, H_in) or (H_in,); hidden (N, H) or (H,)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool, gates: int):
        super().__init__()
        self.input_size = int(input_size)
        self.hidden_size = int(hidden_size)
        self.bias = bias
        self.weight_ih = Parameter(zeros(gates * self.hidden_size, self.input_size))
        self.weight_hh = Parameter(zeros(gates * self.hidden_size, self.hidden_size))
        if bias:
            self.bias_ih = Parameter(zeros(gates * self.hidden_size))
            self.bias_hh = Parameter(zeros(gates * self.hidden_size))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        for param in self.parameters():
            init.uniform_(param, -bound, bound)

    def _prepare(self, input, states):
        """(input, states) with a batch dim, and whether the input had one."""
        name = type(self).__name__
        batched = _check_input(name, input, self.input_size, 2)
        shape = (input.shape[0], self.hidden_size) if batched else (self.hidden_size,)
        ready = []
        for what, state in states:
            if state is None:
                state = zeros(*shape, dtype=_state_dtype(input))
            _check_hidden(name, state, shape, what)
            ready.append(state if batched else state.unsqueeze(0))
        return (input if batched else input.unsqueeze(0)), ready, batched

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            text += ", bias=False"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            text += f", nonlinearity={self.nonlinearity!r}"
        return text


class RNNCell(RNNCellBase):
    """h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (or relu)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNNCell: unknown nonlinearity {nonlinearity!r}, select from 'tanh' or 'relu'")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias, 1)

    def forward(self, input, hx=None):
        x, (h,), batched = self._prepare(input, [("hidden", hx)])
        h = _rnn_step(F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh,
                      relu=self.nonlinearity == "relu")
        return h if batched else h.squeeze(0)


class LSTMCell(RNNCellBase):
    """One LSTM step: forward(input, (h, c) or None) -> (h', c')."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 4)

    def forward(self, input, hx=None):
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise ValueError(f"LSTMCell: hx must be a pair (h, c), got {type(hx).__name__}")
        h0, c0 = (None, None) if hx is None else hx
        x, (h, c), batched = self._prepare(input, [("hidden", h0), ("cell", c0)])
        h, c = _lstm_step(F.linear(x, self.weight_ih, self.bias_ih), h, c, self.weight_hh, self.bias_hh)
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    """One GRU step: forward(input, h or None) -> h'."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 3)

    def forward(self, input, hx=None):
        x, (h,), batched = self._prepare(input, [("hidden", hx)])
        h = _gru_step(F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh)
        return h if batched else h.squeeze(0)
