"""torch.nn.utils.rnn: padding and packing batches of variable-length sequences.

A PackedSequence holds the steps of a batch sorted by decreasing length, step by step:
`data` (sum(lengths), *) has at step t the `batch_sizes[t]` sequences still running.
RNN, LSTM and GRU accept one and return one; their final states are in the batch's
original order, as torch's. Lengths live on the host (they decide shapes), as in torch
where they must be a CPU tensor or a list.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ...tensor import Tensor, cat, full, stack, tensor

__all__ = ["PackedSequence", "pack_padded_sequence", "pad_packed_sequence", "pad_sequence", "pack_sequence",
           "unpad_sequence", "unpack_sequence"]


class PackedSequence(namedtuple("PackedSequence", ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])):
    """(data, batch_sizes, sorted_indices, unsorted_indices); build it with
    pack_padded_sequence or pack_sequence. batch_sizes and the index tensors are int64."""

    def to(self, *args, **kwargs) -> "PackedSequence":
        return self

    @property
    def is_cuda(self) -> bool:
        return False

    def _lengths(self) -> np.ndarray:
        """Each sequence's length, in the batch's original order (host)."""
        sizes = _host_ints(self.batch_sizes)
        batch = int(sizes[0]) if sizes.size else 0
        sorted_lengths = np.array([(sizes > b).sum() for b in range(batch)], np.int64)
        if self.unsorted_indices is None:
            return sorted_lengths
        return sorted_lengths[_host_ints(self.unsorted_indices)]


def _host_ints(value) -> np.ndarray:
    if isinstance(value, Tensor):
        host = value._host if value._host is not None else value.numpy()
        return np.asarray(host, np.int64).reshape(-1)
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    return np.asarray(value, np.int64).reshape(-1)


def _order(lengths: np.ndarray, enforce_sorted: bool):
    """(sorted_indices or None, unsorted_indices or None) for these lengths."""
    if enforce_sorted:
        if np.any(np.diff(lengths) > 0):
            raise ValueError("pack_padded_sequence: `lengths` array must be sorted in decreasing order when "
                             "`enforce_sorted` is True. You can pass `enforce_sorted=False` to pack unsorted "
                             "sequences.")
        return None, None
    sorted_indices = np.argsort(-lengths, kind="stable")
    return sorted_indices, np.argsort(sorted_indices, kind="stable")


def _pack(time_major: Tensor, lengths: np.ndarray, sorted_indices) -> PackedSequence:
    """Pack (T, B, *) by `lengths` (original order) and the given sort of the batch."""
    steps, batch = time_major.shape[:2]
    order = np.arange(batch) if sorted_indices is None else sorted_indices
    sorted_lengths = lengths[order]
    batch_sizes = np.array([(sorted_lengths > t).sum() for t in range(int(sorted_lengths[0]))], np.int64)
    # Row t*B + b of the flattened input, for every step t and running sequence b (sorted order).
    rows = np.concatenate([t * batch + order[:size] for t, size in enumerate(batch_sizes)])
    flat = time_major.reshape(steps * batch, *time_major.shape[2:])
    data = flat.index_select(0, tensor(rows.astype(np.int64)))
    if sorted_indices is None:
        return PackedSequence(data, tensor(batch_sizes), None, None)
    return PackedSequence(data, tensor(batch_sizes), tensor(sorted_indices.astype(np.int64)),
                          tensor(np.argsort(sorted_indices, kind="stable").astype(np.int64)))


def pack_padded_sequence(input: Tensor, lengths, batch_first: bool = False, enforce_sorted: bool = True):
    """Pack a padded batch (T, B, *) ((B, T, *) with batch_first) of sequences of `lengths`
    (a list or an int tensor, B entries, each in 1..T). enforce_sorted=True requires
    lengths in decreasing order; otherwise the batch is sorted here and restored later."""
    if not isinstance(input, Tensor):
        raise TypeError(f"pack_padded_sequence: input must be an anygpu Tensor, got {type(input).__name__}")
    lengths = _host_ints(lengths)
    if input.ndim < 2:
        raise ValueError(f"pack_padded_sequence: input must have a time and a batch dim, got shape {input.shape}")
    time_major = input.transpose(0, 1) if batch_first else input
    steps, batch = time_major.shape[:2]
    if lengths.size != batch:
        raise ValueError(f"pack_padded_sequence: expected {batch} lengths (one per sequence), got {lengths.size}")
    if lengths.size and (lengths.min() <= 0 or lengths.max() > steps):
        raise ValueError(f"pack_padded_sequence: lengths must be in 1..{steps} (the padded length), "
                         f"got {lengths.tolist()}")
    sorted_indices, _ = _order(lengths, enforce_sorted)
    return _pack(time_major, lengths, sorted_indices)


def _padded_time_major(sequence: PackedSequence, padding_value: float, total_length: int | None):
    """(padded (T, B, *) in the batch's original order, lengths in original order)."""
    lengths = sequence._lengths()
    steps = int(lengths.max()) if lengths.size else 0
    if total_length is not None:
        if total_length < steps:
            raise ValueError(f"pad_packed_sequence: total_length {total_length} is less than the longest "
                             f"sequence ({steps})")
        steps = total_length
    batch = lengths.size
    order = np.arange(batch) if sequence.sorted_indices is None else _host_ints(sequence.sorted_indices)
    sizes = _host_ints(sequence.batch_sizes)
    data = sequence.data
    # Each (t, b) picks its row of data, or the extra padding row appended at the end.
    pick = np.full((steps, batch), data.shape[0], np.int64)
    start = 0
    for t, size in enumerate(sizes):
        pick[t, order[:size]] = np.arange(start, start + size)
        start += size
    pad_row = full((1,) + data.shape[1:], float(padding_value))
    source = cat([data, pad_row], 0)
    padded = source.index_select(0, tensor(pick.reshape(-1))).reshape(steps, batch, *data.shape[1:])
    return padded, lengths


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False, padding_value: float = 0.0,
                        total_length: int | None = None):
    """The inverse of pack_padded_sequence: (padded (T, B, *) or (B, T, *), lengths (B,) int64),
    in the batch's original order, padding_value past each sequence's end."""
    if not isinstance(sequence, PackedSequence):
        raise TypeError(f"pad_packed_sequence: expected a PackedSequence, got {type(sequence).__name__}")
    padded, lengths = _padded_time_major(sequence, padding_value, total_length)
    return (padded.transpose(0, 1) if batch_first else padded), tensor(lengths)


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0, padding_side: str = "right"):
    """Stack sequences of shapes (L_i, *) into (T, B, *) ((B, T, *) with batch_first),
    T = max L_i, padding with padding_value on the right (or the left)."""
    sequences = list(sequences)
    if not sequences:
        raise ValueError("pad_sequence: expected a non-empty list of tensors")
    if padding_side not in ("right", "left"):
        raise ValueError(f"pad_sequence: padding_side must be 'right' or 'left', got {padding_side!r}")
    trailing = sequences[0].shape[1:]
    for seq in sequences:
        if seq.shape[1:] != trailing:
            raise ValueError(f"pad_sequence: sequences must agree after the first dim, got {sequences[0].shape} "
                             f"and {seq.shape}")
    steps = max(seq.shape[0] for seq in sequences)
    padded = []
    for seq in sequences:
        missing = steps - seq.shape[0]
        if missing:
            pad = full((missing,) + trailing, padding_value, dtype=seq.dtype)
            seq = cat([seq, pad] if padding_side == "right" else [pad, seq], 0)
        padded.append(seq)
    return stack(padded, 0 if batch_first else 1)


def unpad_sequence(padded_sequences: Tensor, lengths, batch_first: bool = False) -> list[Tensor]:
    """The sequences of a padded batch, each cut to its length."""
    lengths = _host_ints(lengths)
    batch_major = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    return [batch_major[b, :int(length)] for b, length in enumerate(lengths)]


def pack_sequence(sequences, enforce_sorted: bool = True) -> PackedSequence:
    """pack_padded_sequence(pad_sequence(sequences), [len(s) for s in sequences])."""
    sequences = list(sequences)
    return pack_padded_sequence(pad_sequence(sequences), [seq.shape[0] for seq in sequences],
                                enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list[Tensor]:
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
