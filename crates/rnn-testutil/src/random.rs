//! Random inputs from a local, seeded generator (never the global one, which `manual_seed`
//! tests and Dropout own), drawn in f64 on the host so that every device and dtype sees the
//! same values up to rounding.

use rand::rngs::StdRng;
use rand::SeedableRng;
use rnn_core::{DType, Device, Result, Tensor};

/// A generator seeded with `seed`.
pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// An f64 CPU tensor uniform in [lo, hi) from `rng(seed)`.
pub fn uniform(seed: u64, shape: &[usize], lo: f64, hi: f64) -> Result<Tensor> {
    Tensor::rand_with(&mut rng(seed), lo, hi, shape, DType::F64, Device::Cpu)
}

/// An f64 CPU tensor uniform in [-1, 1) from `rng(seed)`: the inputs of reference
/// computations and finite-difference checks.
pub fn rand64(seed: u64, shape: &[usize]) -> Result<Tensor> {
    uniform(seed, shape, -1.0, 1.0)
}

/// `rand64(seed, shape)` rounded to `dtype` and moved to `device`.
pub fn random(seed: u64, shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
    rand64(seed, shape)?.to_dtype(dtype)?.to_device(device)
}

/// `t` in `dtype` on `device` (a copy only where either differs).
pub fn to(t: &Tensor, dtype: DType, device: Device) -> Result<Tensor> {
    t.to_dtype(dtype)?.to_device(device)
}

/// `t` on `like`'s device and, when `t` is a float tensor, in `like`'s dtype: what a closure
/// given inputs in some dtype on some device does to the extra tensors it captured (targets,
/// masks, ids), so that it runs as it is on every device and dtype.
pub fn like(t: &Tensor, like: &Tensor) -> Result<Tensor> {
    let dtype = if t.dtype().is_float() { like.dtype() } else { t.dtype() };
    to(t, dtype, like.device())
}

/// Serializes the test bodies of one test binary that seed rnn-core's global generator and
/// draw from it (`manual_seed`, then `Tensor::rand` / `randn` or Dropout): hold the guard for
/// the whole body, so that the arms of `test_device!` (which run in parallel) cannot draw
/// between another arm's `manual_seed` and the draw it is meant to fix.
pub fn lock_global_rng() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
