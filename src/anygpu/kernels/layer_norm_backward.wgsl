// Backward of layer_norm.wgsl, one workgroup per row: with xhat = (x - mean) * rstd and
// gy = grad_out * gamma,
//   grad_x = rstd * (gy - mean(gy) - xhat * mean(gy * xhat))
//   grad_out_xhat = grad_out * xhat   (summed over rows by the caller into grad_gamma;
//                                     written only when flags bit 2 is set)
// flags: bit 0 gamma given (else bound to x, unread), bit 2 write grad_out_xhat.
struct Params { rows: u32, cols: u32, eps: f32, flags: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> grad_out: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> gamma: array<f32>;
@group(0) @binding(4) var<storage, read> stats: array<f32>;
@group(0) @binding(5) var<storage, read_write> grad_x: array<f32>;
@group(0) @binding(6) var<storage, read_write> grad_out_xhat: array<f32>;

const WG: u32 = 64u;
//! include lib/row_per_workgroup.wgsl
fn row_count() -> u32 { return P.rows; }

fn row_body(r: u32, t: u32) {
    let base = r * P.cols;
    let mean = stats[2u * r];
    let rstd = stats[2u * r + 1u];
    var sum_gy = 0.0;
    var sum_gy_xhat = 0.0;
    for (var c = t; c < P.cols; c += WG) {
        var gy = grad_out[base + c];
        if ((P.flags & 1u) != 0u) { gy = gy * gamma[c]; }
        sum_gy += gy;
        sum_gy_xhat += gy * (x[base + c] - mean) * rstd;
    }
    let sums = workgroup_sum4(t, vec4<f32>(sum_gy, sum_gy_xhat, 0.0, 0.0));
    let n = f32(P.cols);
    let mean_gy = sums.x / n;
    let mean_gy_xhat = sums.y / n;
    for (var c = t; c < P.cols; c += WG) {
        let g = grad_out[base + c];
        var gy = g;
        if ((P.flags & 1u) != 0u) { gy = gy * gamma[c]; }
        let xhat = (x[base + c] - mean) * rstd;
        grad_x[base + c] = rstd * (gy - mean_gy - xhat * mean_gy_xhat);
        if ((P.flags & 4u) != 0u) { grad_out_xhat[base + c] = g * xhat; }
    }
}
