// Per-channel sums for the batch-norm backward, one workgroup per channel of
// grad_out and x [batch, channels, spatial], xhat = (x - mean) / sqrt(var + eps):
//   grad_beta[c]  = sum grad_out
//   grad_gamma[c] = sum grad_out * xhat
struct Params { batch: u32, channels: u32, spatial: u32, eps: f32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> grad_out: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> mean: array<f32>;
@group(0) @binding(4) var<storage, read> variance: array<f32>;
@group(0) @binding(5) var<storage, read_write> grad_gamma: array<f32>;
@group(0) @binding(6) var<storage, read_write> grad_beta: array<f32>;

const WG: u32 = 256u;
//! include lib/row_per_workgroup.wgsl
fn row_count() -> u32 { return P.channels; }

fn row_body(c: u32, t: u32) {
    let m = mean[c];
    let rstd = inverseSqrt(variance[c] + P.eps);
    var sum_g = 0.0;
    var sum_gx = 0.0;
    for (var n = 0u; n < P.batch; n++) {
        let base = (n * P.channels + c) * P.spatial;
        for (var s = t; s < P.spatial; s += WG) {
            let g = grad_out[base + s];
            sum_g += g;
            sum_gx += g * (x[base + s] - m) * rstd;
        }
    }
    let sums = workgroup_sum4(t, vec4<f32>(sum_g, sum_gx, 0.0, 0.0));
    if (t == 0u) {
        grad_beta[c] = sums.x;
        grad_gamma[c] = sums.y;
    }
}
