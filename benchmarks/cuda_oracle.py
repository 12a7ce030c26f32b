"""What the same GPU does with our products' kernel structure in CUDA (a measuring aid, not part
of anygpu: anygpu never uses CUDA). sgmat's best member (ops/sgmat.py `w2x2_t4x4_k32_v_e_s_c_p`)
is a 128x128 tile, four subgroups of 64x64, k steps of 32, one stage of workgroup memory, the
next step's global loads prefetched into registers. WGSL has no asynchronous copy into
workgroup memory, so every byte in flight holds a register. These kernels rebuild that structure
with mma.sync and ldmatrix (inline PTX, compiled by NVRTC or nvcc on the GPU machine) and vary
what WGSL cannot: how many k steps of loads are in flight (registers: 0, 1, 2) against cp.async
stages (2, 3, 4) that need no registers. If the register forms stay near sgmat's rate and the
cp.async forms do not, the bound is the structure WGSL allows, not Dawn's or the driver's lowering.

    python benchmarks/cuda_oracle.py [--json OUT.json]

Needs torch with CUDA (allocation, events, the cuBLAS reference) and NVRTC (from torch's
nvidia-cuda-nvrtc wheel or a CUDA toolkit) or nvcc. Every kernel is checked against torch.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

SOURCE = r"""
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  unsigned r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}
__device__ __forceinline__ void ldsm_x4(unsigned* r, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void mma16816(float* c, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void cp_async16(unsigned saddr, const void* g) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(saddr), "l"(g));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N)); }

/* WM x WN warps, each a 64 x 8*TJ tile of C; k steps of BK; A stored [m][k], B stored [n][k]. */
template <int WM, int WN, int TJ, int BK>
struct G {
  static constexpr int BM = WM * 64, BN = WN * 8 * TJ, T = WM * WN * 32, LD = BK + 8, QR = BK / 8;
  static constexpr int UA = BM * QR / T, UB = BN * QR / T;   /* 16-byte units a thread moves */
  int tid, lane, wm, wn, bm, bn, steps;
  float acc[4][TJ][4];
  __device__ __forceinline__ G(int K) {
    tid = threadIdx.x; lane = tid & 31; int w = tid >> 5; wm = w / WN; wn = w % WN;
    bm = blockIdx.y * BM; bn = blockIdx.x * BN; steps = K / BK;
    for (int i = 0; i < 4; i++) for (int j = 0; j < TJ; j++) for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;
  }
  __device__ __forceinline__ void slice(const unsigned short* sA, const unsigned short* sB) {
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      unsigned a[4][4], b[TJ][2];
#pragma unroll
      for (int i = 0; i < 4; i++)
        ldsm_x4(a[i], smem_addr(sA + (wm * 64 + i * 16 + (lane % 16)) * LD + kk + (lane / 16) * 8));
#pragma unroll
      for (int j = 0; j < TJ / 2; j++) {
        int q = lane / 8;
        unsigned r[4];
        ldsm_x4(r, smem_addr(sB + (wn * 8 * TJ + j * 16 + (q >> 1) * 8 + (lane % 8)) * LD + kk + (q & 1) * 8));
        b[2 * j][0] = r[0]; b[2 * j][1] = r[1]; b[2 * j + 1][0] = r[2]; b[2 * j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < TJ; j++) mma16816(acc[i][j], a[i], b[j]);
    }
  }
  __device__ __forceinline__ void fetch(const uint4* A, const uint4* B, uint4* ra, uint4* rb, int k0, int K) {
#pragma unroll
    for (int i = 0; i < UA; i++) {
      int u = tid + T * i;
      ra[i] = A[((unsigned long long)(bm + u / QR) * K + k0) / 8 + u % QR];
    }
#pragma unroll
    for (int i = 0; i < UB; i++) {
      int u = tid + T * i;
      rb[i] = B[((unsigned long long)(bn + u / QR) * K + k0) / 8 + u % QR];
    }
  }
  __device__ __forceinline__ void stash(unsigned short* sA, unsigned short* sB, const uint4* ra, const uint4* rb) {
#pragma unroll
    for (int i = 0; i < UA; i++) { int u = tid + T * i; *(uint4*)(sA + (u / QR) * LD + (u % QR) * 8) = ra[i]; }
#pragma unroll
    for (int i = 0; i < UB; i++) { int u = tid + T * i; *(uint4*)(sB + (u / QR) * LD + (u % QR) * 8) = rb[i]; }
  }
  __device__ __forceinline__ void issue(unsigned short* sA, unsigned short* sB, const uint4* A, const uint4* B, int k0, int K) {
#pragma unroll
    for (int i = 0; i < UA; i++) {
      int u = tid + T * i;
      cp_async16(smem_addr(sA + (u / QR) * LD + (u % QR) * 8), A + ((unsigned long long)(bm + u / QR) * K + k0) / 8 + u % QR);
    }
#pragma unroll
    for (int i = 0; i < UB; i++) {
      int u = tid + T * i;
      cp_async16(smem_addr(sB + (u / QR) * LD + (u % QR) * 8), B + ((unsigned long long)(bn + u / QR) * K + k0) / 8 + u % QR);
    }
  }
  __device__ __forceinline__ void store(float* C, int N) {
    int g = lane / 4, c2 = 2 * (lane % 4);
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < TJ; j++) {
        unsigned long long r = bm + wm * 64 + i * 16 + g, c = bn + wn * 8 * TJ + j * 8 + c2;
        float2 lo, hi;
        lo.x = acc[i][j][0]; lo.y = acc[i][j][1]; hi.x = acc[i][j][2]; hi.y = acc[i][j][3];
        *(float2*)(C + r * N + c) = lo;
        *(float2*)(C + (r + 8) * N + c) = hi;
      }
  }
};

