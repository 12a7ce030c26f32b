{{ENABLE}}
// Column sums of a [rows, cols] array with cols % 4 == 0, four columns a thread:
// partial[chunk, c..c+4] = sum of a[r, c..c+4] over the rows r of the chunk (chunk_rows of
// them), read as one unit a row ({{UNIT}}: 16 bytes of f32, or 8 bytes of f16 as two u32
// words unpacked exactly) and summed as a vec4<f32>. A workgroup covers 32 units (128
// columns) of one chunk with 8 row lanes: each row lane of 32 threads reads one contiguous
// run of 32 units (256 or 512 bytes). The caller sums the partials again when n_chunks > 1.
// Stores vec4<{{OUT_T}}>. Every index is checked here (and the loops end), hence trusted.
//! trusted
struct Params { rows: u32, cols: u32, chunk_rows: u32, n_chunks: u32, col_tiles: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> a: array<{{UNIT}}>;
@group(0) @binding(2) var<storage, read_write> partial: array<vec4<{{OUT_T}}>>;

const UNITS: u32 = 32u;
const LANES: u32 = 8u;
const NARROW: bool = {{NARROW}};  // the output is f16
var<workgroup> lane_sums: array<vec4<f32>, UNITS * LANES>;

fn unit_at(i: u32) -> vec4<f32> {
    return {{WIDEN}};
}

// f16(t) must be inf from 65520 (65504 plus half its ulp) up, as torch rounds; WGSL leaves
// [65504, 65536) to the implementation, so a total there is pushed past 65536 first.
fn stored(t: vec4<f32>) -> vec4<{{OUT_T}}> {
    if (NARROW) {
        return vec4<{{OUT_T}}>(select(t, t * 2.0, abs(t) >= vec4<f32>(65520.0)));
    }
    return vec4<{{OUT_T}}>(t);
}

@compute @workgroup_size(32, 8)
fn main(@builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let tile = wid.x + wid.y * nwg.x;
    if (tile >= P.col_tiles * P.n_chunks) { return; }  // uniform per workgroup
    let units = P.cols / 4u;
    let unit = (tile % P.col_tiles) * UNITS + lid.x;
    let chunk = tile / P.col_tiles;
    let begin = chunk * P.chunk_rows;
    let end = min(begin + P.chunk_rows, P.rows);
    var acc = vec4<f32>(0.0);
    if (unit < units) {
        // Four rows an iteration, loaded before they are added (in the order of a plain
        // loop), so each thread has four loads in flight.
        var r = begin + lid.y;
        for (; r + 3u * LANES < end; r = r + 4u * LANES) {
            let x0 = unit_at(r * units + unit);
            let x1 = unit_at((r + LANES) * units + unit);
            let x2 = unit_at((r + 2u * LANES) * units + unit);
            let x3 = unit_at((r + 3u * LANES) * units + unit);
            acc = acc + x0 + x1 + x2 + x3;
        }
        for (; r < end; r = r + LANES) {
            acc = acc + unit_at(r * units + unit);
        }
    }
    lane_sums[lid.y * UNITS + lid.x] = acc;
    workgroupBarrier();
    if (lid.y == 0u && unit < units) {
        var total = vec4<f32>(0.0);
        for (var lane = 0u; lane < LANES; lane = lane + 1u) {
            total = total + lane_sums[lane * UNITS + lid.x];
        }
        partial[chunk * units + unit] = stored(total);
    }
}
