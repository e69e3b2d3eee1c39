// shim_launch.h (a part of cuda_shim.h, see there): rnn_emu::launch, which checks a launch,
// hands the blocks of its grid out to OS threads (each a Worker of shim_fibers.h) and
// reports the first failure; dynamic shared memory.
#ifndef RNN_EMU_CUDA_SHIM_H
#error "shim_launch.h is a part of cuda_shim.h: include that"
#endif

// ---------------------------------------------------------------------------------------
// Launches: checked, then run by Workers on OS threads.
// ---------------------------------------------------------------------------------------
namespace rnn_emu {

// A launch's grid and block (as compile.rs's LaunchDims). Outside the unnamed namespace:
// the translation unit's extern "C" entry points take it.
struct LaunchDims {
    unsigned grid[3];
    unsigned block[3];
    unsigned shared_bytes;
    unsigned os_threads;
};

namespace {

constexpr unsigned kMaxSharedBytes = 227 * 1024; // sm_90's opt-in limit per block

// --- The grid: blocks handed out to OS threads. ---

struct Grid {
    Kernel kernel;
    unsigned g[3], b[3], shared_bytes;
    unsigned long long blocks;
    unsigned long long next = 0; // next linear block index, taken atomically
    int failed = 0;
    int code = 0;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    unsigned long long error_block = ~0ull; // the lowest failing block is reported
    Msg error;

    void record(unsigned long long blk, int c, const char* msg) {
        pthread_mutex_lock(&mu);
        if (blk < error_block) error_block = blk, code = c, error.set("%s", msg);
        pthread_mutex_unlock(&mu);
        __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
    }

    void run_worker() {
        Worker* w = new (std::nothrow) Worker;
        if (w && shared_bytes && posix_memalign((void**)&w->dynamic_shared, 256, shared_bytes)) w->dynamic_shared = nullptr;
        if (!w || (shared_bytes && !w->dynamic_shared)) {
            record(0, 3, "out of memory for an emulator worker");
            delete w;
            return;
        }
        w->kernel = kernel;
        w->n = b[0] * b[1] * b[2];
        for (unsigned i = 0; i < w->n; ++i) w->th[i].idx = uint3{i % b[0], i / b[0] % b[1], i / (b[0] * b[1])};
        tl_worker = w;
        blockDim = dim3(b[0], b[1], b[2]);
        gridDim = dim3(g[0], g[1], g[2]);
        for (;;) {
            if (__atomic_load_n(&failed, __ATOMIC_RELAXED)) break;
            const unsigned long long k = __atomic_fetch_add(&next, 1ull, __ATOMIC_RELAXED);
            if (k >= blocks) break;
            const uint3 blk{(unsigned)(k % g[0]), (unsigned)(k / g[0] % g[1]), (unsigned)(k / g[0] / g[1])};
            if (!w->run_block(blk)) {
                Msg m;
                m.set("block %s: %s", Tid(blk).s, w->error.s);
                record(k, 2, m.s);
                break;
            }
        }
        tl_worker = nullptr;
        delete w;
    }