/* PF 0: fetch, stash, barrier, multiply, barrier (sgmat _s); PF 1: the next step's loads in
   registers during the multiplies (sgmat _p). One stage of workgroup memory. */
template <int WM, int WN, int TJ, int BK, int PF>
__device__ __forceinline__ void reg_body(const uint4* A, const uint4* B, float* C, int M, int N, int K) {
  using g_t = G<WM, WN, TJ, BK>;
  extern __shared__ __align__(16) unsigned short smem[];
  unsigned short* sA = smem;
  unsigned short* sB = smem + g_t::BM * g_t::LD;
  g_t g(K);
  uint4 ra[g_t::UA], rb[g_t::UB];
  if (PF) g.fetch(A, B, ra, rb, 0, K);
  for (int t = 0; t < g.steps; t++) {
    if (!PF) g.fetch(A, B, ra, rb, t * BK, K);
    g.stash(sA, sB, ra, rb);
    __syncthreads();
    if (PF && t + 1 < g.steps) g.fetch(A, B, ra, rb, (t + 1) * BK, K);
    g.slice(sA, sB);
    __syncthreads();
  }
  g.store(C, N);
}

/* S stages of workgroup memory filled by cp.async: no register holds a load in flight. */
template <int WM, int WN, int TJ, int BK, int S>
__device__ __forceinline__ void async_body(const uint4* A, const uint4* B, float* C, int M, int N, int K) {
  using g_t = G<WM, WN, TJ, BK>;
  constexpr int STAGE = (g_t::BM + g_t::BN) * g_t::LD;
  extern __shared__ __align__(16) unsigned short smem[];
  g_t g(K);
  for (int s = 0; s < S - 1; s++) {
    if (s < g.steps) g.issue(smem + s * STAGE, smem + s * STAGE + g_t::BM * g_t::LD, A, B, s * BK, K);
    cp_commit();
  }
  for (int t = 0; t < g.steps; t++) {
    cp_wait<S - 2>();
    __syncthreads();
    int nt = t + S - 1;
    if (nt < g.steps) g.issue(smem + (nt % S) * STAGE, smem + (nt % S) * STAGE + g_t::BM * g_t::LD, A, B, nt * BK, K);
    cp_commit();
    unsigned short* sA = smem + (t % S) * STAGE;
    g.slice(sA, sA + g_t::BM * g_t::LD);
  }
  g.store(C, N);
}

