// out[i] = a[i] + b[B_INDEX]: `a` is [rows, width] flattened and b is broadcast along
// one axis (b[i / width] for one value per row, b[i % width] for one per column).
struct Params { n: u32, width: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
//! include lib/element_per_thread.wgsl

fn element(i: u32) {
    out[i] = a[i] + b[{{B_INDEX}}];
}
