// out[o, ids(i), k] += src(i) for each position i = (o, j, k) of the ids' shape
// [outer, m, inner], where out is a contiguous copy of the destination ([outer, size,
// inner]), with atomic adds that wrap integers and round floats to the stored type as the
// CPU's adds do. A position whose index is out of range adds nothing; the first such
// position is recorded in `bad` (all ones while none is).
// info: n, m, size, inner, base of the ids' layout, base of src's layout.

typedef {{T}} T;
typedef {{K}} K;

// The 32-bit word holding the byte at `p` and the shift of that byte in it. Buffers are
// allocated in multiples of 256 bytes, so the word lies inside the buffer.
__device__ __forceinline__ u32* word_of(const void* p, u32* shift) {
    const size_t at = (size_t)p;
    *shift = (u32)(at & 3) * 8;
    return (u32*)(at & ~(size_t)3);
}

#ifdef RNN_HALF
__device__ __forceinline__ __half from_bits(unsigned short b, __half*) { return __ushort_as_half(b); }
__device__ __forceinline__ __nv_bfloat16 from_bits(unsigned short b, __nv_bfloat16*) { return __ushort_as_bfloat16(b); }
__device__ __forceinline__ unsigned short to_bits(__half h) { return __half_as_ushort(h); }
__device__ __forceinline__ unsigned short to_bits(__nv_bfloat16 h) { return __bfloat16_as_ushort(h); }

// Adds to a 16-bit float with a compare-exchange loop on its 32-bit word (for devices
// without a native 16-bit atomic add), rounding as the CPU does (add in f32, round once).
template <typename H> __device__ __forceinline__ void atomic_add_16(H* p, H v) {
    u32 shift;
    u32* w = word_of(p, &shift);
    u32 old = *w, assumed;
    do {
        assumed = old;
        const float sum = load(from_bits((unsigned short)(assumed >> shift), p)) + load(v);
        const u32 bits = to_bits(store<H, float>(sum));
        old = atomicCAS(w, assumed, (assumed & ~(0xffffu << shift)) | (bits << shift));
    } while (old != assumed);
}

#endif

__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(u32* p, u32 v) { atomicAdd(p, v); }
// Two's complement: the unsigned add wraps exactly as i64's wrapping add.
__device__ __forceinline__ void atomic_add(i64* p, i64 v) { atomicAdd((u64*)p, (u64)v); }
__device__ __forceinline__ void atomic_add(u8* p, u8 v) {
    u32 shift;
    u32* w = word_of(p, &shift);
    // Adding v to the byte wraps it; the carry out of the byte is masked off.
    u32 old = *w, assumed;
    do {
        assumed = old;
        const u32 byte = ((assumed >> shift) + v) & 0xffu;
        old = atomicCAS(w, assumed, (assumed & ~(0xffu << shift)) | (byte << shift));
    } while (old != assumed);
}
#ifdef RNN_HALF
__device__ __forceinline__ void atomic_add(__half* p, __half v) {
#if __CUDA_ARCH__ >= 700
    atomicAdd(p, v);
#else
    atomic_add_16(p, v);
#endif
}
__device__ __forceinline__ void atomic_add(__nv_bfloat16* p, __nv_bfloat16 v) {
#if __CUDA_ARCH__ >= 800
    atomicAdd(p, v);
#else
    atomic_add_16(p, v);
#endif
}
#endif

extern "C" __global__ void kernel(const Info info, const K* __restrict__ ids, const T* __restrict__ src,
                                  T* __restrict__ out, u64* __restrict__ bad) {
    const u64 n = info.w[0], m = info.w[1], size = info.w[2], inner = info.w[3];
    for (u64 i = thread_start(); i < n; i += grid_step()) {
        const K id = ids[strided_offset(info, i, info.w[4])];
        if (!in_range(id, size)) {
            atomicMin(bad, i);
            continue;
        }
        const u64 e = (i / (inner * m) * size + (u64)id) * inner + i % inner;
        atomic_add(&out[e], src[strided_offset(info, i, info.w[5])]);
    }
}
