// shim_fibers.h (a part of cuda_shim.h, see there): the threads of a block as fibers on
// one OS thread (a Worker): fiber stacks, context switches, and the scheduler with its
// barrier and warp-collective rendezvous.
#ifndef RNN_EMU_CUDA_SHIM_H
#error "shim_fibers.h is a part of cuda_shim.h: include that"
#endif

// Fiber stack per emulated thread. CUDA's default stack limit is 1 KiB per thread, so real
// kernels need little; 64 KiB leaves room for glibc (printf uses a few KiB) and -O1 frames.
// A guard page below each stack turns an overflow into SIGSEGV.
#ifndef RNN_EMU_STACK_BYTES
#if defined(__SANITIZE_ADDRESS__)
#define RNN_EMU_STACK_BYTES (256 * 1024)
#else
#define RNN_EMU_STACK_BYTES (64 * 1024)
#endif
#endif

// ---------------------------------------------------------------------------------------
// The runtime: the threads of a block as fibers on one OS thread.
// ---------------------------------------------------------------------------------------
namespace rnn_emu {

namespace {

constexpr unsigned kMaxThreads = 1024;

// printf into a fixed buffer.
struct Msg {
    char s[640];
    Msg() { s[0] = 0; }
    __attribute__((format(printf, 2, 3))) void set(const char* f, ...) {
        va_list a;
        va_start(a, f);
        vsnprintf(s, sizeof s, f, a);
        va_end(a);
    }
    bool empty() const { return s[0] == 0; }
};

struct Tid { // "(x,y,z)" of an index, for messages
    char s[40];
    explicit Tid(uint3 v) { snprintf(s, sizeof s, "(%u,%u,%u)", v.x, v.y, v.z); }
};

// --- Fiber stacks: mmap'd with a guard page, pooled across launches, freed at unload. ---

struct StackPool {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    void* head = nullptr; // free stacks, linked through their first word
    unsigned count = 0;
    static size_t page() { return (size_t)sysconf(_SC_PAGESIZE); }
    char* get() {
        pthread_mutex_lock(&mu);
        char* s = (char*)head;
        if (s) head = *(void**)s, --count;
        pthread_mutex_unlock(&mu);
        if (s) return s;
        void* m = mmap(nullptr, page() + RNN_EMU_STACK_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
        if (m == MAP_FAILED) return nullptr;
        mprotect(m, page(), PROT_NONE); // guard page below the stack
        return (char*)m + page();
    }
    void put(char* s) {
        pthread_mutex_lock(&mu);
        const bool keep = count < 4096;
        if (keep) *(void**)s = head, head = s, ++count;
        pthread_mutex_unlock(&mu);
        if (!keep) munmap(s - page(), page() + RNN_EMU_STACK_BYTES);
    }
    ~StackPool() {
        while (head) {
            char* s = (char*)head;
            head = *(void**)s;
            munmap(s - page(), page() + RNN_EMU_STACK_BYTES);
        }
    }
};
StackPool g_stacks;

// --- Context switches. ---
//
// glibc's swapcontext makes a system call (sigprocmask) per switch, about 0.3 us, which
// dominates kernels that synchronize often. On x86-64 a 20-instruction switch of the
// callee-saved registers is used instead, except in sanitizer builds (ASan / TSan intercept
// swapcontext) and under CET shadow stacks; RNN_EMU_UCONTEXT forces ucontext.
#if !defined(RNN_EMU_UCONTEXT) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__) && !(defined(__CET__) && (__CET__ & 2))
#define RNN_EMU_FAST_SWITCH 1
struct Ctx {
    void* sp; // the saved stack pointer; the registers are on that stack
};
// Pushes rbp, rbx, r12-r15 and the MXCSR / x87 control words (the SysV callee-saved state)
// on the current stack, saves its pointer in *save, then does the reverse from `load`.
__attribute__((naked, noinline)) void ctx_switch(void** /*save*/, void* /*load*/) {
    __asm__ volatile(
        "pushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n\t"
        "subq $8, %rsp\n\tstmxcsr (%rsp)\n\tfnstcw 4(%rsp)\n\t"
        "movq %rsp, (%rdi)\n\tmovq %rsi, %rsp\n\t"
        "ldmxcsr (%rsp)\n\tfldcw 4(%rsp)\n\taddq $8, %rsp\n\t"
        "popq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n\t"
        "ret\n\t");
}
inline void switch_ctx(Ctx* save, Ctx* load) { ctx_switch(&save->sp, load->sp); }
// A context that starts `entry` on the stack [stack, stack + bytes): the frame ctx_switch pops.
inline void make_ctx(Ctx* c, char* stack, size_t bytes, void (*entry)(), Ctx*) {
    void** sp = (void**)(((uintptr_t)stack + bytes) & ~(uintptr_t)15);
    *--sp = nullptr;                            // entry's return address: it never returns
    *--sp = reinterpret_cast<void*>(entry);     // ctx_switch's `ret` goes here
    for (int i = 0; i < 6; ++i) *--sp = nullptr; // rbp rbx r12 r13 r14 r15
    unsigned short fcw;
    __asm__ volatile("fnstcw %0" : "=m"(fcw));
    uint64_t control = (uint64_t)__builtin_ia32_stmxcsr() | (uint64_t)fcw << 32;
    *--sp = reinterpret_cast<void*>(control);
    c->sp = sp;
}
#else
#define RNN_EMU_FAST_SWITCH 0
struct Ctx {
    ucontext_t uc;
};
inline void switch_ctx(Ctx* save, Ctx* load) { swapcontext(&save->uc, &load->uc); }
// Kept out of line: GCC treats getcontext like setjmp (returns twice) for its caller.
__attribute__((noinline)) void make_ctx(Ctx* c, char* stack, size_t bytes, void (*entry)(), Ctx* link) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = bytes;
    c->uc.uc_link = &link->uc; // not reached: entry never returns
    makecontext(&c->uc, entry, 0);
}
#endif

struct Fiber {
    Ctx ctx;
    char* stack;
};

// --- Emulated threads and what they wait for. ---

enum class St : unsigned char { Unstarted, Running, Ready, Barrier, Warp, Done };

enum Kind : unsigned char {
    kShfl, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll, kSyncwarp, kRedAdd, kRedMin,
    kRedMax, kRedUmin, kRedUmax, kRedAnd, kRedOr, kRedXor, kMatchAny, kMatchAll
};
const char* const kKindName[] = {
    "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync",
    "__any_sync", "__all_sync", "__syncwarp", "__reduce_add_sync", "__reduce_min_sync",
    "__reduce_max_sync", "__reduce_min_sync", "__reduce_max_sync", "__reduce_and_sync",
    "__reduce_or_sync", "__reduce_xor_sync", "__match_any_sync", "__match_all_sync"};

struct Op { // what a lane brings to a warp collective, and what it gets back
    Kind kind;
    unsigned size; // bytes of `value` (shuffles, match)
    unsigned mask;
    int width;
    long long arg; // srcLane / delta / laneMask
    uint64_t value;
    uint64_t result;
};

struct Thread {
    St st;
    uint3 idx;
    Fiber* fiber; // from start to exit
    Op op;
};

// The kernel with its arguments bound: `invoke(call)` runs it for the current thread.
struct Kernel {
    void (*invoke)(const void*);
    const void* call;
};

struct Worker;
thread_local Worker* tl_worker; // the worker running on this OS thread, if any
void fiber_main();

// One OS thread's state: runs blocks one at a time; each thread of the block runs on a
// fiber until it exits (then that fiber starts the next unstarted thread) or waits at a
// barrier / warp collective (then the fiber stays with it and the scheduler moves on).
// The last thread to arrive completes a barrier or collective and marks the others Ready.
// Scheduling: the lanes a warp collective releases run next (ahead of other warps), so a
// warp runs alone from one barrier to the next. After a barrier the warps go in ascending
// order or descending, alternating from barrier to barrier and block to block: a warp that
// reads shared memory another warp writes without a barrier between them then runs before
// the writer in one of the orders, and the kernel's results show it.
struct Worker {
    Kernel kernel;
    unsigned n = 0;           // threads per block
    char* dynamic_shared = nullptr;
    Thread th[kMaxThreads];
    unsigned next = 0, done = 0;                 // next thread to start, threads exited
    unsigned at_barrier = 0, bar_count = 0, bar_result = 0, bar_rounds = 0;
    unsigned ready[kMaxThreads], ready_head = 0, ready_len = 0;
    Fiber* fibers[kMaxThreads];
    Fiber* idle[kMaxThreads];
    unsigned n_fibers = 0, n_idle = 0;
    Thread* cur = nullptr;     // the running thread
    Fiber* cur_fiber = nullptr;
    bool went_idle = false;    // the fiber that switched back has no thread left to start
    Ctx sched;                 // the scheduler's context (this OS thread's own stack)
    Msg error;

