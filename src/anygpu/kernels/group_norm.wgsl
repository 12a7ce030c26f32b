// Group normalisation of x [batch, channels, spatial], one workgroup per (n, g):
//   y = (x - mean) / sqrt(var + eps) * gamma[c] + beta[c]
// over the channels/groups * spatial contiguous values of group g of sample n.
// Two passes (mean, then the mean of squared deviations) keep the variance accurate
// when the mean is large beside the spread, where E[x^2] - E[x]^2 would cancel.
struct Params { batch: u32, channels: u32, spatial: u32, groups: u32, eps: f32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> gamma: array<f32>;
@group(0) @binding(3) var<storage, read> beta: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

const WG: u32 = 256u;
//! include lib/row_per_workgroup.wgsl

fn row_count() -> u32 { return P.batch * P.groups; }

fn row_body(slot: u32, tid: u32) {  // slot = n * groups + g
    let group_c = P.channels / P.groups;
    let count = group_c * P.spatial;
    let base = slot * count;
    let channel0 = (slot % P.groups) * group_c;

    var local_sum = 0.0;
    for (var e = tid; e < count; e = e + WG) { local_sum = local_sum + x[base + e]; }
    let mean = workgroup_sum(tid, local_sum) / f32(count);
    // Scaled by the largest deviation before squaring (see layer_norm.wgsl): finite near 1e30.
    var peak = 0.0;
    for (var e = tid; e < count; e = e + WG) { peak = max(peak, abs(x[base + e] - mean)); }
    let top = workgroup_max(tid, peak);
    let unit = select(1.0, top, top > 0.0);
    var local_sq = 0.0;
    for (var e = tid; e < count; e = e + WG) {
        let d = (x[base + e] - mean) / unit;
        local_sq = local_sq + d * d;
    }
    let rstd = inverseSqrt(workgroup_sum(tid, local_sq) / f32(count) + P.eps / (unit * unit)) / unit;

    for (var e = tid; e < count; e = e + WG) {
        let c = channel0 + e / P.spatial;
        y[base + e] = (x[base + e] - mean) * rstd * gamma[c] + beta[c];
    }
}
