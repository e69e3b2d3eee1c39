// cuda_shim.h: runs rnn's CUDA C kernel sources on the host, compiled by g++ (C++17, Linux,
// glibc, x86-64 or any target with ucontext), so that machines without a GPU can execute the
// real kernels.
//
// CONTRACT. The library writes one translation unit per batch of kernels:
//
//     #include "cuda_shim.h"
//     namespace rnn_v0 {
//     #define RNN_HALF            // only for f16 / bf16 variants (#undef it before the `}`:
//                                 // macros ignore namespaces)
//     <common.cuh> <filled kernel template, `extern "C" __global__` -> `__global__`>
//     }
//     extern "C" int rnn_emu_v0(const unsigned long long* words, unsigned long n_words,
//                               void* const* buffers, unsigned long n_buffers,
//                               const rnn_emu::LaunchDims* dims, char* err, unsigned long err_cap) {
//         return rnn_emu::launch(rnn_v0::kernel, words, n_words, buffers, n_buffers, dims, err, err_cap);
//     }
//     namespace rnn_v1 { ... } ...
//
// built with `g++ -std=c++17 -O1 -fno-strict-aliasing -fPIC -shared -pthread -I <this dir>`.
// Load the result with dlopen(RTLD_LOCAL) (libloading's default): kernel namespaces repeat
// between batches (rnn_v0 in every file), so RTLD_GLOBAL could bind one file's calls to
// another's functions. Everything this header defines has internal linkage (unnamed
// namespaces, `static`), so files built from different versions of it never mix.
//
// rnn_emu::launch(kernel, ...) copies `n_words` words into the kernel's Info (zeroing the
// rest), casts `buffers[i]` to the kernel's i-th pointer parameter, runs every block of the
// grid (x fastest) on up to `os_threads` OS threads (0: the CPUs this process may run on;
// never more than there are blocks; the calling thread is one of them) and returns 0, or
// 1 for an invalid launch (buffer count, info size, dims), 2 for a fault found while running
// (deadlock, divergent barrier, bad warp collective, __trap), 3 for an internal failure (out
// of memory), with a NUL-terminated message in `err` (truncated to err_cap) naming the block
// and thread; when several blocks fail, the lowest block's error is reported. Host buffers
// must keep what CUDA allocations guarantee and kernels rely on (scatter_add's byte atomics
// touch the aligned 32-bit word holding the byte): 256-byte alignment, sizes rounded up to
// 256 bytes. Launches may run concurrently from several threads.
//
// WHAT IS EMULATED.
// - Execution: each OS thread takes whole blocks, one at a time. The threads of a block are
//   fibers on that OS thread (64 KiB stacks, switched by a few instructions on x86-64, by
//   ucontext elsewhere); each runs until it exits or waits at __syncthreads / a warp
//   collective, so a block runs as one valid interleaving, deterministically. A thread that
//   exits hands its fiber to the next thread, so barrier-free kernels use one fiber per
//   block. blockIdx, threadIdx, blockDim, gridDim, warpSize; lanes are consecutive linear
//   thread indices (x fastest), 32 per warp.
// - __syncthreads (and _count / _and / _or): a barrier of all threads of the block. A barrier
//   that cannot complete (a thread exited, or waits in a warp collective) is reported.
// - Warp collectives (__shfl*_sync, __ballot / __any / __all_sync, __syncwarp,
//   __reduce_*_sync, __match_*_sync) are a rendezvous of every existing lane named in the
//   mask: each lane deposits its value and waits; the last to arrive computes every lane's
//   result before any lane goes on, so no value is overwritten before all have read it.
//   Reported as errors: a named lane that exited or waits elsewhere, lanes disagreeing on
//   the operation, a caller missing from its own mask, reading a lane that does not exist
//   (partial last warp) or is not in the mask, a width that is not a power of two <= 32.
// - __shared__: one instance per OS thread (`static thread_local`), hence per running block.
//   Dynamic shared memory: `extern __shared__ T a[];` does not compile here; write
//   RNN_DYNAMIC_SHARED(T, a) (see below), which gets `shared_bytes` per OS thread.
// - Atomics (GCC __atomic builtins, relaxed like CUDA's; fences are full fences), correct
//   across OS threads; 16-bit float atomicAdd adds in float and rounds once, through a
//   compare-exchange on the element's own 16 bits.
// - __half / __nv_bfloat16 with every conversion rounded exactly once to nearest even (also
//   from double and 64-bit integers), subnormals, overflow to inf, NaN -> 0x7fff, and the
//   arithmetic that cuda_fp16.h / cuda_bf16.h define (computed in float, rounded once: exact).
// - Math names with CUDA's (NVRTC's) overload set: float arguments compute in float
//   (exp(float) is expf), fmax(float, int) is the float fmax, CUDA's integer min / max.
//   __CUDA_ARCH__ is 900 (sm_90); RNN_EMU is defined. __nanosleep lets the block's other
//   threads run; __trap fails the launch; assert is the C one (it aborts the process).
//
// - Scheduling: a warp runs alone from one __syncthreads to the next (the lanes a warp
//   collective releases run before other warps'); after a barrier the warps start in
//   ascending order or descending, alternating by barrier and by block. So a missing
//   __syncthreads between one warp's shared-memory writes and another's reads (or the reverse)
//   shows in the results of a block where the reader (or the overwriter) runs first.
//
// WHAT IT CANNOT SEE. Data races and the memory model (unsynchronized accesses happen in a
// fixed order, so a missing __syncwarp / fence, or a race inside a warp, usually goes unnoticed; lanes
// never run in lockstep, so implicit warp-synchronous code is not modelled, and
// __activemask() returns the lanes that have not exited, not those of a divergent branch);
// which call site a barrier is reached from; coalescing, bank conflicts, timing, occupancy,
// register, stack and shared memory limits; tensor-core instructions other than those of
// shim_mma.h (the functions of rnn-kernels' mma.cuh), inline PTX (asm), cooperative groups, textures,
// dynamic parallelism; spinning on another block (there is no forward-progress guarantee
// between blocks here) or on another thread of the block without __nanosleep.
// Numerics that differ: CUDA's math library and fast intrinsics (__expf...) are replaced by
// glibc's functions (last-ulp differences); NVRTC contracts a*b+c into fma by default, g++
// on x86-64 does not (on AArch64 it may, at other places); atom.add.f32 on global memory
// flushes subnormals to zero on the GPU, not here; float -> integer conversions outside the
// target's range are UB in C++ (the GPU saturates, x86 gives INT_MIN unless folded).
// Out-of-bounds accesses are plain host memory errors (build with -fsanitize=address).
//
// LAYOUT. This file is the only one to include; it includes every system header first (so
// that the macros of the parts, e.g. __expf, reach no system header), then its parts, in
// this order (each may use those before it):
//   shim_types.h    keywords, vector types, dim3, threadIdx / blockIdx / blockDim / gridDim
//   shim_half.h     __half / __nv_bfloat16: exact conversions, arithmetic, pairs
//   shim_math.h     math overloads, CUDA-only functions, intrinsics, bit casts
//   shim_atomics.h  atomics and fences
//   shim_fibers.h   fiber stacks, context switches, the block scheduler (rnn_emu::Worker)
//   shim_launch.h   rnn_emu::launch: the grid on OS threads; dynamic shared memory
//   shim_sync.h     __syncthreads and the warp collectives
//   shim_mma.h      mma.cuh's tensor-core primitives (mma.m16n8k16, ldmatrix) on PTX's layouts
// cuda_fp16.h and cuda_bf16.h are empty stubs (kernels include them inside a namespace).

#ifndef RNN_EMU_CUDA_SHIM_H
#define RNN_EMU_CUDA_SHIM_H

#include <cassert>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <type_traits>
#include <utility>

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define RNN_EMU 1
#define __CUDA_ARCH__ 900

#include "shim_types.h"
#include "shim_half.h"
#include "shim_math.h"
#include "shim_atomics.h"
#include "shim_fibers.h"
#include "shim_launch.h"
#include "shim_sync.h"
#include "shim_mma.h"

#endif // RNN_EMU_CUDA_SHIM_H