    unsigned lin(const Thread& t) const { return (unsigned)(&t - th); }

    void enter(Thread& t) {
        cur = &t;
        threadIdx = t.idx;
    }

    // Abandons the running thread's fiber and returns to the scheduler with an error.
    __attribute__((noreturn)) void fail() {
        switch_ctx(&cur_fiber->ctx, &sched);
        __builtin_unreachable(); // a failed block's fibers are never resumed
    }

    void suspend(Thread& t, St why) {
        t.st = why;
        switch_ctx(&t.fiber->ctx, &sched);
        enter(t); // resumed by the scheduler
    }

    void make_ready(unsigned i) {
        th[i].st = St::Ready;
        ready[(ready_head + ready_len++) % kMaxThreads] = i;
    }

    // Ready, and first in line.
    void make_ready_first(unsigned i) {
        th[i].st = St::Ready;
        ready_head = (ready_head + kMaxThreads - 1) % kMaxThreads;
        ready[ready_head] = i;
        ++ready_len;
    }

    int barrier(int pred) {
        Thread& t = *cur;
        bar_count += pred != 0;
        if (++at_barrier < n) {
            suspend(t, St::Barrier);
            return (int)bar_result;
        }
        // Last to arrive: release everyone. The result stays until the next barrier
        // completes, which needs every thread, so all have read it by then.
        bar_result = bar_count;
        bar_count = at_barrier = 0;
        const bool descending = (bar_rounds++ + blockIdx.x + blockIdx.y + blockIdx.z) % 2 == 1;
        for (unsigned i = 0; i < n; ++i)
            if (th[i].st == St::Barrier) descending ? make_ready_first(i) : make_ready(i);
        return (int)bar_result;
    }

