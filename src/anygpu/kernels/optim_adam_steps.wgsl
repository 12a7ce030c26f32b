// Adam's step counts kept on the GPU (torch's capturable Adam), so a step under a GradScaler
// decides on the GPU whether it runs and can be replayed. `steps` holds 4 words per parameter
// slot: [step count t, skipped, bits of sqrt(1 - beta2^t), bits of -lr / (1 - beta1^t)].
// One thread per slot of this dispatch (slots P.base .. P.base + P.count - 1, those whose bit
// is set in P.mask: the parameters that have a gradient):
//   skipped() (GradScaler's found_inf set): the count stays and the slot is marked skipped
//   else: t = count + 1 is stored, and the two step-dependent scalars of Adam's rule for t
// The update kernels (optim_adam.wgsl, optim_adam_multi.wgsl, launched after this one) read
// the slot's words: nothing is written where it is marked skipped.
// The scalars are computed as torch computes them on the host, in double: lr and the betas
// come split into two f32 (hi + lo), the arithmetic runs on such pairs (about 44 significant
// bits, lib/exact_f32.wgsl's exact products) and the results are rounded once to f32, so
// they equal the host's float(lr / (1 - beta1**t)) and float(sqrt(1 - beta2**t)) except
// where those lie within ~2^-40 relative of a rounding tie. Compilers simplify (a + b) - a
// to b (lavapipe's LLVM does), which breaks the error-free sums: every rounded value they
// reuse passes through kept(), which no compiler can see through (P.zero is 0 at run time).
//! include lib/exact_f32.wgsl
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
{{FOUND_INF}}
@group(0) @binding({{STEPS_BINDING}}) var<storage, read_write> steps: array<u32>;

struct Pair { hi: f32, lo: f32 }

fn kept(x: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(x) ^ P.zero);
}

// a + b as an exact pair (Knuth's two-sum: no products, so no contraction can change it).
fn two_sum(a: f32, b: f32) -> Pair {
    let s = kept(a + b);
    let bb = kept(s - a);
    return Pair(s, kept(a - kept(s - bb)) + kept(b - bb));
}

// a + b as a pair, for |a| >= |b| (or a == 0).
fn quick_two_sum(a: f32, b: f32) -> Pair {
    let s = kept(a + b);
    return Pair(s, b - kept(s - a));
}

fn pair_mul(a: Pair, b: Pair) -> Pair {
    let p = kept(a.hi * b.hi);
    return quick_two_sum(p, product_error(a.hi, b.hi, p) + (a.hi * b.lo + a.lo * b.hi));
}

// b^t for t >= 1 by squaring.
fn pair_pow(b: Pair, t: u32) -> Pair {
    var r = Pair(1.0, 0.0);
    var x = b;
    var k = t;
    loop {
        if ((k & 1u) != 0u) { r = pair_mul(r, x); }
        k = k >> 1u;
        if (k == 0u) { break; }
        x = pair_mul(x, x);
    }
    return r;
}

fn one_minus(x: Pair) -> Pair {
    let s = two_sum(1.0, -x.hi);
    return quick_two_sum(s.hi, s.lo - x.lo);
}

// a / b rounded to f32, for b > 0: one f32 division, then its residual (exact: q * b.hi is
// within a few ulp of a.hi) corrects it.
fn pair_div(a: Pair, b: Pair) -> f32 {
    let q = kept(a.hi / b.hi);
    let p = kept(q * b.hi);
    let r = (((a.hi - p) - product_error(q, b.hi, p)) + a.lo) - q * b.lo;
    return q + r / b.hi;
}

// sqrt(a) rounded to f32, for a > 0: WGSL's sqrt, then one Newton correction from its exact residual.
fn pair_sqrt(a: Pair) -> f32 {
    let s = kept(sqrt(a.hi));
    let p = kept(s * s);
    let r = ((a.hi - p) - product_error(s, s, p)) + a.lo;
    return s + r / (2.0 * s);
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let j = gid.x;
    if (j >= P.count) { return; }
    if (((P.mask[j / 128u][(j / 32u) % 4u] >> (j % 32u)) & 1u) == 0u) { return; }
    let at = 4u * (P.base + j);
    let count = steps[at];
    if (skipped()) {
        steps[at + 1u] = 1u;
        return;
    }
    let t = count + 1u;
    let lr = Pair(P.lr_hi, P.lr_lo);
    let step_size = pair_div(lr, one_minus(pair_pow(Pair(P.beta1_hi, P.beta1_lo), t)));
    let bias_correction2_sqrt = pair_sqrt(one_minus(pair_pow(Pair(P.beta2_hi, P.beta2_lo), t)));
    steps[at] = t;
    steps[at + 1u] = 0u;
    steps[at + 2u] = bitcast<u32>(bias_correction2_sqrt);
    steps[at + 3u] = bitcast<u32>(-step_size);
}
