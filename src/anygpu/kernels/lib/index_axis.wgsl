// Element i of the [outer, n_index, inner] index space of gather.wgsl and scatter_add.wgsl
// (P: n_index, inner, dim_size, per_element; `index` bound by the kernel): the index t it
// uses (negative ones counted from the end), whether t lies in [0, dim_size), and the flat
// position of [o, t, col] in the [outer, dim_size, inner] tensor (meaningful when valid).
struct IndexedAt { t: i32, valid: bool, at: u32 }

fn indexed_at(i: u32) -> IndexedAt {
    let row = i / P.inner;                 // o * n_index + j
    let col = i % P.inner;
    let o = row / P.n_index;
    var k = row % P.n_index;
    if (P.per_element == 1u) { k = i; }
    var t = index[k];
    if (t < 0) { t = t + i32(P.dim_size); }
    let valid = t >= 0 && t < i32(P.dim_size);
    return IndexedAt(t, valid, (o * P.dim_size + u32(t)) * P.inner + col);
}