    void yield() {
        Thread& t = *cur;
        make_ready(lin(t));
        suspend(t, St::Ready);
    }

    unsigned warp_exists(unsigned base) const { // lanes of the warp at `base` that exist
        const unsigned live = n - base < 32 ? n - base : 32;
        return live == 32 ? ~0u : (1u << live) - 1;
    }

    unsigned active_mask() {
        const unsigned base = lin(*cur) & ~31u;
        unsigned m = 0;
        for (unsigned l = 0; l < 32 && base + l < n; ++l)
            if (th[base + l].st != St::Done) m |= 1u << l;
        return m;
    }

    uint64_t warp_op(Kind kind, unsigned mask, uint64_t value, unsigned size, long long arg, int width) {
        Thread& t = *cur;
        const unsigned i = lin(t), base = i & ~31u, lane = i & 31u;
        if (!(mask >> lane & 1)) {
            error.set("thread %s (warp %u, lane %u) calls %s with mask 0x%08x, which does not name its own lane",
                      Tid(t.idx).s, i / 32, lane, kKindName[kind], mask);
            fail();
        }
        t.op = Op{kind, size, mask, width, arg, value, 0};
        const unsigned group = mask & warp_exists(base);
        for (unsigned m = group & ~(1u << lane); m; m &= m - 1) {
            const Thread& u = th[base + __builtin_ctz(m)];
            if (u.st != St::Warp || u.op.mask != mask) { // someone has not arrived yet
                suspend(t, St::Warp);
                return t.op.result;
            }
        }
        complete_warp(base, group, lane);
        return t.op.result;
    }

    // The lane whose value lane `l` reads in a shuffle, or -1 for an invalid width.
    static int shfl_source(const Op& op, unsigned l) {
        const unsigned w = (unsigned)op.width;
        if (op.width < 1 || op.width > 32 || (w & (w - 1))) return -1;
        const unsigned seg = l & ~(w - 1), pos = l & (w - 1);
        const unsigned long long d = (unsigned long long)op.arg;
        switch (op.kind) {
        case kShfl: return (int)(seg + ((unsigned)op.arg & (w - 1)));
        case kShflUp: return d > pos ? (int)l : (int)(l - d);
        case kShflDown: return pos + d >= w ? (int)l : (int)(l + d);
        default: { // xor: lanes may read earlier segments, not later ones
            const unsigned long long s = l ^ (unsigned)op.arg;
            return s >= seg + w ? (int)l : (int)s;
        }
        }
    }

