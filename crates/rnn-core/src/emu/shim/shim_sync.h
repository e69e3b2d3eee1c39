// shim_sync.h (a part of cuda_shim.h, see there): __syncthreads and the warp collectives
// (shuffles, votes, reductions, match), each a call into the running Worker.
#ifndef RNN_EMU_CUDA_SHIM_H
#error "shim_sync.h is a part of cuda_shim.h: include that"
#endif

// ---------------------------------------------------------------------------------------
// Barriers and warp collectives.
// ---------------------------------------------------------------------------------------
namespace {

inline void __syncthreads() { rnn_emu::current("__syncthreads").barrier(0); }
inline int __syncthreads_count(int p) { return rnn_emu::current("__syncthreads_count").barrier(p); }
inline int __syncthreads_and(int p) {
    return rnn_emu::current("__syncthreads_and").barrier(p) == (int)rnn_emu::tl_worker->n;
}
inline int __syncthreads_or(int p) { return rnn_emu::current("__syncthreads_or").barrier(p) != 0; }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    rnn_emu::current("__syncwarp").warp_op(rnn_emu::kSyncwarp, mask, 0, 0, 0, 32);
}
inline unsigned __activemask() { return rnn_emu::current("__activemask").active_mask(); }
inline unsigned __ballot_sync(unsigned mask, int p) {
    return (unsigned)rnn_emu::current("__ballot_sync").warp_op(rnn_emu::kBallot, mask, p != 0, 4, 0, 32);
}
inline int __any_sync(unsigned mask, int p) {
    return (int)rnn_emu::current("__any_sync").warp_op(rnn_emu::kAny, mask, p != 0, 4, 0, 32);
}
inline int __all_sync(unsigned mask, int p) {
    return (int)rnn_emu::current("__all_sync").warp_op(rnn_emu::kAll, mask, p != 0, 4, 0, 32);
}
// A nanosleep lets the other threads of the block run (spin-waits on them can finish).
inline void __nanosleep(unsigned) { rnn_emu::current("__nanosleep").yield(); }
// __trap ends the launch with an error naming the thread.
__attribute__((noreturn)) inline void __trap() {
    rnn_emu::Worker& w = rnn_emu::current("__trap");
    w.error.set("thread %s called __trap()", rnn_emu::Tid(w.cur->idx).s);
    w.fail();
}
__attribute__((noreturn)) inline void __brkpt() { __trap(); }

template <class T> inline T rnn_shfl(rnn_emu::Kind k, unsigned mask, T var, long long arg, int width) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffled type");
    uint64_t v = 0;
    std::memcpy(&v, &var, sizeof(T));
    v = rnn_emu::current(rnn_emu::kKindName[k]).warp_op(k, mask, v, sizeof(T), arg, width);
    std::memcpy(&var, &v, sizeof(T));
    return var;
}
// The overload set of CUDA's headers (so a u8 argument promotes to int, as with nvcc).
#define RNN_EMU_SHFL(T)                                                                                        \
    inline T __shfl_sync(unsigned mask, T var, int src, int width = warpSize) {                                \
        return rnn_shfl(rnn_emu::kShfl, mask, var, src, width);                                                \
    }                                                                                                          \
    inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {                      \
        return rnn_shfl(rnn_emu::kShflUp, mask, var, delta, width);                                            \
    }                                                                                                          \
    inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {                    \
        return rnn_shfl(rnn_emu::kShflDown, mask, var, delta, width);                                          \
    }                                                                                                          \
    inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {                      \
        return rnn_shfl(rnn_emu::kShflXor, mask, var, lane_mask, width);                                       \
    }
RNN_EMU_SHFL(int) RNN_EMU_SHFL(unsigned int) RNN_EMU_SHFL(long) RNN_EMU_SHFL(unsigned long)
RNN_EMU_SHFL(long long) RNN_EMU_SHFL(unsigned long long) RNN_EMU_SHFL(float) RNN_EMU_SHFL(double)
RNN_EMU_SHFL(__half) RNN_EMU_SHFL(__half2) RNN_EMU_SHFL(__nv_bfloat16) RNN_EMU_SHFL(__nv_bfloat162)
#undef RNN_EMU_SHFL

#define RNN_EMU_REDUCE(name, K, T) \
    inline T name(unsigned mask, T v) { return (T)rnn_emu::current(#name).warp_op(rnn_emu::K, mask, (uint32_t)v, 4, 0, 32); }
RNN_EMU_REDUCE(__reduce_add_sync, kRedAdd, unsigned) RNN_EMU_REDUCE(__reduce_add_sync, kRedAdd, int)
RNN_EMU_REDUCE(__reduce_min_sync, kRedUmin, unsigned) RNN_EMU_REDUCE(__reduce_min_sync, kRedMin, int)
RNN_EMU_REDUCE(__reduce_max_sync, kRedUmax, unsigned) RNN_EMU_REDUCE(__reduce_max_sync, kRedMax, int)
RNN_EMU_REDUCE(__reduce_and_sync, kRedAnd, unsigned) RNN_EMU_REDUCE(__reduce_or_sync, kRedOr, unsigned)
RNN_EMU_REDUCE(__reduce_xor_sync, kRedXor, unsigned)
#undef RNN_EMU_REDUCE

#define RNN_EMU_MATCH(T)                                                                                     \
    inline unsigned __match_any_sync(unsigned mask, T v) {                                                   \
        uint64_t b = 0;                                                                                      \
        std::memcpy(&b, &v, sizeof v);                                                                       \
        return (unsigned)rnn_emu::current("__match_any_sync").warp_op(rnn_emu::kMatchAny, mask, b, sizeof v, 0, 32); \
    }                                                                                                        \
    inline unsigned __match_all_sync(unsigned mask, T v, int* pred) {                                        \
        uint64_t b = 0;                                                                                      \
        std::memcpy(&b, &v, sizeof v);                                                                       \
        const uint64_t r = rnn_emu::current("__match_all_sync").warp_op(rnn_emu::kMatchAll, mask, b, sizeof v, 0, 32); \
        *pred = (int)(r >> 32);                                                                              \
        return (unsigned)r;                                                                                  \
    }
RNN_EMU_MATCH(int) RNN_EMU_MATCH(unsigned int) RNN_EMU_MATCH(long) RNN_EMU_MATCH(unsigned long)
RNN_EMU_MATCH(long long) RNN_EMU_MATCH(unsigned long long) RNN_EMU_MATCH(float) RNN_EMU_MATCH(double)
#undef RNN_EMU_MATCH

} // namespace
