//! Running a stretch of CPU work on the thread pool's own workers, with the other workers
//! kept awake.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::autocast::AutocastGuard;
use crate::backprop::GradModeGuard;
use crate::cpu::parallel::mark_others_awake;

/// Runs `f` on a worker thread of the CPU thread pool (rayon's global pool) and returns its
/// value; in place when called from a worker already.
///
/// Why: a parallel CPU op called from a thread outside the pool queues its work, wakes a
/// worker and puts the caller to sleep until the work is done: two context switches per
/// op. A training step of a small model runs hundreds of ops, and on 2 cores those
/// hand-offs cost about 5% of a GPT step (`bench/results/`). Called from a worker, an op
/// splits its work with the other workers directly and the caller works on its own share.
///
/// While `f` runs, the pool's other workers keep looking for work instead of going to sleep
/// between its ops, as OpenMP runtimes' threads spin before they sleep
/// (`RNN_CPU_WAIT=passive` turns this off): an op's other halves then start at once, without
/// a wake-up call and the sleeping thread's way back (slow in a VM), so ops split over the
/// threads from a smaller size (`cpu::parallel::AWAKE_PAR_WORK`). They stop when `f`
/// returns. Measured on 2 cores, the GPT step takes about 9% less time
/// (`bench/results/2026-11-30-gpt-cpu-2core-intel-r-xeon-r-processor-2-80ghz.md`). A worker
/// that has found no work for `RNN_CPU_SPIN_US` (100 µs) yields its core to the OS between
/// polls: two GPT trainings sharing 2 cores ran 1.8x faster each than with unlimited
/// spinning (`bench/results/2026-12-01-cpu-spin-limit-2core-amd-epyc.md`). The call
/// returns once every worker has taken up its loop job (which ends at once when `f` is
/// done), so a worker busy with another caller's long job holds the return up until then.
///
/// The caller's grad mode and autocast dtype hold inside `f`; random numbers come from the
/// one global generator, so results do not depend on the thread. Keep GPU work out of `f`
/// (a GPU backend batches its pending launches per thread), and anything that waits for
/// other threads (a collective of thread ranks): `f` holds a worker they may need.
pub fn on_cpu_workers<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        return f();
    }
    let (grad, cast) = (crate::grad_enabled(), crate::autocast_dtype());
    with_workers_awake(move |_| {
        let _grad = GradModeGuard::set(grad);
        let _cast = AutocastGuard::enter(cast);
        f()
    })
}

/// Whether `on_cpu_workers` keeps the other workers awake: unless `RNN_CPU_WAIT=passive`.
fn active_wait() -> bool {
    static ACTIVE: OnceLock<bool> = OnceLock::new();
    *ACTIVE.get_or_init(|| std::env::var("RNN_CPU_WAIT").map_or(true, |v| v != "passive"))
}

