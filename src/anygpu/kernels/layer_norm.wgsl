{{ENABLE}}
// Layer normalisation over the last `cols` elements, one workgroup per row of x [rows, cols]:
//   y = (x - mean) * rstd * gamma + beta,  rstd = 1 / sqrt(var + eps)  (biased variance,
// computed in two passes for accuracy). flags: bit 0 gamma given, bit 1 beta given
// (an absent one is bound to x and never read). stats[2r], stats[2r+1] = mean, rstd.
struct Params { rows: u32, cols: u32, eps: f32, flags: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read> gamma: array<{{T}}>;
@group(0) @binding(3) var<storage, read> beta: array<{{T}}>;
@group(0) @binding(4) var<storage, read_write> y: array<{{T}}>;
@group(0) @binding(5) var<storage, read_write> stats: array<f32>;

const WG: u32 = 64u;
//! include lib/row_per_workgroup.wgsl
//! include lib/norm_rstd.wgsl
fn row_count() -> u32 { return P.rows; }

fn row_body(r: u32, t: u32) {
    let base = r * P.cols;
    let n = f32(P.cols);
    var acc = 0.0;
    for (var c = t; c < P.cols; c += WG) { acc += f32(x[base + c]); }
    let mean = workgroup_sum(t, acc) / n;
    // Deviations are divided by their largest magnitude before squaring: values near 1e30
    // (whose squares overflow f32) still normalise, as a scaled computation does.
    var peak = 0.0;
    for (var c = t; c < P.cols; c += WG) { peak = max(peak, abs(f32(x[base + c]) - mean)); }
    let top = workgroup_max(t, peak);
    let unit = select(1.0, top, top > 0.0);
    acc = 0.0;
    for (var c = t; c < P.cols; c += WG) {
        let d = (f32(x[base + c]) - mean) / unit;
        acc += d * d;
    }
    let rstd = scaled_rstd(workgroup_sum(t, acc) / n, P.eps, unit);
    for (var c = t; c < P.cols; c += WG) {
        var v = (f32(x[base + c]) - mean) * rstd;
        if ((P.flags & 1u) != 0u) { v = v * f32(gamma[c]); }
        if ((P.flags & 2u) != 0u) { v = v + f32(beta[c]); }
        y[base + c] = {{T}}(v);
    }
    if (t == 0u) {
        stats[2u * r] = mean;
        stats[2u * r + 1u] = rstd;
    }
}
