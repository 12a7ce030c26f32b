// Batched workgroup reductions for register-row kernels that hold ROWS rows per workgroup,
// without subgroup operations: a tree over workgroup memory (log2(WG) barriers for all
// ROWS rows). Same contract as lib/row_reduce_rows_subgroup.wgsl; only tid is used.
var<workgroup> rr_rows_sum: array<array<f32, ROWS>, WG>;
var<workgroup> rr_rows_top: array<array<vec2<f32>, ROWS>, WG>;

fn reduce_rows_sum(me: RowThread, value: array<f32, ROWS>) -> array<f32, ROWS> {
    rr_rows_sum[me.tid] = value;
    workgroupBarrier();
    for (var width = WG / 2u; width > 0u; width = width / 2u) {
        if (me.tid < width) {
            for (var r = 0u; r < ROWS; r++) { rr_rows_sum[me.tid][r] += rr_rows_sum[me.tid + width][r]; }
        }
        workgroupBarrier();
    }
    return rr_rows_sum[0];
}

fn reduce_rows_pair(me: RowThread, value: array<vec2<f32>, ROWS>) -> array<vec2<f32>, ROWS> {
    rr_rows_top[me.tid] = value;
    workgroupBarrier();
    for (var width = WG / 2u; width > 0u; width = width / 2u) {
        if (me.tid < width) {
            for (var r = 0u; r < ROWS; r++) { rr_rows_top[me.tid][r] += rr_rows_top[me.tid + width][r]; }
        }
        workgroupBarrier();
    }
    return rr_rows_top[0];
}

fn reduce_rows_top(me: RowThread, value: array<vec2<f32>, ROWS>) -> array<vec2<f32>, ROWS> {
    rr_rows_top[me.tid] = value;
    workgroupBarrier();
    for (var width = WG / 2u; width > 0u; width = width / 2u) {
        if (me.tid < width) {
            for (var r = 0u; r < ROWS; r++) {
                let a = rr_rows_top[me.tid][r];
                let b = rr_rows_top[me.tid + width][r];
                let top = max(a.x, b.x);
                rr_rows_top[me.tid][r] = vec2<f32>(top, rescale(a.y, a.x, top) + rescale(b.y, b.x, top));
            }
        }
        workgroupBarrier();
    }
    return rr_rows_top[0];
}
