// What group_norm.wgsl and group_norm_backward.wgsl share: their uniforms (packed "IIIIf" by
// anygpu/ops/norm.py), one workgroup of WG threads per group (n, g) of x [batch, channels,
// spatial] (the kernel binds `x` and declares `fn row_body(slot: u32, tid: u32)`, slot =
// n * groups + g), where a group lies, and its statistics.
struct Params { batch: u32, channels: u32, spatial: u32, groups: u32, eps: f32 }
@group(0) @binding(0) var<uniform> P: Params;

const WG: u32 = 256u;
//! include lib/row_per_workgroup.wgsl
//! include lib/norm_rstd.wgsl

fn row_count() -> u32 { return P.batch * P.groups; }

// Group `slot`: `channels` channels from channel `channel0`, their `count` values contiguous
// from x[base].
struct Group { channels: u32, count: u32, base: u32, channel0: u32 }

fn group_at(slot: u32) -> Group {
    let channels = P.channels / P.groups;
    let count = channels * P.spatial;
    return Group(channels, count, slot * count, (slot % P.groups) * channels);
}

// The group's mean and 1 / sqrt(var + eps), to every thread. Two passes (the mean, then the
// mean of squared deviations) keep the variance accurate when the mean is large beside the
// spread, where E[x^2] - E[x]^2 would cancel; the deviations are scaled by the largest one
// before squaring (as in layer_norm.wgsl), so the result stays finite for values near 1e30.
fn group_stats(tid: u32, grp: Group) -> vec2<f32> {
    var local_sum = 0.0;
    for (var e = tid; e < grp.count; e = e + WG) { local_sum = local_sum + x[grp.base + e]; }
    let mean = workgroup_sum(tid, local_sum) / f32(grp.count);
    var peak = 0.0;
    for (var e = tid; e < grp.count; e = e + WG) { peak = max(peak, abs(x[grp.base + e] - mean)); }
    let top = workgroup_max(tid, peak);
    let unit = select(1.0, top, top > 0.0);
    var local_sq = 0.0;
    for (var e = tid; e < grp.count; e = e + WG) {
        let d = (x[grp.base + e] - mean) / unit;
        local_sq = local_sq + d * d;
    }
    let rstd = scaled_rstd(workgroup_sum(tid, local_sq) / f32(grp.count), P.eps, unit);
    return vec2<f32>(mean, rstd);
}