    void complete_warp(unsigned base, unsigned group, unsigned self) {
        Thread* lanes = th + base;
        const Op& first = lanes[self].op;
        for (unsigned m = group; m; m &= m - 1) {
            const Op& o = lanes[__builtin_ctz(m)].op;
            if (o.kind != first.kind || o.size != first.size) {
                error.set("warp %u: lane %u calls %s (%u bytes) while lane %u calls %s (%u bytes) with the same mask 0x%08x",
                          base / 32, self, kKindName[first.kind], first.size, __builtin_ctz(m),
                          kKindName[o.kind], o.size, first.mask);
                fail();
            }
        }
        if (first.kind <= kShflXor) {
            shuffle(base, group);
        } else {
            for (unsigned m = group; m; m &= m - 1) lanes[__builtin_ctz(m)].op.result = reduce(lanes, group, __builtin_ctz(m));
        }
        // The warp goes on first, its lanes in ascending order (pushed to the front from the last).
        for (unsigned m = group & ~(1u << self); m; m &= ~(1u << (31 - __builtin_clz(m))))
            make_ready_first(base + 31 - __builtin_clz(m));
    }

    void shuffle(unsigned base, unsigned group) {
        Thread* lanes = th + base;
        for (unsigned m = group; m; m &= m - 1) {
            const unsigned l = __builtin_ctz(m);
            Op& o = lanes[l].op;
            const int src = shfl_source(o, l);
            const char* why = src < 0 ? "has width %d, not a power of two in [1, 32]"
                              : !(warp_exists(base) >> src & 1) ? "reads lane %d, which does not exist (partial warp)"
                              : !(group >> src & 1) ? "reads lane %d, which is not in the mask" : nullptr;
            if (why) {
                char what[96];
                snprintf(what, sizeof what, why, src < 0 ? o.width : src);
                error.set("thread %s (warp %u, lane %u) in %s (mask 0x%08x) %s", Tid(lanes[l].idx).s,
                          base / 32, l, kKindName[o.kind], o.mask, what);
                fail();
            }
            o.result = lanes[src].op.value;
        }
    }

    // Result of a non-shuffle collective for lane `l`.
    static uint64_t reduce(const Thread* lanes, unsigned group, unsigned l) {
        const Op& me = lanes[l].op;
        uint64_t acc = 0;
        bool first = true;
        unsigned same = 0;
        for (unsigned m = group; m; m &= m - 1) {
            const unsigned j = __builtin_ctz(m);
            const uint64_t v = lanes[j].op.value;
            const uint64_t sv = (uint64_t)(int64_t)(int32_t)v, sa = (uint64_t)(int64_t)(int32_t)acc;
            switch (me.kind) {
            case kBallot: case kAny: case kAll: acc |= (uint64_t)(v != 0) << j; break;
            case kRedAdd: acc = (uint32_t)(acc + v); break;
            case kRedMin: acc = first || (int64_t)sv < (int64_t)sa ? (uint32_t)v : acc; break;
            case kRedMax: acc = first || (int64_t)sv > (int64_t)sa ? (uint32_t)v : acc; break;
            case kRedUmin: acc = first || v < acc ? v : acc; break;
            case kRedUmax: acc = first || v > acc ? v : acc; break;
            case kRedAnd: acc = first ? v : acc & v; break;
            case kRedOr: acc |= v; break;
            case kRedXor: acc ^= v; break;
            default: same |= (unsigned)(v == me.value) << j; break; // match
            }
            first = false;
        }
        switch (me.kind) {
        case kAny: return acc != 0;
        case kAll: return acc == group;
        case kSyncwarp: return 0;
        case kMatchAny: return same;
        case kMatchAll: return same == group ? (uint64_t)group | (1ull << 32) : 0;
        default: return acc;
        }
    }

