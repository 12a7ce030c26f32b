// The stream-K matmul's fix-up (ops/matmul_gen.py `_launch_stream`): workgroup w of the
// product ran k steps [w * per, (w + 1) * per) (steps numbered tile by tile); where that
// run started inside a tile, its part of the tile (times alpha) is in W's slot w, the
// tile's first part already in C. For each such tile, the lowest slot that holds a part
// of it adds the parts of every slot whose run starts inside the tile into C (so no two
// threads write one element). One thread per vec4 of a slot; grid (vec4s / THREADS, slots).
struct Params {
    steps: u32,       // k steps per tile
    per: u32,         // k steps per workgroup of the product
    slots: u32,       // workgroups of the product
    tiles_n: u32,     // tiles per row of C
    per_matrix: u32,  // tiles per matrix of the batch
    n: u32,           // columns of C
    c_bs: u32,        // elements per matrix of C
    pad: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> W: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> C: array<vec4<f32>>;

const TILE_M: u32 = {{TILE_M}}u;
const TILE_N: u32 = {{TILE_N}}u;
const TILE_VEC4: u32 = TILE_M * TILE_N / 4u;

@compute @workgroup_size({{THREADS}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let e = gid.x;
    let w = wid.y;
    let start = w * P.per;
    if (e >= TILE_VEC4 || start % P.steps == 0u) {
        return;
    }
    let tile = start / P.steps;
    let tile_start = tile * P.steps;
    if ((w - 1u) * P.per > tile_start) {
        return;   // the previous slot's run also starts inside this tile: that slot adds
    }
    var sum = W[w * TILE_VEC4 + e];
    var v = w + 1u;
    loop {
        if (v >= P.slots || v * P.per >= tile_start + P.steps) { break; }
        sum += W[v * TILE_VEC4 + e];
        v += 1u;
    }
    let z = tile / P.per_matrix;
    let t = tile % P.per_matrix;
    let row = (t / P.tiles_n) * TILE_M + e / (TILE_N / 4u);
    let col = (t % P.tiles_n) * TILE_N + 4u * (e % (TILE_N / 4u));
    let i = (z * P.c_bs + row * P.n + col) >> 2u;
    C[i] = C[i] + sum;
}
