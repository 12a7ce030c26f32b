// Integer binary ops with NumPy broadcasting (up to 8 dims, right-aligned; a broadcast
// dim has stride 0): out[i] = f(a[ia], b[ib]) for i32 a, b. EXPR yields the output's
// 32 bits: bitcast<u32>(an i32) for arithmetic, the bits of 1.0/0.0 for comparisons
// (bool tensors are stored as f32 0/1).
struct Params {
    n: u32, ndim: u32, pad0: u32, pad1: u32,
    shape: array<vec4<u32>, 2>,
    a_strides: array<vec4<u32>, 2>,
    b_strides: array<vec4<u32>, 2>,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> in_a: array<i32>;
@group(0) @binding(2) var<storage, read> in_b: array<i32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;

fn as_bool(v: bool) -> u32 { return bitcast<u32>(select(0.0, 1.0, v)); }

// Floor division and the remainder with the divisor's sign, as torch's // and % on integers.
fn floor_div(a: i32, b: i32) -> i32 {
    let q = a / b;
    return select(q, q - 1, (a % b != 0) && ((a < 0) != (b < 0)));
}
fn floor_mod(a: i32, b: i32) -> i32 {
    let r = a % b;
    return select(r, r + b, r != 0 && ((r < 0) != (b < 0)));
}
fn int_pow(a: i32, b: i32) -> i32 {
    var result = 1;
    var base = a;
    var e = u32(max(b, 0));
    loop {
        if (e == 0u) { break; }
        if ((e & 1u) == 1u) { result = result * base; }
        base = base * base;
        e = e >> 1u;
    }
    return result;
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    var rest = i;
    var ia = 0u;
    var ib = 0u;
    for (var d = 7i; d >= 8i - i32(P.ndim); d = d - 1i) {
        let size = P.shape[d / 4][d % 4];
        let coord = rest % size;
        rest = rest / size;
        ia = ia + coord * P.a_strides[d / 4][d % 4];
        ib = ib + coord * P.b_strides[d / 4][d % 4];
    }
    let a = in_a[ia];
    let b = in_b[ib];
    out[i] = {{EXPR}};
}
