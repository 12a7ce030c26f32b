// Workgroup reductions for the register-row kernels (ops/row_gen.py) without subgroup
// operations: a tree over workgroup memory (log2(WG) barriers). Same contract as
// lib/row_reduce_subgroup.wgsl (const WG a power of two, fn rescale); only tid is used.
struct RowThread { tid: u32, lane: u32, group: u32, groups: u32 }

var<workgroup> rr_sum: array<f32, WG>;
var<workgroup> rr_top: array<vec2<f32>, WG>;

fn reduce_sum(me: RowThread, value: f32) -> f32 {
    rr_sum[me.tid] = value;
    workgroupBarrier();
    for (var width = WG / 2u; width > 0u; width = width / 2u) {
        if (me.tid < width) { rr_sum[me.tid] += rr_sum[me.tid + width]; }
        workgroupBarrier();
    }
    return rr_sum[0];
}

fn reduce_top(me: RowThread, m: f32, s: f32) -> vec2<f32> {
    rr_top[me.tid] = vec2<f32>(m, s);
    workgroupBarrier();
    for (var width = WG / 2u; width > 0u; width = width / 2u) {
        if (me.tid < width) {
            let a = rr_top[me.tid];
            let b = rr_top[me.tid + width];
            let top = max(a.x, b.x);
            rr_top[me.tid] = vec2<f32>(top, rescale(a.y, a.x, top) + rescale(b.y, b.x, top));
        }
        workgroupBarrier();
    }
    return rr_top[0];
}

// (sum, sum) of pairs through rr_top (see lib/row_reduce_subgroup.wgsl on reusing it).
fn reduce_pair(me: RowThread, value: vec2<f32>) -> vec2<f32> {
    rr_top[me.tid] = value;
    workgroupBarrier();
    for (var width = WG / 2u; width > 0u; width = width / 2u) {
        if (me.tid < width) { rr_top[me.tid] += rr_top[me.tid + width]; }
        workgroupBarrier();
    }
    return rr_top[0];
}

var<workgroup> rr_flag: u32;

// `yes` (the same in every thread) as a value the compiler knows to be uniform, so a branch on
// it may hold barriers: Tint's uniformity analysis (Dawn) takes anything computed from workgroup
// memory, as every reduction's result is, for non-uniform. Costs workgroupUniformLoad's barriers.
fn uniform_flag(me: RowThread, yes: bool) -> bool {
    if (me.tid == 0u) { rr_flag = select(0u, 1u, yes); }
    return workgroupUniformLoad(&rr_flag) == 1u;
}
