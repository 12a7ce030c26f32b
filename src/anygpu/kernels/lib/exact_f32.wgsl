// f32 results as torch computes them in double and rounds once (GradScaler's scale arithmetic,
// anygpu/ops/scaler.py), without double in WGSL. Products of halves are exact: a value's high
// half keeps its top 12 significant bits (a bit mask: no compiler rewrites it, where Veltkamp's
// 4097*a split breaks under NVIDIA's contraction of a*b+c), its low half the other 12 or fewer.

fn high_half(a: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(a) & 0xfffff000u);
}

// a * b - p exactly, for p the rounded a * b (Dekker's product; every partial product is exact).
fn product_error(a: f32, b: f32, p: f32) -> f32 {
    let ah = high_half(a);
    let al = a - ah;
    let bh = high_half(b);
    let bl = b - bh;
    return ((ah * bh - p) + ah * bl + al * bh) + al * bl;
}

fn finite(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7f800000u) != 0x7f800000u;
}

// s * (hi + lo) rounded once to f32: hi + lo is a double factor split on the host (hi its f32
// rounding, lo the rest), so this is float(float_scale * double_factor) as torch's update.
fn times_double(s: f32, hi: f32, lo: f32) -> f32 {
    let p = s * hi;
    if (!finite(p)) { return p; }
    return p + (product_error(s, hi, p) + s * lo);
}

// 1 - s * r, with s * r exact (1 - p is exact: p is within a few ulp of 1).
fn reciprocal_residual(s: f32, r: f32) -> f32 {
    let p = s * r;
    return (1.0 - p) - product_error(s, r, p);
}

// 1 / m for m in [1, 2), correctly rounded (as torch's double reciprocal rounded to float):
// WGSL's division may be 2.5 ulp off (NVIDIA's is), one Newton step brings it within an ulp,
// and of it and its two neighbours the one with the least residual is the nearest
// (checked for every f32 m in [1, 2) with initial errors up to 3 ulp).
fn reciprocal_of_mantissa(m: f32) -> f32 {
    var r = 1.0 / m;
    r = r + r * reciprocal_residual(m, r);
    var best = r;
    var least = abs(reciprocal_residual(m, r));
    let below = bitcast<f32>(bitcast<u32>(r) - 1u);
    let above = bitcast<f32>(bitcast<u32>(r) + 1u);
    let rb = abs(reciprocal_residual(m, below));
    if (rb < least) { best = below; least = rb; }
    if (abs(reciprocal_residual(m, above)) < least) { best = above; }
    return best;
}

// 1 / s correctly rounded for a positive normal s (the scale); other s as WGSL divides.
fn reciprocal(s: f32) -> f32 {
    if (!(s > 0.0) || !finite(s) || s < 1.17549435e-38) { return 1.0 / s; }
    let parts = frexp(s);                     // s = fract * 2^exp, fract in [0.5, 1)
    return ldexp(reciprocal_of_mantissa(parts.fract * 2.0), 1 - parts.exp);
}
