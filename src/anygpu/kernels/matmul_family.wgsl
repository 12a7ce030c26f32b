{{ENABLE}}
{{TRUSTED}}
// C[z] = alpha * A[z] (m x k) @ B[z] (k x n): the register-blocked matmul family.
// Filled in by anygpu/ops/matmul_gen.py from a config and a shape variant:
// {{DESCRIPTION}}
// Each workgroup computes a TILE_M x TILE_N block of C. Per step of TILE_K, the A and
// B tiles are staged in workgroup memory k-major (As[kk][i], Bs[kk][j]) as vec4 rows,
// so one vec4 read gives four consecutive rows of A or columns of B. Every thread
// holds ROWS x COLS outputs in vec4 accumulators that are named variables, and the
// kk loop is written out in full: function-scope arrays and loops over them go to
// local memory on several drivers and are several times slower.
// A thread owns row groups (4 rows) ty, ty + THREADS_Y, ... and column groups tx,
// tx + THREADS_X, ...: neighbouring threads read neighbouring vec4s of Bs (no bank
// conflicts) and write neighbouring vec4s of C (coalesced).
// The body (ops/matmul_gen.py) is one tile per workgroup (the grid covers C), or in the
// stream-K form a run of k steps across consecutive tiles per workgroup: a tile's first
// part is stored into C, a later part (at most one per workgroup: where its run starts)
// into the workgroup's slot of W, which kernels/matmul_stream_fixup.wgsl adds into C.
//! include lib/matmul_params.wgsl
@group(0) @binding(1) var<storage, read> A: array<{{A_ELEM}}>;
@group(0) @binding(2) var<storage, read> B: array<{{B_ELEM}}>;
@group(0) @binding({{C_BINDING}}) var<storage, read_write> C: array<{{C_ELEM}}>;
{{EPILOGUE}}
{{STREAM_BINDING}}

// Row pitches in vec4 (padded where a tile is written transposed, against bank conflicts).
const AS_PITCH: u32 = {{AS_PITCH}}u;
const BS_PITCH: u32 = {{BS_PITCH}}u;
// Offset of the second buffer of each tile when double buffered (see the config).
const A_STAGE: u32 = {{A_STAGE}}u;
const B_STAGE: u32 = {{B_STAGE}}u;
var<workgroup> As: array<vec4<{{TILE_T}}>, {{AS_LEN}}>;
var<workgroup> Bs: array<vec4<{{TILE_T}}>, {{BS_LEN}}>;

@compute @workgroup_size({{THREADS_X}}, {{THREADS_Y}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) tid: u32,
        @builtin(workgroup_id) wid: vec3<u32>) {
    let tx = lid.x;
    let ty = lid.y;
{{BODY}}
}
