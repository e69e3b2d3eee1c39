// Warp-level tensor-core primitives on 16-bit operands and asynchronous copies (sm_80 and
// later), prepended to the kernels that use them. A fragment register (u32) holds two 16-bit values, the lower
// column (or k) index in the low half. Layouts are PTX's for mma.m16n8k16 with g = lane / 4,
// t = lane % 4:
//   A (16 x 16, row-major) a[4]: a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..),
//                                a3 = (g+8, 2t+8..)
//   B (16 x 8, k x n)      b[2]: b0 = (k 2t..2t+1, n g), b1 = (k 2t+8..2t+9, n g)
//   C (16 x 8, f32)        c[4]: c0, c1 = (g, 2t..2t+1), c2, c3 = (g+8, 2t..2t+1)
// ldmatrix x4 loads four 8 x 8 matrices of 16-bit values from shared memory; lane l gives the
// address of row l % 8 of matrix l / 8, and receives in r[i] the word t of row g of matrix i
// (`_trans`: the pair (row 2t, 2t+1; column g) of matrix i).
//
// Under the CUDA emulator (no inline PTX on the host) the shim defines the same functions
// with these semantics (emu/shim/shim_mma.h).

#ifndef RNN_EMU_CUDA_SHIM_H
// d += a * b for bf16 (`bf16` true) or f16 operands, f32 accumulators.
template <bool bf16> __device__ __forceinline__ void mma_16816(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]);

template <> __device__ __forceinline__ void mma_16816<true>(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <> __device__ __forceinline__ void mma_16816<false>(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void ldsm_x4(u32 (&r)[4], const void* row) {
    const u32 addr = (u32)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

__device__ __forceinline__ void ldsm_x4_trans(u32 (&r)[4], const void* row) {
    const u32 addr = (u32)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
#endif

// Asynchronous 16-byte copies from global to shared memory (cp.async, sm_80+): issued, then
// committed as a group; cp_async_wait<N> waits until at most N of this thread's groups are
// still in flight (their data is then in shared memory for this thread; a barrier makes it
// visible to the block).
#ifndef RNN_EMU_CUDA_SHIM_H
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
    const u32 addr = (u32)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(addr), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif

// Float helpers of the attention kernels' score loops, one instruction each on sm_80+ where
// CUDA C spends a branch or a range fix-up: the max that propagates NaN (`max.NaN`, any NaN
// operand gives NaN, as PyTorch's max), and 2^x as the multi-function unit computes it
// (`ex2.approx.ftz`: about 2 ulp, results below 2^-126 flushed to zero, as FlashAttention's
// softmax computes it). The emulator's shim defines the same with these semantics.
#ifndef RNN_EMU_CUDA_SHIM_H
__device__ __forceinline__ float max_nan(float a, float b) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ float exp2_approx(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}
#endif
