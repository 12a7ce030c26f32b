// Gradient of group_norm, one workgroup per (n, g). With xhat = (x - mean) * rstd and
// the group's count values:
//   dx = rstd * (dy*gamma - mean(dy*gamma) - xhat * mean(dy*gamma*xhat))
// and the per-sample channel sums dbeta_part[n, c] = sum_p dy, dgamma_part[n, c] =
// sum_p dy*xhat, which the caller sums over the batch. The statistics are recomputed
// (lib/group_norm_group.wgsl, as in the forward) rather than stored by the forward.
//! include lib/group_norm_group.wgsl
@group(0) @binding(1) var<storage, read> grad_out: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> gamma: array<f32>;
@group(0) @binding(4) var<storage, read_write> dx: array<f32>;
@group(0) @binding(5) var<storage, read_write> dgamma_part: array<f32>;
@group(0) @binding(6) var<storage, read_write> dbeta_part: array<f32>;

// Channels with at least this many positions are summed by the whole workgroup,
// shorter ones by one thread each (a workgroup tree per tiny channel is all barriers).
const WIDE_CHANNEL: u32 = 32u;

// Two sums over the workgroup at once, returned to every thread.
fn workgroup_sum2(tid: u32, value: vec2<f32>) -> vec2<f32> {
    return workgroup_sum4(tid, vec4<f32>(value, 0.0, 0.0)).xy;
}

fn row_body(slot: u32, tid: u32) {
    let grp = group_at(slot);
    let part0 = (slot / P.groups) * P.channels + grp.channel0;  // [n, channel0] in the partials
    let stats = group_stats(tid, grp);
    let mean = stats.x;
    let rstd = stats.y;

    // Group means of dy*gamma and dy*gamma*xhat.
    var local_terms = vec2<f32>(0.0);
    for (var e = tid; e < grp.count; e = e + WG) {
        let dy_gamma = grad_out[grp.base + e] * gamma[grp.channel0 + e / P.spatial];
        local_terms = local_terms + vec2<f32>(dy_gamma, dy_gamma * (x[grp.base + e] - mean) * rstd);
    }
    let group_means = workgroup_sum2(tid, local_terms) / f32(grp.count);

    // Per-channel sums of dy and dy*xhat over the positions of this sample.
    if (P.spatial >= WIDE_CHANNEL) {
        for (var cl = 0u; cl < grp.channels; cl = cl + 1u) {
            let channel_base = grp.base + cl * P.spatial;
            var local_channel = vec2<f32>(0.0);
            for (var p = tid; p < P.spatial; p = p + WG) {
                let dy = grad_out[channel_base + p];
                local_channel = local_channel + vec2<f32>(dy, dy * (x[channel_base + p] - mean) * rstd);
            }
            let channel_sums = workgroup_sum2(tid, local_channel);
            if (tid == 0u) {
                dbeta_part[part0 + cl] = channel_sums.x;
                dgamma_part[part0 + cl] = channel_sums.y;
            }
        }
    } else {
        for (var cl = tid; cl < grp.channels; cl = cl + WG) {
            let channel_base = grp.base + cl * P.spatial;
            var channel_sums = vec2<f32>(0.0);
            for (var p = 0u; p < P.spatial; p = p + 1u) {
                let dy = grad_out[channel_base + p];
                channel_sums = channel_sums + vec2<f32>(dy, dy * (x[channel_base + p] - mean) * rstd);
            }
            dbeta_part[part0 + cl] = channel_sums.x;
            dgamma_part[part0 + cl] = channel_sums.y;
        }
    }

    for (var e = tid; e < grp.count; e = e + WG) {
        let xhat = (x[grp.base + e] - mean) * rstd;
        let dy_gamma = grad_out[grp.base + e] * gamma[grp.channel0 + e / P.spatial];
        dx[grp.base + e] = rstd * (dy_gamma - group_means.x - xhat * group_means.y);
    }
}