/* The matrix units' own rate: a warp's 32 mma.sync a round on fragments held in registers. */
extern "C" __global__ void __launch_bounds__(128) mma_peak(float* C, int rounds) {
  unsigned a[4][4], b[8][2];
  for (int i = 0; i < 4; i++) for (int e = 0; e < 4; e++) a[i][e] = 0x3c003c00u ^ (threadIdx.x * (i + 1) * (e + 3));
  for (int j = 0; j < 8; j++) for (int e = 0; e < 2; e++) b[j][e] = 0x3c003c00u ^ (threadIdx.x * (j + 5) * (e + 7));
  float acc[4][8][4];
  for (int i = 0; i < 4; i++) for (int j = 0; j < 8; j++) for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;
  for (int r = 0; r < rounds; r++)
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < 8; j++) mma16816(acc[i][j], a[i], b[j]);
  float s = 0.f;
  for (int i = 0; i < 4; i++) for (int j = 0; j < 8; j++) for (int e = 0; e < 4; e++) s += acc[i][j][e];
  C[blockIdx.x * 128 + threadIdx.x] = s;
}
"""


class Variant:
    """One kernel: `mode` reg0 / reg1 (register-staged, as WGSL must) or async<S> (cp.async, S
    stages); wm x wn warps of 64 x 8*tj; k steps of bk."""

    def __init__(self, mode: str, wm: int, wn: int, tj: int, bk: int):
        self.mode, self.wm, self.wn, self.tj, self.bk = mode, wm, wn, tj, bk
        self.bm, self.bn, self.threads = wm * 64, wn * 8 * tj, wm * wn * 32
        self.name = f"{mode}_w{wm}x{wn}_j{tj}_k{bk}"
        stages = int(mode[5:]) if mode.startswith("async") else 1
        self.smem = stages * (self.bm + self.bn) * (bk + 8) * 2

    def wrapper(self) -> str:
        t = (f"reg_body<{self.wm}, {self.wn}, {self.tj}, {self.bk}, {self.mode[3:]}>" if self.mode.startswith("reg")
             else f"async_body<{self.wm}, {self.wn}, {self.tj}, {self.bk}, {self.mode[5:]}>")
        return (f'extern "C" __global__ void __launch_bounds__({self.threads}) {self.name}'
                f"(const uint4* A, const uint4* B, float* C, int M, int N, int K) {{ {t}(A, B, C, M, N, K); }}\n")


# sgmat's shipped structure first (reg1_w2x2_j8_k32 is w2x2_t4x4_k32_v_e_s_c_p), then what WGSL
# could also express (k64 steps, eight warps, 256-wide tiles), then cp.async, which it cannot.
VARIANTS = [Variant(*v) for v in (
    ("reg0", 2, 2, 8, 32), ("reg1", 2, 2, 8, 32), ("reg0", 2, 2, 8, 64), ("reg1", 2, 2, 8, 64),
    ("reg0", 4, 2, 8, 32), ("reg1", 4, 2, 8, 32), ("reg1", 2, 4, 8, 32), ("reg1", 2, 4, 4, 32),
    ("reg1", 4, 2, 4, 64), ("async2", 2, 2, 8, 32), ("async3", 2, 2, 8, 32), ("async4", 2, 2, 8, 32),
    ("async3", 2, 2, 8, 64), ("async3", 4, 2, 8, 32), ("async4", 2, 4, 8, 32))]


def _nvrtc_lib():
    import torch
    roots = [os.path.join(os.path.dirname(torch.__file__), ".."), "/usr/local"]
    for pattern in ("nvidia/**/libnvrtc.so*", "cuda*/**/libnvrtc.so*"):
        for root in roots:
            for path in sorted(glob.glob(os.path.join(root, pattern), recursive=True)):
                if "builtins" not in path and "alt" not in os.path.basename(path):
                    for b in glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*")):
                        try:
                            ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
                        except OSError:
                            pass
                    try:
                        return ctypes.CDLL(path), path
                    except OSError:
                        continue
    return None, None


def source() -> str:
    return SOURCE + "".join(v.wrapper() for v in VARIANTS)


def compile_cubin(arch: str) -> tuple[bytes, str]:
    """The kernels as a cubin for `arch` (e.g. sm_90): NVRTC, else nvcc."""
    lib, path = _nvrtc_lib()
    if lib is not None:
        prog = ctypes.c_void_p()
        rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source().encode(), b"oracle.cu", 0, None, None)
        assert rc == 0, f"nvrtcCreateProgram {rc}"
        opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++17", b"-default-device", b"--ptxas-options=-v"]
        arr = (ctypes.c_char_p * len(opts))(*opts)
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        if rc != 0:
            raise RuntimeError(f"nvrtc ({path}) failed: {log.value.decode(errors='replace')}")
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        cubin = ctypes.create_string_buffer(size.value)
        assert lib.nvrtcGetCUBIN(prog, cubin) == 0
        print(log.value.decode(errors="replace"), flush=True)   # ptxas -v: registers and spills a kernel
        return cubin.raw, f"nvrtc {path}"
    nvcc = shutil.which("nvcc") or next(iter(sorted(glob.glob("/usr/local/cuda*/bin/nvcc"))), None)
    if nvcc is None:
        raise RuntimeError("neither NVRTC nor nvcc found")
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "oracle.cu"), os.path.join(d, "oracle.cubin")
        with open(src, "w") as f:
            f.write(source())
        subprocess.run([nvcc, "-cubin", f"-arch={arch}", "-O3", "-std=c++17", "-o", out, src], check=True)
        with open(out, "rb") as f:
            return f.read(), nvcc


class Driver:
    """The CUDA driver API through ctypes, in torch's context and on torch's stream."""

    def __init__(self, cubin: bytes):
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.mod = ctypes.c_void_p()
        self._ok(self.cu.cuModuleLoadData(ctypes.byref(self.mod), cubin), "cuModuleLoadData")

    def _ok(self, rc, what):
        if rc != 0:
            raise RuntimeError(f"{what}: CUDA error {rc}")

    def function(self, name: str, smem: int = 0):
        fn = ctypes.c_void_p()
        self._ok(self.cu.cuModuleGetFunction(ctypes.byref(fn), self.mod, name.encode()), name)
        if smem > 48 * 1024:   # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            self._ok(self.cu.cuFuncSetAttribute(fn, 8, smem), "cuFuncSetAttribute")
        attrs = {}
        for key, attr in (("registers", 4), ("local_bytes", 3), ("static_smem", 1)):
            v = ctypes.c_int()
            self.cu.cuFuncGetAttribute(ctypes.byref(v), attr, fn)
            attrs[key] = v.value
        return fn, attrs

    def launch(self, fn, grid, block, smem, args, stream):
        """args: ctypes values (c_void_p for device pointers, c_int for sizes)."""
        params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in args])
        self._ok(self.cu.cuLaunchKernel(fn, *grid, *block, smem, ctypes.c_void_p(stream), params, None),
                 "cuLaunchKernel")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--shapes", default="4096x4096x4096,16384x1536x384,16384x384x1536")
    args = ap.parse_args()
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    from anygpu.bench.timing import time_torch

    def timed(run) -> float:      # ms per call (CUDA events, anygpu.bench's median)
        run()
        return time_torch(torch, "cuda", run) * 1e3
    dev = torch.device("cuda")
    torch.zeros(1, device=dev)
    major, minor = torch.cuda.get_device_capability()
    cubin, how = compile_cubin(f"sm_{major}{minor}")
    drv = Driver(cubin)
    stream = torch.cuda.current_stream().cuda_stream
    print(f"{torch.cuda.get_device_name()} sm_{major}{minor}, compiled by {how}", flush=True)
    out: dict = {"device": torch.cuda.get_device_name(), "compiler": how, "kernels": {}, "shapes": {}}
    fns = {}
    for v in VARIANTS:
        fns[v.name], attrs = drv.function(v.name, v.smem)
        out["kernels"][v.name] = dict(attrs, dynamic_smem=v.smem, threads=v.threads)
        print(f"{v.name}: {attrs}", flush=True)
    for shape in args.shapes.split(","):
        M, N, K = (int(x) for x in shape.split("x"))
        g = torch.Generator(device=dev).manual_seed(0)
        A = torch.randn(M, K, device=dev, dtype=torch.float16, generator=g)
        B = torch.randn(N, K, device=dev, dtype=torch.float16, generator=g)   # stored [n][k]
        C = torch.empty(M, N, device=dev, dtype=torch.float32)
        ref = A.float() @ B.float().T
        flops = 2.0 * M * N * K
        row = out["shapes"][shape] = {}
        row["torch fp16"] = round(flops / timed(lambda: A @ B.T) / 1e9, 1)
        for v in VARIANTS:
            if M % v.bm or N % v.bn or K % v.bk:
                continue
            args_ = [ctypes.c_void_p(t.data_ptr()) for t in (A, B, C)] + [ctypes.c_int(x) for x in (M, N, K)]

            def run(fn=fns[v.name], v=v, args_=args_):
                drv.launch(fn, (N // v.bn, M // v.bm, 1), (v.threads, 1, 1), v.smem, args_, stream)
            C.zero_()
            run()
            torch.cuda.synchronize()
            rel = float((C - ref).abs().max() / ref.abs().max())
            if not rel < 1e-3:
                row[v.name] = f"WRONG {rel:.3g}"
                continue
            row[v.name] = round(flops / timed(run) / 1e9, 1)
        print(f"{shape}: " + ", ".join(f"{k} {v}" for k, v in row.items()) + " TFLOP/s", flush=True)
    fn, attrs = drv.function("mma_peak")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    Cp = torch.empty(sms * 8 * 128, device=dev)
    rounds = 512
    peak_args = [ctypes.c_void_p(Cp.data_ptr()), ctypes.c_int(rounds)]
    for blocks_per_sm in (1, 2, 4, 8):
        blocks = sms * blocks_per_sm

        def peak(blocks=blocks):
            drv.launch(fn, (blocks, 1, 1), (128, 1, 1), 0, peak_args, stream)
        ms = timed(peak)
        tf = blocks * 4 * rounds * 32 * 4096 / ms / 1e9
        out.setdefault("mma_peak", {})[blocks_per_sm] = round(tf, 1)
        print(f"mma.sync m16n8k16 f16->f32 in registers, {blocks_per_sm} blocks/SM (4 warps each): {tf:.1f} TFLOP/s",
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
