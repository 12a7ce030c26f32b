// Workgroup reductions for the register-row kernels (ops/row_gen.py), through subgroup
// operations: each subgroup reduces its values, lane 0 stores the result at its subgroup
// id, and after one barrier every thread combines the num_subgroups partials (a few on
// NVIDIA: 8 for 256 threads). The including kernel declares `const WG: u32` and
// `fn rescale(s: f32, m: f32, top: f32) -> f32` (what a partial s kept under its own
// maximum m weighs under the common maximum top). Every thread calls these in uniform
// control flow; each partial array is used once per kernel (or, for rr_top, again only
// after another reduction's barrier), so no barrier follows.
struct RowThread { tid: u32, lane: u32, group: u32, groups: u32 }

var<workgroup> rr_sum: array<f32, WG>;
var<workgroup> rr_top: array<vec2<f32>, WG>;

fn reduce_sum(me: RowThread, value: f32) -> f32 {
    let partial = subgroupAdd(value);
    if (me.lane == 0u) { rr_sum[me.group] = partial; }
    workgroupBarrier();
    var total = 0.0;
    for (var i = 0u; i < me.groups; i++) { total += rr_sum[i]; }
    return total;
}

// (max of m, sum of s rescaled to that max) over the workgroup.
fn reduce_top(me: RowThread, m: f32, s: f32) -> vec2<f32> {
    let group_top = subgroupMax(m);
    let group_sum = subgroupAdd(rescale(s, m, group_top));
    if (me.lane == 0u) { rr_top[me.group] = vec2<f32>(group_top, group_sum); }
    workgroupBarrier();
    var top = rr_top[0].x;
    for (var i = 1u; i < me.groups; i++) { top = max(top, rr_top[i].x); }
    var total = 0.0;
    for (var i = 0u; i < me.groups; i++) { total += rescale(rr_top[i].y, rr_top[i].x, top); }
    return vec2<f32>(top, total);
}

// (sum, sum) of pairs over the workgroup, through rr_top: a kernel may use it for
// reduce_top later only after another reduction's barrier (reduce_sum's) between them.
fn reduce_pair(me: RowThread, value: vec2<f32>) -> vec2<f32> {
    let partial = subgroupAdd(value);
    if (me.lane == 0u) { rr_top[me.group] = partial; }
    workgroupBarrier();
    var total = vec2<f32>(0.0);
    for (var i = 0u; i < me.groups; i++) { total += rr_top[i]; }
    return total;
}

var<workgroup> rr_flag: u32;

// `yes` (the same in every thread) as a value the compiler knows to be uniform, so a branch on
// it may hold barriers: Tint's uniformity analysis (Dawn) takes anything computed from workgroup
// memory, as every reduction's result is, for non-uniform. Costs workgroupUniformLoad's barriers.
fn uniform_flag(me: RowThread, yes: bool) -> bool {
    if (me.tid == 0u) { rr_flag = select(0u, 1u, yes); }
    return workgroupUniformLoad(&rr_flag) == 1u;
}
