// ops/radix.py's exclusive scan, last step of a level: each element gets the exclusive scan
// of the block totals before its block of 1024 (radix_scan.wgsl scanned within blocks).
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> block_offsets: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>;
//! include lib/element_per_thread.wgsl

fn element(i: u32) {
    y[i] = y[i] + block_offsets[i / 1024u];
}
