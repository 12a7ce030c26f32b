"""The one reverse-mode engine: recorded entries and the reverse walk over them.

Both the flat Tape of Layer 1 and the Tensor of Layer 2 record `Entry` objects and
differentiate with `reverse_walk`. The Tape keys values by TensorId; the Tensor
keys them by the Tensor object's id and builds its flat list of entries by a
topological sort of the graph behind the loss (so each backward walks a tape).

Every op keeps its forward and its backward rule side by side: the code that
launches a forward kernel creates the Entry whose `backward` closure routes the
gradient of its output to its inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence


@dataclass(eq=False)
class Entry:
    """One recorded op.

    name:     the op's name (for errors and debugging)
    inputs:   keys of the values the op read, in the order `backward` returns gradients
    output:   key of the value it produced
    backward: grad_out Buffer -> one gradient Buffer (or None) per input
    """

    name: str
    inputs: tuple
    output: Any
    backward: Callable[[Any], Sequence[Any]]


def reverse_walk(entries: Sequence[Entry], grads: dict, add: Callable[[Any, Any], Any],
                 wants_grad: Callable[[Any], bool] = lambda key: True,
                 keep: Callable[[Any], bool] = lambda key: True,
                 done: Callable[[int], None] | None = None,
                 transform: Callable[[Any, Any], Any] | None = None,
                 check: Callable[[Entry, Sequence[Any]], None] | None = None) -> dict:
    """Walk `entries` last to first, routing gradients from outputs to inputs.

    grads:      key -> gradient Buffer; holds the seed (d loss / d loss) on entry and
                every accumulated gradient on return
    add:        how two gradients of the same value are summed (a GPU add)
    wants_grad: whether an input key should receive a gradient at all
    keep:       whether an output's gradient stays in `grads` once used (the Tape
                keeps all; the Tensor frees intermediates as soon as they are spent)
    done:       called with each entry's position once the walk is past it (Tensor.backward
                finds there the leaves whose gradients are complete)
    transform:  transform(key, grad) -> grad, applied to an output's complete gradient before
                its entry uses it (Tensor.register_hook)
    check:      check(entry, its input gradients), called as each entry returns them (anomaly
                detection: raises on NaN)
    """
    for position in range(len(entries) - 1, -1, -1):
        entry = entries[position]
        grad_out = grads.get(entry.output)
        if grad_out is not None:
            if transform is not None:
                grad_out = grads[entry.output] = transform(entry.output, grad_out)
            if not keep(entry.output):
                del grads[entry.output]
            input_grads = entry.backward(grad_out)
            if check is not None:
                check(entry, input_grads)
            for key, grad in zip(entry.inputs, input_grads):
                if grad is None or not wants_grad(key):
                    continue
                previous = grads.get(key)
                grads[key] = grad if previous is None else add(previous, grad)
        if done is not None:
            done(position)
    return grads
