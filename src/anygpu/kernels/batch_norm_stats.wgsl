// Batch statistics per channel of x [batch, channels, spatial], one workgroup per channel:
// mean and biased variance over batch*spatial values (two passes, for accuracy). With
// flags bit 0 it also updates the running statistics in place, as torch does:
//   running_mean = (1 - momentum) running_mean + momentum mean
//   running_var  = (1 - momentum) running_var  + momentum var * n / (n - 1)   (unbiased)
struct Params { batch: u32, channels: u32, spatial: u32, momentum: f32, flags: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> mean_out: array<f32>;
@group(0) @binding(3) var<storage, read_write> var_out: array<f32>;
@group(0) @binding(4) var<storage, read_write> running_mean: array<f32>;
@group(0) @binding(5) var<storage, read_write> running_var: array<f32>;

const WG: u32 = 256u;
//! include lib/row_per_workgroup.wgsl
fn row_count() -> u32 { return P.channels; }

fn row_body(c: u32, t: u32) {
    let count = P.batch * P.spatial;
    var acc = 0.0;
    for (var n = 0u; n < P.batch; n++) {
        let base = (n * P.channels + c) * P.spatial;
        for (var s = t; s < P.spatial; s += WG) { acc += x[base + s]; }
    }
    let mean = workgroup_sum(t, acc) / f32(count);
    acc = 0.0;
    for (var n = 0u; n < P.batch; n++) {
        let base = (n * P.channels + c) * P.spatial;
        for (var s = t; s < P.spatial; s += WG) {
            let d = x[base + s] - mean;
            acc += d * d;
        }
    }
    let variance = workgroup_sum(t, acc) / f32(count);
    if (t == 0u) {
        mean_out[c] = mean;
        var_out[c] = variance;
        if ((P.flags & 1u) != 0u) {
            let m = P.momentum;
            running_mean[c] = (1.0 - m) * running_mean[c] + m * mean;
            running_var[c] = (1.0 - m) * running_var[c] + m * variance * f32(count) / f32(count - 1u);
        }
    }
}
