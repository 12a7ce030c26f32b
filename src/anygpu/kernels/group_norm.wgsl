// Group normalisation of x [batch, channels, spatial], one workgroup per (n, g):
//   y = (x - mean) / sqrt(var + eps) * gamma[c] + beta[c]
// over the channels/groups * spatial contiguous values of group g of sample n
// (statistics as lib/group_norm_group.wgsl computes them).
//! include lib/group_norm_group.wgsl
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> gamma: array<f32>;
@group(0) @binding(3) var<storage, read> beta: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

fn row_body(slot: u32, tid: u32) {
    let grp = group_at(slot);
    let stats = group_stats(tid, grp);
    for (var e = tid; e < grp.count; e = e + WG) {
        let c = grp.channel0 + e / P.spatial;
        y[grp.base + e] = (x[grp.base + e] - stats.x) * stats.y * gamma[c] + beta[c];
    }
}
