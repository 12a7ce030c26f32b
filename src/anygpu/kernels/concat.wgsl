// Concatenate along the inner axis: a [outer, a_inner] and b [outer, b_inner] give
// out [outer, a_inner + b_inner]. One thread per output element.
struct Params { n: u32, a_inner: u32, b_inner: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
//! include lib/element_per_thread.wgsl

fn element(idx: u32) {
    let width = P.a_inner + P.b_inner;
    let row = idx / width;
    let col = idx % width;
    if (col < P.a_inner) {
        out[idx] = a[row * P.a_inner + col];
    } else {
        out[idx] = b[row * P.b_inner + col - P.a_inner];
    }
}
