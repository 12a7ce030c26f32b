{{ENABLE}}
// out[i] = i32(x[i]) for float elements (stored as {{T}}) going to int64: truncated toward
// zero as torch, when the value is within [-2**31, 2**31); anything else (beyond 32 bits,
// inf, NaN) is reported under P.code with the value's f32 bits and its position (ops/intmath.py)
// and stored as 0.
struct Params { n: u32, code: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> out: array<i32>;
@group(0) @binding(3) var<storage, read_write> overflow: array<atomic<i32>>;

//! include lib/int.wgsl
//! include lib/int_overflow.wgsl
//! include lib/element_per_thread.wgsl

fn element(i: u32) {
    let v = f32(x[i]);
    if (v >= -2147483648.0 && v < 2147483648.0) {  // false for NaN
        out[i] = i32(v);
    } else {
        out[i] = 0i;
        report_overflow(P.code, bitcast<i32>(v), i32(i));
    }
}
