// out[i] = a[ia] OP b[ib] on i32 elements holding int64 values, with NumPy broadcasting (up
// to 8 dims, right-aligned, stride 0 on a broadcast dim). OP: 0 add, 1 sub, 2 mul,
// 3 floor_divide, 4 pow. A result beyond 32 bits is reported under P.code (ops/intmath.py
// reads the overflow words at the next host read) and stored wrapped.
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> in_a: array<i32>;
@group(0) @binding(2) var<storage, read> in_b: array<i32>;
@group(0) @binding(3) var<storage, read_write> out: array<i32>;
@group(0) @binding(4) var<storage, read_write> overflow: array<atomic<i32>>;

//! include lib/int.wgsl
//! include lib/int_overflow.wgsl
//! include lib/element_per_thread.wgsl

fn element(i: u32) {
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
    var r = 0i;
    switch P.op {
        case 0u: { r = add_checked(a, b); }
        case 1u: { r = sub_checked(a, b); }
        case 2u: { r = mul_checked(a, b); }
        case 3u: { r = floor_div_checked(a, b); }
        default: { r = pow_checked(a, b); }
    }
    if (overflowed) { report_overflow(P.code, a, b); }
    out[i] = r;
}
