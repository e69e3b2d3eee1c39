// shim_atomics.h (a part of cuda_shim.h, see there): atomicAdd and the other atomics,
// memory fences.
#ifndef RNN_EMU_CUDA_SHIM_H
#error "shim_atomics.h is a part of cuda_shim.h: include that"
#endif

// ---------------------------------------------------------------------------------------
// Atomics: relaxed, like CUDA's (fences are separate); lock-free for 2, 4 and 8 bytes.
// ---------------------------------------------------------------------------------------
namespace {

template <class T, class F> inline T rnn_atomic_update(T* p, F f) {
    static_assert(__atomic_always_lock_free(sizeof(T), 0), "lock-free atomic of this size");
    T old, want;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    do {
        want = f(old);
    } while (!__atomic_compare_exchange(p, &old, &want, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return old;
}

#define RNN_EMU_FETCH(name, op, T) \
    inline T name(T* p, T v) { return __atomic_fetch_##op(p, v, __ATOMIC_RELAXED); }
RNN_EMU_FETCH(atomicAdd, add, int) RNN_EMU_FETCH(atomicAdd, add, unsigned int)
RNN_EMU_FETCH(atomicAdd, add, unsigned long long)
RNN_EMU_FETCH(atomicSub, sub, int) RNN_EMU_FETCH(atomicSub, sub, unsigned int)
RNN_EMU_FETCH(atomicAnd, and, int) RNN_EMU_FETCH(atomicAnd, and, unsigned int)
RNN_EMU_FETCH(atomicAnd, and, unsigned long long)
RNN_EMU_FETCH(atomicOr, or, int) RNN_EMU_FETCH(atomicOr, or, unsigned int)
RNN_EMU_FETCH(atomicOr, or, unsigned long long)
RNN_EMU_FETCH(atomicXor, xor, int) RNN_EMU_FETCH(atomicXor, xor, unsigned int)
RNN_EMU_FETCH(atomicXor, xor, unsigned long long)
#undef RNN_EMU_FETCH
#define RNN_EMU_EXCH(T) \
    inline T atomicExch(T* p, T v) { T old; __atomic_exchange(p, &v, &old, __ATOMIC_RELAXED); return old; }
RNN_EMU_EXCH(int) RNN_EMU_EXCH(unsigned int) RNN_EMU_EXCH(unsigned long long) RNN_EMU_EXCH(float)
#undef RNN_EMU_EXCH
#define RNN_EMU_CAS(T)                                                                            \
    inline T atomicCAS(T* p, T compare, T val) {                                                  \
        __atomic_compare_exchange(p, &compare, &val, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);   \
        return compare; /* the old value, whether or not it matched */                           \
    }
RNN_EMU_CAS(int) RNN_EMU_CAS(unsigned int) RNN_EMU_CAS(unsigned long long) RNN_EMU_CAS(unsigned short)
#undef RNN_EMU_CAS
#define RNN_EMU_MINMAX_ATOMIC(T)                                                                 \
    inline T atomicMin(T* p, T v) { return rnn_atomic_update(p, [v](T o) { return v < o ? v : o; }); } \
    inline T atomicMax(T* p, T v) { return rnn_atomic_update(p, [v](T o) { return v > o ? v : o; }); }
RNN_EMU_MINMAX_ATOMIC(int) RNN_EMU_MINMAX_ATOMIC(unsigned int)
RNN_EMU_MINMAX_ATOMIC(unsigned long long) RNN_EMU_MINMAX_ATOMIC(long long)
#undef RNN_EMU_MINMAX_ATOMIC
inline unsigned atomicInc(unsigned* p, unsigned v) {
    return rnn_atomic_update(p, [v](unsigned o) { return o >= v ? 0u : o + 1; });
}
inline unsigned atomicDec(unsigned* p, unsigned v) {
    return rnn_atomic_update(p, [v](unsigned o) { return o == 0 || o > v ? v : o - 1; });
}
// Float adds: a compare-exchange loop on the value's own bytes (2, 4 or 8), so each add is
// the ordinary IEEE add rounded once (16-bit: added in float, rounded once, as CUDA).
inline float atomicAdd(float* p, float v) { return rnn_atomic_update(p, [v](float o) { return o + v; }); }
inline double atomicAdd(double* p, double v) { return rnn_atomic_update(p, [v](double o) { return o + v; }); }
inline __half atomicAdd(__half* p, __half v) { return rnn_atomic_update(p, [v](__half o) { return __hadd(o, v); }); }
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
    return rnn_atomic_update(p, [v](__nv_bfloat16 o) { return __hadd(o, v); });
}
// The pair forms are atomic per 32-bit word, as on the GPU.
inline __half2 atomicAdd(__half2* p, __half2 v) { return rnn_atomic_update(p, [v](__half2 o) { return __hadd2(o, v); }); }
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* p, __nv_bfloat162 v) {
    return rnn_atomic_update(p, [v](__nv_bfloat162 o) { return __hadd2(o, v); });
}
// Scope variants (_block, _system) behave as the device-wide ones.
#define RNN_EMU_SCOPED(name)                                                                    \
    template <class... A> inline auto name##_block(A... a) -> decltype(name(a...)) { return name(a...); } \
    template <class... A> inline auto name##_system(A... a) -> decltype(name(a...)) { return name(a...); }
RNN_EMU_SCOPED(atomicAdd) RNN_EMU_SCOPED(atomicSub) RNN_EMU_SCOPED(atomicExch) RNN_EMU_SCOPED(atomicMin)
RNN_EMU_SCOPED(atomicMax) RNN_EMU_SCOPED(atomicInc) RNN_EMU_SCOPED(atomicDec) RNN_EMU_SCOPED(atomicCAS)
RNN_EMU_SCOPED(atomicAnd) RNN_EMU_SCOPED(atomicOr) RNN_EMU_SCOPED(atomicXor)
#undef RNN_EMU_SCOPED

inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

} // namespace
