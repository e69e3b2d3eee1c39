//! Running a stretch of CPU work on the thread pool's own workers.

use crate::autocast::AutocastGuard;
use crate::backprop::GradModeGuard;

/// Runs `f` on a worker thread of the CPU thread pool (rayon's global pool) and returns its
/// value; in place when called from a worker already.
///
/// Why: a parallel CPU op called from a thread outside the pool queues its work, wakes a
/// worker and puts the caller to sleep until the work is done: two context switches per
/// op. A training step of a small model runs hundreds of ops, and on 2 cores those
/// hand-offs cost about 5% of a GPT step (`bench/results/`). Called from a worker, an op
/// splits its work with the other workers directly and the caller works on its own share.
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
    rayon::scope(move |_| {
        let _grad = GradModeGuard::set(grad);
        let _cast = AutocastGuard::enter(cast);
        f()
    })
}

#[cfg(test)]
mod tests {
    use super::on_cpu_workers;
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
}
