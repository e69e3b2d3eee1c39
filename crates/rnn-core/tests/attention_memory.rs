//! Fused attention never holds the `N x N` scores: a counting global allocator (live and
//! peak heap bytes) shows that the extra memory of the forward, and of forward + backward,
//! at N = 16384 (B = H = 1, D = 64, f32, CPU) grows as O(N·D), far below the 1 GiB one
//! `N x N` f32 matrix takes. Its own test binary, so no other test allocates meanwhile.
//!
//! Causal, so that the kernels skip half the tiles and the test stays a few seconds long in
//! the (optimized) test profile; the memory bound is the same with or without the mask.
//! Two more tests bound the forward's scratch at short sequences (N = 64, the GPT training
//! shape, and N = 256).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

use rnn_core::{scaled_dot_product_attention, AttentionMask, DType, Device, Result, Tensor};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: defers to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
            PEAK.fetch_max(now, Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
            PEAK.fetch_max(now, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Held by each test while it counts: the tests of this binary run one at a time.
static COUNTING: Mutex<()> = Mutex::new(());

/// The peak of live heap bytes above those live before `f`, while `f` runs.
fn peak_extra<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let out = f();
    (out, PEAK.load(Relaxed) - base)
}

#[test]
fn attention_memory_is_linear_in_n() -> Result<()> {
    let _counting = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    const N: usize = 16384;
    const D: usize = 64;
    let rand = |seed| -> Result<Tensor> {
        Tensor::rand_with(&mut rnn_testutil::rng(seed), -1.0, 1.0, (1, 1, N, D), DType::F32, Device::Cpu)
    };
    let (q, k, v) = (rand(1)?, rand(2)?, rand(3)?);
    let mask = AttentionMask::causal();
    // Start the thread pool and the kernels' lazily initialized state outside the count.
    let small = q.narrow(2, 0, 256)?;
    scaled_dot_product_attention(&small, &small, &small, &mask, None)?;

    let one = N * D * 4; // bytes of one [N, D] f32 tensor
    let threads = rayon::current_num_threads();
    let scores = N * N * 4;
    let (o, fwd) = peak_extra(|| scaled_dot_product_attention(&q, &k, &v, &mask, None));
    drop(o?);
    eprintln!(
        "forward: peak extra {:.1} MiB = {:.2} x N·D·4 (N x N scores: {} MiB)",
        mib(fwd),
        fwd as f64 / one as f64,
        scores >> 20
    );
    // The output and per-thread tiles (no log-sum-exp: no gradient will be taken).
    assert!(fwd < 2 * one, "forward peak extra {fwd} bytes is not O(N·D)");

    let (q, k, v) = (q.requires_grad(), k.requires_grad(), v.requires_grad());
    let (grads, both) = peak_extra(|| -> Result<_> {
        let o = scaled_dot_product_attention(&q, &k, &v, &mask, None)?;
        o.sum_all()?.backward()
    });
    let grads = grads?;
    assert_eq!(grads.get(&q).map(|g| g.dims().to_vec()), Some(vec![1, 1, N, D]));
    eprintln!("forward + backward: peak extra {:.1} MiB = {:.2} x N·D·4", mib(both), both as f64 / one as f64);
    // o, dq, dk, dv, the row sums, and a private dq for every thread but one (one head: the
    // backward splits its keys over the threads). The seed gradient is one value broadcast
    // over o: the backward reads it as it is, without a [N, D] copy.
    let bound = (4 + threads - 1) * one + one / 2;
    assert!(both < bound, "forward + backward peak extra {both} bytes > {bound}");
    assert!(both < scores / 8);
    Ok(())
}

/// At the GPT training step's attention (B = 32, H = 4, N = 64, D = 32, causal), the
/// forward holds its output, the log-sum-exp when a gradient will be taken and, per thread,
/// scratch for one task of 64 query rows: their transposed queries, one score tile of 64
/// keys and three row vectors. Scratch sized for the longest task (4 blocks of 64 rows)
/// would take twice that.
#[test]
fn short_sequences_take_scratch_for_their_rows_only() -> Result<()> {
    forward_within_one_block_of_scratch((32, 4, 64, 32), false)?;
    forward_within_one_block_of_scratch((32, 4, 64, 32), true)
}

/// At N = 256 (B = 4, H = 8, D = 64) a head's keys and values stay in cache from one task to
/// the next, and the forward's tasks take one block of 64 query rows each, as at N = 64.
/// Tasks of four blocks would hold the transposed queries of 256 rows per thread: about
/// twice the scratch.
#[test]
fn heads_of_a_few_blocks_take_one_block_per_task() -> Result<()> {
    forward_within_one_block_of_scratch((4, 8, 256, 64), false)
}

/// The forward's peak extra heap bytes at shape `(b, h, n, d)`, causal, are at most its
/// output, its log-sum-exp (only `with_grad`: inputs that track gradients) and per thread
/// the scratch of a task of 64 query rows over key tiles of at most 128 keys, plus 4 KiB of
/// small change (the output tensor's handle and shape). Up to 128 tasks (both shapes here)
/// are listed on the stack: a list on the heap (56 bytes a task, 7 KiB) would not fit.
fn forward_within_one_block_of_scratch((b, h, n, d): (usize, usize, usize, usize), with_grad: bool) -> Result<()> {
    let _counting = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    let rand = |seed| -> Result<Tensor> {
        Tensor::rand_with(&mut rnn_testutil::rng(seed), -1.0, 1.0, (b, h, n, d), DType::F32, Device::Cpu)
    };
    let (mut q, k, v) = (rand(4)?, rand(5)?, rand(6)?);
    if with_grad {
        q = q.requires_grad();
    }
    let mask = AttentionMask::causal();
    scaled_dot_product_attention(&q, &k, &v, &mask, None)?;
    // Buffers that the host cache kept from the call before would serve this one uncounted.
    rnn_core::cpu_empty_cache();
    let (o, fwd) = peak_extra(|| scaled_dot_product_attention(&q, &k, &v, &mask, None));
    drop(o?);
    let (output, lse) = (b * h * n * d * 4, if with_grad { b * h * n * 4 } else { 0 });
    let (rows, keys) = (n.min(64), n.min(128));
    // Transposed queries (16 columns of skew), the score tile, the running max, sum and scale.
    let scratch = (d * (rows + 16) + keys * rows + 3 * rows) * 4;
    let bound = output + lse + rayon::current_num_threads() * scratch + 4096;
    eprintln!("forward at N = {n} (gradient: {with_grad}): peak extra {fwd} bytes, bound {bound}");
    assert!(fwd <= bound, "forward peak extra {fwd} bytes > {bound}");
    Ok(())
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1 << 20) as f64
}