    // Why the block cannot go on (nothing runnable, not every thread exited).
    void explain_deadlock() {
        for (unsigned i = 0; i < n; ++i) { // a collective waiting for a lane that cannot come
            const Thread& t = th[i];
            if (t.st != St::Warp) continue;
            const unsigned base = i & ~31u, group = t.op.mask & warp_exists(base);
            for (unsigned m = group; m; m &= m - 1) {
                const Thread& u = th[base + __builtin_ctz(m)];
                if (u.st == St::Warp && u.op.mask == t.op.mask) continue;
                char why[96];
                if (u.st == St::Done) snprintf(why, sizeof why, "has exited");
                else if (u.st == St::Barrier) snprintf(why, sizeof why, "waits at __syncthreads");
                else snprintf(why, sizeof why, "waits in %s with mask 0x%08x", kKindName[u.op.kind], u.op.mask);
                error.set("thread %s (warp %u, lane %u) waits in %s (mask 0x%08x) for lane %u, thread %s, which %s",
                          Tid(t.idx).s, i / 32, i & 31, kKindName[t.op.kind], t.op.mask,
                          __builtin_ctz(m), Tid(u.idx).s, why);
                return;
            }
        }
        int waiting = -1, exited = -1;
        unsigned n_waiting = 0;
        for (unsigned i = 0; i < n; ++i) {
            if (th[i].st == St::Barrier && !n_waiting++) waiting = (int)i;
            if (th[i].st == St::Done && exited < 0) exited = (int)i;
        }
        if (waiting >= 0 && exited >= 0) {
            error.set("divergent __syncthreads: %u of %u threads wait at it (first %s) but thread %s exited without reaching it",
                      n_waiting, n, Tid(th[waiting].idx).s, Tid(th[exited].idx).s);
        } else {
            error.set("deadlock: %u of %u threads wait at __syncthreads, none can proceed", n_waiting, n);
        }
    }

    Fiber* take_fiber() {
        if (n_idle) return idle[--n_idle];
        Fiber* f = new (std::nothrow) Fiber;
        if (!f) return nullptr;
        f->stack = g_stacks.get();
        if (!f->stack) {
            delete f;
            return nullptr;
        }
        return fibers[n_fibers++] = f;
    }

    // Runs fiber `f` until it switches back (kept out of run_block's loop: GCC treats
    // swapcontext like setjmp for the variables around it).
    __attribute__((noinline)) void switch_into(Fiber* f) {
        went_idle = false;
        cur_fiber = f;
        switch_ctx(&sched, &f->ctx);
        if (went_idle) idle[n_idle++] = cur_fiber; // fibers never change cur_fiber
    }

    // Runs one block to completion; false (with `error`) if it could not.
    bool run_block(uint3 b) {
        blockIdx = b;
        next = done = at_barrier = bar_count = bar_rounds = 0;
        ready_head = ready_len = 0;
        for (unsigned i = 0; i < n; ++i) th[i].st = St::Unstarted;
        while (error.empty()) {
            Fiber* f;
            if (ready_len) {
                f = th[ready[ready_head]].fiber;
                ready_head = (ready_head + 1) % kMaxThreads, --ready_len;
            } else if (next < n) {
                if (!(f = take_fiber())) {
                    error.set("out of memory for fiber stacks (%u in use)", n_fibers);
                    break;
                }
                make_ctx(&f->ctx, f->stack, RNN_EMU_STACK_BYTES, fiber_main, &sched);
            } else {
                break;
            }
            switch_into(f);
        }
        if (error.empty() && done < n) explain_deadlock();
        if (error.empty()) return true;
        n_idle = 0; // abandon the failed block's fibers; each is re-made when next taken
        for (unsigned i = 0; i < n_fibers; ++i) idle[n_idle++] = fibers[i];
        return false;
    }

    ~Worker() {
        for (unsigned i = 0; i < n_fibers; ++i) {
            g_stacks.put(fibers[i]->stack);
            delete fibers[i];
        }
        free(dynamic_shared);
    }
};

// Entry of every fiber: runs unstarted threads of the current block until none is left,
// then goes back to the scheduler for good (a fiber is re-made each time it is taken).
void fiber_main() {
    Worker& w = *tl_worker;
    Fiber* const self = w.cur_fiber;
    while (w.next < w.n) {
        Thread& t = w.th[w.next++];
        t.fiber = self;
        t.st = St::Running;
        w.enter(t);
        bool threw = false;
        try {
            w.kernel.invoke(w.kernel.call);
        } catch (...) {
            threw = true; // leave the handler before abandoning this fiber
        }
        if (threw) {
            w.error.set("thread %s threw a C++ exception", Tid(t.idx).s);
            w.fail();
        }
        t.st = St::Done;
        ++w.done;
    }
    w.went_idle = true;
    switch_ctx(&self->ctx, &w.sched);
    __builtin_unreachable();
}

Worker& current(const char* what) {
    Worker* w = tl_worker;
    if (!w || !w->cur) {
        fprintf(stderr, "rnn_emu: %s called outside a kernel launch\n", what);
        abort();
    }
    return *w;
}

} // namespace
} // namespace rnn_emu
