// Sort each row of x [rows, n] by ranking: element i's rank is the number of elements that
// come before it (larger when descending, smaller when ascending; NaN counts as the largest,
// equal values keep index order, so the sort is stable). order[row, rank] = i.
// O(n) work per element: meant for the row lengths of top-k sampling and small sorts.
struct Params { rows: u32, n: u32, descending: u32, pad: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<{{TYPE}}>;
@group(0) @binding(2) var<storage, read_write> order: array<i32>;

fn is_nan(v: {{TYPE}}) -> bool { return {{NAN_TEST}}; }

// Does a (at index ia) sort strictly before b in ascending order?
fn less(a: {{TYPE}}, b: {{TYPE}}) -> bool {
    if (is_nan(a)) { return false; }
    if (is_nan(b)) { return true; }
    return a < b;
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * 256u;
    if (e >= P.rows * P.n) { return; }
    let row0 = (e / P.n) * P.n;
    let i = e % P.n;
    let v = x[e];
    var rank = 0u;
    for (var j = 0u; j < P.n; j = j + 1u) {
        let w = x[row0 + j];
        var first: bool;
        if (P.descending == 1u) { first = less(v, w); } else { first = less(w, v); }
        let tie = !less(v, w) && !less(w, v);
        if (first || (tie && j < i)) { rank = rank + 1u; }
    }
    order[row0 + rank] = i32(i);
}
