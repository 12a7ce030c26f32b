// Batched workgroup reductions for register-row kernels that hold ROWS rows per workgroup
// (ops/row_gen.py, layer norm): lib/row_reduce_subgroup.wgsl's reductions for ROWS rows
// at once, one barrier for all of them. Included after that file (RowThread, rescale);
// the kernel declares `const ROWS: u32`. As there, every thread calls these in uniform
// control flow and each array is reused only after another reduction's barrier.
var<workgroup> rr_rows_sum: array<array<f32, ROWS>, WG>;
var<workgroup> rr_rows_top: array<array<vec2<f32>, ROWS>, WG>;

fn reduce_rows_sum(me: RowThread, value: array<f32, ROWS>) -> array<f32, ROWS> {
    var v = value;
    for (var r = 0u; r < ROWS; r++) {
        let partial = subgroupAdd(v[r]);
        if (me.lane == 0u) { rr_rows_sum[me.group][r] = partial; }
    }
    workgroupBarrier();
    var total: array<f32, ROWS>;
    for (var i = 0u; i < me.groups; i++) {
        for (var r = 0u; r < ROWS; r++) { total[r] += rr_rows_sum[i][r]; }
    }
    return total;
}

// (sum, sum) of ROWS pairs, through rr_rows_top.
fn reduce_rows_pair(me: RowThread, value: array<vec2<f32>, ROWS>) -> array<vec2<f32>, ROWS> {
    var v = value;
    for (var r = 0u; r < ROWS; r++) {
        let partial = subgroupAdd(v[r]);
        if (me.lane == 0u) { rr_rows_top[me.group][r] = partial; }
    }
    workgroupBarrier();
    var total: array<vec2<f32>, ROWS>;
    for (var i = 0u; i < me.groups; i++) {
        for (var r = 0u; r < ROWS; r++) { total[r] += rr_rows_top[i][r]; }
    }
    return total;
}

// ROWS pairs (max of m, sum of s rescaled to that max), as reduce_top.
fn reduce_rows_top(me: RowThread, value: array<vec2<f32>, ROWS>) -> array<vec2<f32>, ROWS> {
    var v = value;
    for (var r = 0u; r < ROWS; r++) {
        let group_top = subgroupMax(v[r].x);
        let group_sum = subgroupAdd(rescale(v[r].y, v[r].x, group_top));
        if (me.lane == 0u) { rr_rows_top[me.group][r] = vec2<f32>(group_top, group_sum); }
    }
    workgroupBarrier();
    var total: array<vec2<f32>, ROWS>;
    for (var r = 0u; r < ROWS; r++) {
        var top = rr_rows_top[0][r].x;
        for (var i = 1u; i < me.groups; i++) { top = max(top, rr_rows_top[i][r].x); }
        var s = 0.0;
        for (var i = 0u; i < me.groups; i++) { s += rescale(rr_rows_top[i][r].y, rr_rows_top[i][r].x, top); }
        total[r] = vec2<f32>(top, s);
    }
    return total;
}