/// How long an awake worker that finds no work spins before it yields its core to the OS
/// between polls: `RNN_CPU_SPIN_US` microseconds (default 100).
fn spin_limit() -> Duration {
    static SPIN: OnceLock<Duration> = OnceLock::new();
    *SPIN.get_or_init(|| {
        let us = std::env::var("RNN_CPU_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
        Duration::from_micros(us)
    })
}

/// The state the awake workers share with the scope that started them.
#[derive(Default)]
struct Awake {
    /// Set when `f` has returned (or unwound): the workers leave their loops.
    done: AtomicBool,
    /// Workers in their loops now.
    looping: AtomicUsize,
}

/// Runs `f` in a rayon scope of the current pool, on its current thread, with every other
/// worker of the pool looking for work (`keep_looking`) until `f` returns.
fn with_workers_awake<R: Send>(f: impl FnOnce(&Arc<Awake>) -> R + Send) -> R {
    rayon::scope(move |scope| {
        let awake = Arc::new(Awake::default());
        let others_awake = active_wait() && rayon::current_num_threads() > 1;
        if others_awake {
            // One job per thread (a spawned job could be taken by a worker that is looping
            // already, which would leave another asleep).
            let awake = awake.clone();
            scope.spawn_broadcast(move |_, _| keep_looking(&awake));
        }
        let _running = Running::start(&awake, others_awake);
        f(&awake)
    })
}

thread_local! {
    /// Whether this thread runs an `f` of `with_workers_awake` or a `keep_looking` loop.
    static BUSY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks this thread busy while `f` runs; when dropped (however `f` ends: a panic must not
/// leave the workers looping, and the scope waits for them before it passes it on), sets
/// `done` and restores the mark.
struct Running<'a> {
    awake: &'a Awake,
    was_busy: bool,
    /// This thread's mark for `cpu::parallel::par_work` before `f`.
    was_others_awake: bool,
}

impl<'a> Running<'a> {
    /// `others_awake`: whether the other workers loop while `f` runs, so that smaller jobs
    /// are worth splitting over them (`cpu::parallel::par_work`).
    fn start(awake: &'a Awake, others_awake: bool) -> Self {
        let was_busy = BUSY.with(|b| b.replace(true));
        Running { awake, was_busy, was_others_awake: mark_others_awake(others_awake) }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.awake.done.store(true, Ordering::Release);
        BUSY.with(|b| b.set(self.was_busy));
        mark_others_awake(self.was_others_awake);
    }
}

/// Runs the pool's pending jobs as they come until `awake.done`. Returns at once on a busy
/// thread: one that runs an `f` (it picks this job up when it waits inside its `f`) or a
/// loop already. Looping there would hold that `f` or loop up until this `f` is done, and
/// two threads doing that for each other's `f` would wait forever.
fn keep_looking(awake: &Awake) {
    if BUSY.with(|b| b.replace(true)) {
        return;
    }
    awake.looping.fetch_add(1, Ordering::AcqRel);
    let spin = spin_limit();
    let mut idle_since = None;
    while !awake.done.load(Ordering::Acquire) {
        if rayon::yield_now() == Some(rayon::Yield::Executed) {
            idle_since = None;
            continue;
        }
        // Found nothing: spin at first, then offer the core to the OS between polls, so
        // that on a loaded machine a long serial stretch of `f` does not keep this worker
        // on a core another process needs (as OpenMP's spin count). Idle, the yield
        // returns at once.
        let since = *idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() < spin {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    awake.looping.fetch_sub(1, Ordering::AcqRel);
    BUSY.with(|b| b.set(false));
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    use rayon::prelude::*;

    use super::{on_cpu_workers, with_workers_awake};
    use crate::{autocast, autocast_dtype, grad_enabled, no_grad, DType, Device, Result, Tensor};

    #[test]
    fn runs_on_a_worker_with_the_callers_modes() -> Result<()> {
        let state = || (rayon::current_thread_index().is_some(), grad_enabled(), autocast_dtype());
        let inside = no_grad(|| autocast(DType::BF16, || on_cpu_workers(state)))?;
        assert_eq!(inside, (true, false, Some(DType::BF16)));
        // The worker's own modes are back to the defaults afterwards.
        for _ in 0..8 {
            assert_eq!(on_cpu_workers(state), (true, true, None));
        }
        // Nested: in place, on the same worker.
        let (outer, inner) =
            on_cpu_workers(|| (rayon::current_thread_index(), on_cpu_workers(rayon::current_thread_index)));
        assert_eq!(outer, inner);
        // The carried autocast region casts the products inside it.
        let a = Tensor::ones((2, 2), DType::F32, Device::Cpu)?;
        let product = autocast(DType::BF16, || on_cpu_workers(|| a.matmul(&a)))??;
        assert_eq!(product.dtype(), DType::BF16);
        Ok(())
    }

    /// Waits up to 10 s for `ok`.
    fn eventually(ok: impl Fn() -> bool) -> bool {
        let start = Instant::now();
        while !ok() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        ok()
    }

    /// `f`'s value, or a failure when it has not returned within 60 s (a loop that never
    /// ends would otherwise hang the test).
    fn finishes<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(f()));
        rx.recv_timeout(Duration::from_secs(60)).expect("did not finish within 60 s")
    }

    #[test]
    fn the_other_workers_loop_while_f_runs_and_stop_after() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        let (awake, sum) = finishes(move || {
            pool.install(|| {
                with_workers_awake(|awake| {
                    // Both other workers of the 3 pick up their loops (when RNN_CPU_WAIT is not
                    // `passive`), and parallel work inside still runs to the right result.
                    let expected = if super::active_wait() { 2 } else { 0 };
                    assert!(eventually(|| awake.looping.load(Ordering::Acquire) == expected));
                    (awake.clone(), (0..100_000u64).into_par_iter().sum::<u64>())
                })
            })
        });
        assert_eq!(sum, 100_000 * 99_999 / 2);
        assert_eq!(awake.looping.load(Ordering::Acquire), 0, "the scope returns after the loops end");
    }

    #[test]
    fn smaller_jobs_split_while_the_other_workers_loop() {
        use crate::cpu::parallel::{par_fill, par_work, AWAKE_PAR_WORK, PAR_WORK};
        // The chunks `par_fill` makes of `AWAKE_PAR_WORK` adds, and whether it filled them right.
        let chunks = || {
            let calls = AtomicUsize::new(0);
            let mut v = vec![0u32; AWAKE_PAR_WORK];
            par_fill(&mut v, 1, |c, first| {
                calls.fetch_add(1, Ordering::Relaxed);
                c.iter_mut().enumerate().for_each(|(i, x)| *x = (first + i) as u32);
            });
            assert!(v.iter().enumerate().all(|(i, &x)| x == i as u32));
            calls.into_inner()
        };
        let in_pool = move |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            finishes(move || {
                pool.install(|| {
                    let outside = (par_work(), chunks());
                    let inside = with_workers_awake(|_| (par_work(), chunks()));
                    (outside, inside, par_work())
                })
            })
        };
        let awake = if super::active_wait() { (AWAKE_PAR_WORK, 4) } else { (PAR_WORK, 1) };
        assert_eq!(in_pool(2), ((PAR_WORK, 1), awake, PAR_WORK), "(outside, inside, after)");
        // One thread: nobody to hand work to.
        assert_eq!(in_pool(1), ((PAR_WORK, 1), (PAR_WORK, 1), PAR_WORK));
    }

    #[test]
    fn a_panic_in_f_ends_the_loops_and_passes_on() {
        let pool = std::sync::Arc::new(rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap());
        let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
        let (p, s) = (pool.clone(), seen.clone());
        let run = finishes(move || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                p.install(|| {
                    with_workers_awake(|awake| {
                        *s.lock().unwrap() = Some(awake.clone());
                        let expected = if super::active_wait() { 1 } else { 0 };
                        assert!(eventually(|| awake.looping.load(Ordering::Acquire) == expected));
                        panic!("inside the step")
                    })
                })
            }))
            .is_err()
        });
        assert!(run, "the panic inside f passes on");
        let awake = seen.lock().unwrap().take().unwrap();
        assert_eq!(awake.looping.load(Ordering::Acquire), 0);
        assert_eq!(pool.install(|| (0..1000u32).into_par_iter().sum::<u32>()), 499_500);
    }

    #[test]
    fn callers_on_several_threads_all_finish() {
        // Each caller's step may run inside another's awake loop; none may wait for another.
        let (tx, rx) = std::sync::mpsc::channel();
        for t in 0..4u64 {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let sums: Vec<u64> =
                    (0..200).map(|_| on_cpu_workers(|| (0..20_000u64).into_par_iter().map(|i| i * t).sum())).collect();
                tx.send(sums.iter().all(|&s| s == t * 20_000 * 19_999 / 2)).unwrap();
            });
        }
        for _ in 0..4 {
            let ok = rx
                .recv_timeout(Duration::from_secs(120))
                .expect("a caller of on_cpu_workers did not finish within 120 s");
            assert!(ok, "a parallel sum inside on_cpu_workers was wrong");
        }
    }
}
