// shim_wmma.h (a part of cuda_shim.h, see there): nvcuda::wmma's 16x16x16 fragments of
// __half / __nv_bfloat16 with float accumulators, for kernels that use them only through
// fill_fragment, load_matrix_sync, mma_sync and store_matrix_sync.
//
// On a GPU a fragment is spread over the 32 lanes of a warp in an unspecified way. Here
// every lane holds the whole 16x16 tile (row-major), and each warp-collective operation
// computes the whole result in every lane: the lanes load the same tiles, compute the same
// products and store the same values, so a store by every lane writes what one warp-wide
// store would. Per-lane element access (`x[i]`, `num_elements`) is not provided, as its
// meaning depends on the hardware's layout. mma_sync multiplies the 16-bit inputs exactly
// (their products fit a float) and sums them in float, in order over k, onto the
// accumulator; the hardware's summation order and internal precision are unspecified, so
// results may differ from a GPU's in the last bits of the float sums.
//
// Checked (the launch fails, naming the thread): pointers not 256-bit aligned, ldm not a
// multiple of 8 elements (16-bit types) or 4 (float), and, through a __syncwarp in mma_sync,
// a warp whose lanes do not all reach it.
#ifndef RNN_EMU_CUDA_SHIM_H
#error "shim_wmma.h is a part of cuda_shim.h: include that"
#endif

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename E, typename Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulator models 16x16x16 fragments only");
    E tile[16 * 16]; // row-major: element (row, col) at tile[16 * row + col]
};

namespace detail {

inline float to_float(float x) { return x; }
inline float to_float(__half x) { return __half2float(x); }
inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// Fails the launch unless `p` and `ldm` meet WMMA's requirements for elements of `bytes`.
inline void check(const void* p, unsigned ldm, unsigned bytes, const char* what) {
    const unsigned multiple = 16 / bytes;
    if ((uintptr_t)p % 32 != 0 || ldm % multiple != 0) {
        rnn_emu::Worker& w = rnn_emu::current(what);
        w.error.set("thread %s: %s with a pointer not 256-bit aligned or ldm %u not a multiple of %u",
                    rnn_emu::Tid(w.cur->idx).s, what, ldm, multiple);
        w.fail();
    }
}

// Copies a 16x16 tile between `tile` (row-major) and memory with leading dimension `ldm`.
template <typename E> inline void gather(E* tile, const E* p, unsigned ldm, bool col_major) {
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) tile[16 * r + c] = col_major ? p[r + (size_t)c * ldm] : p[(size_t)r * ldm + c];
}
template <typename E> inline void scatter(E* p, const E* tile, unsigned ldm, bool col_major) {
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) (col_major ? p[r + (size_t)c * ldm] : p[(size_t)r * ldm + c]) = tile[16 * r + c];
}

} // namespace detail

template <typename Use, typename E, typename L, typename V> inline void fill_fragment(fragment<Use, 16, 16, 16, E, L>& f, const V& v) {
    for (int e = 0; e < 256; ++e) f.tile[e] = (E)v;
}

// matrix_a / matrix_b: the layout is the fragment's.
template <typename Use, typename E, typename L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, E, L>& f, const E* p, unsigned ldm) {
    static_assert(std::is_same<L, row_major>::value || std::is_same<L, col_major>::value, "a matrix fragment needs a layout");
    detail::check(p, ldm, sizeof(E), "load_matrix_sync");
    detail::gather(f.tile, p, ldm, std::is_same<L, col_major>::value);
}

// The accumulator: the layout is an argument.
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t layout) {
    detail::check(p, ldm, sizeof(float), "load_matrix_sync");
    detail::gather(f.tile, p, ldm, layout == mem_col_major);
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t layout) {
    detail::check(p, ldm, sizeof(float), "store_matrix_sync");
    detail::scatter(p, f.tile, ldm, layout == mem_col_major);
}

// d = a b + c; d may be c.
template <typename E, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, E, LA>& a,
                     const fragment<matrix_b, 16, 16, 16, E, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
    static_assert(std::is_same<E, __half>::value || std::is_same<E, __nv_bfloat16>::value,
                  "the emulator models __half and __nv_bfloat16 inputs only");
    __syncwarp();
    float out[256];
    for (int r = 0; r < 16; ++r)
        for (int col = 0; col < 16; ++col) {
            float s = c.tile[16 * r + col];
            for (int k = 0; k < 16; ++k)
                s += detail::to_float(a.tile[16 * r + k]) * detail::to_float(b.tile[16 * k + col]);
            out[16 * r + col] = s;
        }
    std::memcpy(d.tile, out, sizeof out);
}

} // namespace wmma
} // namespace nvcuda
