// C[z] = A[z] @ B[z] on i32 elements holding int64 values: A [batch, m, k], B [batch, k, cols],
// contiguous; one thread per element of C. The products and their sum are kept exactly in
// 96 bits (k < 2**31 products of at most 2**62 each cannot pass that), so only the final
// value decides: beyond 32 bits it is reported under P.code with the element's row and column
// (ops/intmath.py) and stored wrapped. Partial sums that pass 32 bits do no harm.
struct Params { n: u32, m: u32, cols: u32, k: u32, code: u32, pad0: u32, pad1: u32, pad2: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> a: array<i32>;
@group(0) @binding(2) var<storage, read> b: array<i32>;
@group(0) @binding(3) var<storage, read_write> c: array<i32>;
@group(0) @binding(4) var<storage, read_write> overflow: array<atomic<i32>>;

//! include lib/int.wgsl
//! include lib/int_overflow.wgsl
//! include lib/element_per_thread.wgsl

// x * y as a 64-bit two's complement (low word, high word): 16-bit halves of |x| and |y|.
fn wide_product(x: i32, y: i32) -> vec2<u32> {
    let ux = bitcast<u32>(abs(x));  // abs(I32_MIN) is I32_MIN, whose bits are 2**31
    let uy = bitcast<u32>(abs(y));
    let x0 = ux & 0xffffu;
    let x1 = ux >> 16u;
    let y0 = uy & 0xffffu;
    let y1 = uy >> 16u;
    let p00 = x0 * y0;
    let p01 = x0 * y1;
    let p10 = x1 * y0;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    var lo = (mid << 16u) | (p00 & 0xffffu);
    var hi = x1 * y1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
    if ((x ^ y) < 0i) {  // negate: ~v + 1 over both words
        lo = ~lo + 1u;
        hi = ~hi + select(0u, 1u, lo == 0u);
    }
    return vec2<u32>(lo, hi);
}

fn element(i: u32) {
    let per_matrix = P.m * P.cols;
    let z = i / per_matrix;
    let row = (i - z * per_matrix) / P.cols;
    let col = i - z * per_matrix - row * P.cols;
    let a_row = (z * P.m + row) * P.k;
    let b_col = z * P.k * P.cols + col;
    var lo = 0u;
    var hi = 0u;
    var top = 0i;
    for (var t = 0u; t < P.k; t = t + 1u) {
        let p = wide_product(a[a_row + t], b[b_col + t * P.cols]);
        let lo_sum = lo + p.x;
        let hi_part = hi + p.y;
        let hi_sum = hi_part + select(0u, 1u, lo_sum < p.x);
        // carries out of the high word: from hi + p.y, or from adding the low word's carry
        let carries = select(0i, 1i, hi_part < p.y) + select(0i, 1i, hi_sum < hi_part);
        top = top + select(0i, -1i, bitcast<i32>(p.y) < 0i) + carries;  // |product| <= 2**62: p.y holds its sign
        lo = lo_sum;
        hi = hi_sum;
    }
    let value = bitcast<i32>(lo);
    let sign = value >> 31u;  // 0 or -1: what the upper words of a 32-bit value hold
    if (bitcast<i32>(hi) != sign || top != sign) {
        report_overflow(P.code, i32(row), i32(col));
    }
    c[i] = value;
}