    static void* thread_main(void* self) {
        static_cast<Grid*>(self)->run_worker();
        return nullptr;
    }
};

unsigned cpu_count() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return (unsigned)CPU_COUNT(&set);
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

__attribute__((format(printf, 3, 4))) int report(char* err, unsigned long cap, const char* f, ...) {
    if (err && cap) {
        va_list a;
        va_start(a, f);
        vsnprintf(err, cap, f, a);
        va_end(a);
    }
    return 1;
}

int check_dims(const LaunchDims& d, char* err, unsigned long cap) {
    const unsigned* g = d.grid;
    const unsigned* b = d.block;
    if (!g[0] || !g[1] || !g[2] || g[0] > 0x7fffffffu || g[1] > 65535 || g[2] > 65535)
        return report(err, cap, "invalid grid (%u,%u,%u): each dim >= 1, x < 2^31, y and z <= 65535", g[0], g[1], g[2]);
    const unsigned long long threads = (unsigned long long)b[0] * b[1] * b[2];
    if (!threads || b[0] > 1024 || b[1] > 1024 || b[2] > 64 || threads > kMaxThreads)
        return report(err, cap, "invalid block (%u,%u,%u): each dim >= 1, z <= 64, at most %u threads",
                      b[0], b[1], b[2], kMaxThreads);
    if (d.shared_bytes > kMaxSharedBytes)
        return report(err, cap, "%u bytes of dynamic shared memory, at most %u", d.shared_bytes, kMaxSharedBytes);
    return 0;
}

int run_grid(Kernel k, const LaunchDims& d, char* err, unsigned long cap) {
    if (check_dims(d, err, cap)) return 1;
    Grid grid;
    grid.kernel = k;
    std::memcpy(grid.g, d.grid, sizeof grid.g);
    std::memcpy(grid.b, d.block, sizeof grid.b);
    grid.shared_bytes = d.shared_bytes;
    grid.blocks = (unsigned long long)d.grid[0] * d.grid[1] * d.grid[2];
    unsigned long long workers = d.os_threads ? d.os_threads : cpu_count();
    if (workers > grid.blocks) workers = grid.blocks;
    if (workers > 1024) workers = 1024;
    pthread_t extra[1023];
    unsigned started = 0;
    for (unsigned i = 1; i < workers; ++i) // this thread is the first worker
        if (pthread_create(&extra[started], nullptr, &Grid::thread_main, &grid) == 0) ++started;
    grid.run_worker();
    for (unsigned i = 0; i < started; ++i) pthread_join(extra[i], nullptr);
    if (!grid.code) return 0;
    report(err, cap, "%s", grid.error.s);
    return grid.code;
}

// The kernel's Info and buffers, and how to call it.
template <class I, class... P> struct Call {
    void (*kernel)(I, P...);
    I info;
    void* buffers[sizeof...(P) + 1];
    template <size_t... N> void run(std::index_sequence<N...>) const { kernel(info, static_cast<P>(buffers[N])...); }
    static void invoke(const void* self) { static_cast<const Call*>(self)->run(std::index_sequence_for<P...>{}); }
};

// Runs `kernel` over the grid of `dims` (see the top of cuda_shim.h). In the unnamed namespace
// too, so that its instantiations (named after rnn_v0::Info, in every batch) stay private.
template <class I, class... P>
int launch(void (*kernel)(const I, P...), const unsigned long long* words, unsigned long n_words,
           void* const* buffers, unsigned long n_buffers, const LaunchDims* dims, char* err,
           unsigned long err_cap) {
    static_assert(std::is_trivially_copyable<I>::value, "the kernel's Info must be trivially copyable");
    static_assert(std::conjunction<std::is_pointer<P>...>::value, "every kernel parameter after Info is a pointer");
    if (err && err_cap) err[0] = 0;
    if (n_words > sizeof(I) / sizeof(unsigned long long))
        return report(err, err_cap, "%lu info words passed, the kernel's Info holds %zu",
                      n_words, sizeof(I) / sizeof(unsigned long long));
    if (n_words && !words) return report(err, err_cap, "info words are null");
    if (n_buffers != sizeof...(P))
        return report(err, err_cap, "the kernel takes %zu buffers, %lu passed", sizeof...(P), n_buffers);
    if (n_buffers && !buffers) return report(err, err_cap, "buffers are null");
    if (!dims) return report(err, err_cap, "launch dims are null");
    Call<I, P...> call;
    call.kernel = kernel;
    std::memset(static_cast<void*>(&call.info), 0, sizeof(I));
    if (n_words) std::memcpy(static_cast<void*>(&call.info), words, n_words * sizeof(unsigned long long));
    for (unsigned long i = 0; i < n_buffers; ++i) call.buffers[i] = buffers[i];
    return run_grid(Kernel{&Call<I, P...>::invoke, &call}, *dims, err, err_cap);
}

// Dynamic shared memory of the running block (`shared_bytes` of LaunchDims, 256-aligned).
template <class T> inline T* dynamic_shared() {
    return reinterpret_cast<T*>(current("dynamic shared memory").dynamic_shared);
}

} // namespace
} // namespace rnn_emu

// `extern __shared__ T name[];` cannot be expressed here; a kernel meant for both worlds
// writes RNN_DYNAMIC_SHARED(T, name), which common.cuh defines for CUDA where this did not:
//     #ifndef RNN_DYNAMIC_SHARED
//     #define RNN_DYNAMIC_SHARED(T, name) extern __shared__ __align__(16) T name[]
//     #endif
// (compile.rs keeps it defined between the kernels of a batch: SHIM_MACROS).
#define RNN_DYNAMIC_SHARED(T, name) T* const name = ::rnn_emu::dynamic_shared<T>()
