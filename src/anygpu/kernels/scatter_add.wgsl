// The sort keys of ops/index.py's deterministic scatter-add (the backward of gather): for
// entry e of the index (P.n of them: one per index row when per_element = 0, one per element
// of [outer, n_index, inner] when 1), key = the output row t (per_element = 0) or the flat
// output position of [o, t, col] (per_element = 1), and order[e] = e. Entries whose index is
// out of range or equals `skip` (embedding's padding_idx, -1 for none) get key P.buckets,
// one past every real key, which the segment sums never read.
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> index: array<i32>;
@group(0) @binding(2) var<storage, read_write> keys: array<u32>;
@group(0) @binding(3) var<storage, read_write> order: array<i32>;
//! include lib/index_axis.wgsl
//! include lib/element_per_thread.wgsl

fn element(e: u32) {
    var first = e * P.inner;  // the first element of row e (whose index entry is e)
    if (P.per_element == 1u) { first = e; }
    let at = indexed_at(first);
    var key = u32(at.t);
    if (P.per_element == 1u) { key = at.at; }
    keys[e] = select(P.buckets, key, at.valid && at.t != P.skip);
    order[e] = i32(e);
}
