// Along the middle axis of x [outer, mid, inner] (i32 elements holding int64 values), one
// thread per (o, i): OP 0 the running sum, 1 the running product (both out [outer, mid, inner]),
// 2 the product (out [outer, inner]; 1 for mid = 0). Each running value is an output, so the
// first one beyond 32 bits is reported under P.code (with the position o * inner + i and the
// step along mid; ops/intmath.py) and stored wrapped. A product is reported only when no
// element of its row is 0 (a zero makes it 0 whatever came before).
struct Params { n: u32, mid: u32, inner: u32, op: u32, code: u32, pad0: u32, pad1: u32, pad2: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<i32>;
@group(0) @binding(2) var<storage, read_write> out: array<i32>;
@group(0) @binding(3) var<storage, read_write> overflow: array<atomic<i32>>;

//! include lib/int.wgsl
//! include lib/int_overflow.wgsl
//! include lib/element_per_thread.wgsl

fn element(i: u32) {
    let o = i / P.inner;
    let base = o * P.mid * P.inner + (i - o * P.inner);
    var acc = select(1i, 0i, P.op == 0u);
    var zero = false;
    var reported = false;
    for (var j = 0u; j < P.mid; j = j + 1u) {
        let at = base + j * P.inner;
        let v = x[at];
        if (P.op == 0u) {
            acc = add_checked(acc, v);
        } else {
            acc = mul_checked(acc, v);
            zero = zero || v == 0i;
        }
        if (P.op == 2u) { continue; }
        if (overflowed && !reported) {
            report_overflow(P.code, i32(i), i32(j));
            reported = true;
        }
        out[at] = acc;
    }
    if (P.op == 2u) {
        if (zero) {
            acc = 0i;
        } else if (overflowed) {
            report_overflow(P.code, i32(i), -1i);
        }
        out[i] = acc;
    }
}
