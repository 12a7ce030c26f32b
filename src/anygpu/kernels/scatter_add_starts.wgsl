// Where each segment of sorted keys begins (ops/index.py's scatter-add): starts[t] = the
// number of keys below t (a binary search of keys [P.m], sorted), for t in [0, P.n), so
// segment t is starts[t] .. starts[t + 1].
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> keys: array<u32>;
@group(0) @binding(2) var<storage, read_write> starts: array<u32>;
//! include lib/element_per_thread.wgsl

fn element(t: u32) {
    var lo = 0u;
    var hi = P.m;
    while (lo < hi) {
        let mid = lo + (hi - lo) / 2u;
        if (keys[mid] < t) { lo = mid + 1u; } else { hi = mid; }
    }
    starts[t] = lo;
}
