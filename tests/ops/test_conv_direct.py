"""The direct conv2d (stride 1, dilation 1; kernels/conv_direct.wgsl) against torch on the CPU:
odd sizes, padding, groups, kernel sizes, channel steps that do not divide the channels; the
tuner offers it only where it applies; as a trusted module it writes nothing past its output."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from anygpu.ops import conv_tune
from anygpu.ops.conv_gen import PARAMS, DirectTiles, generate_direct
from anygpu.runtime import shaders

# batch, in_c, in_h, in_w, out_c, k, padding, groups, bias
CASES = {
    "3x3 pad1 odd": (2, 3, 9, 11, 37, 3, 1, 1, True),
    "3x3 no pad": (1, 5, 7, 10, 6, 3, 0, 1, False),
    "5x5 pad2": (2, 4, 8, 7, 9, 5, 2, 1, True),
    "1x1": (1, 6, 5, 6, 10, 1, 0, 1, True),
    "groups 2": (1, 8, 6, 9, 12, 3, 1, 2, True),
    "depthwise": (2, 4, 5, 5, 4, 3, 1, 4, False),
    "pad > k/2": (1, 2, 4, 5, 5, 3, 2, 1, True),
}
TILES = [DirectTiles(16, 4, 4, 2, 3, 3), DirectTiles(8, 8, 8, 1, 2, 2), DirectTiles(4, 4, 4, 4, 1, 1)]


@pytest.mark.parametrize("tiles", TILES, ids=lambda t: t.name)
@pytest.mark.parametrize("name", CASES)
def test_direct_conv2d_matches_torch(dev, rng, upload, read, close, name, tiles):
    batch, in_c, in_h, in_w, out_c, k, pad, groups, with_bias = CASES[name]
    x = rng.standard_normal((batch, in_c, in_h, in_w)).astype(np.float32)
    w = rng.standard_normal((out_c, in_c // groups, k, k)).astype(np.float32)
    b = rng.standard_normal(out_c).astype(np.float32) if with_bias else None
    out = dev.conv2d(upload(x), upload(w), None if b is None else upload(b), batch, in_c, in_h, in_w, out_c,
                     k, k, 1, pad, 1, groups, tiles=tiles)
    expected = F.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64),
                        None if b is None else torch.tensor(b, dtype=torch.float64), padding=pad, groups=groups).numpy()
    close(read(out, expected.shape), expected)


def test_direct_tiles_refuse_stride_and_dilation(dev, upload):
    x, w = upload(np.ones(2 * 9 * 9, np.float32)), upload(np.ones(2 * 2 * 9, np.float32))
    for stride, dilation in ((2, 1), (1, 2)):
        with pytest.raises(ValueError, match="conv2d: direct tiles .* need stride 1 and dilation 1"):
            dev.conv2d(x, w, None, 1, 2, 9, 9, 2, 3, 3, stride, 0, dilation, 1, tiles=TILES[0])


def test_tuner_offers_direct_tiles_only_where_they_apply(dev):
    op = conv_tune.TUNABLES["conv2d"]
    plain = ("f32", 32, 64, 56, 56, 64, 3, 3, (1, 1), (1, 1), (1, 1), 1)
    found = op.candidates(dev, plain)
    direct = [c for c in found if isinstance(c, DirectTiles)]
    assert direct and not isinstance(found[0], DirectTiles)  # the GEMM heuristic stays the fallback
    for tiles in direct:
        assert conv_tune._tiles_parse(op.label(tiles)) == tiles
        assert tiles.workgroup_bytes(3, 3) <= dev.max_workgroup_storage
    strided = plain[:8] + ((2, 2),) + plain[9:]
    assert not any(isinstance(c, DirectTiles) for c in op.candidates(dev, strided))
    grad_weight = conv_tune.TUNABLES["conv2d_grad_weight"]
    assert not any(isinstance(c, DirectTiles) for c in grad_weight.candidates(dev, plain))
    # One direct candidate passes the tuner's float64 check on its small problem.
    from anygpu.ops import tuner
    assert tuner.verify_small(dev, op, direct[0], plain)


def test_trusted_direct_kernel_writes_nothing_past_its_output(dev, rng, upload):
    """Launched with the output of a smaller problem inside a larger buffer, the unchecked
    kernel leaves the rest (sentinels) untouched."""
    tiles = TILES[0]
    source = generate_direct(tiles, 3, 3)
    assert shaders.trusted(source)
    kernel = dev.kernel("conv2d_direct_probe", source, 3, 1, PARAMS["conv2d_direct"].format())
    batch, in_c, h, w, out_c = 2, 3, 7, 9, 5
    n_out = batch * out_c * h * w
    x = upload(rng.standard_normal(batch * in_c * h * w).astype(np.float32))
    wt = upload(rng.standard_normal(out_c * in_c * 9).astype(np.float32))
    out = upload(np.full(n_out + 999, 7.0, np.float32))
    tiles_w, tiles_h, tiles_m = tiles.grid(out_c, h, w)
    params = (batch, in_c, h, w, out_c, h, w, 1, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, tiles_m, 1, 0, tiles_w, tiles_h)
    dev.launch(kernel, [x, wt, wt], [out], params, dev.grid(tiles_w * tiles_h * tiles_m * batch))
    got = dev.read(out)
    assert np.all(got[n_out:] == 7.0) and not np.any(got[:n_out] == 7.0)
