//! Random tensors from a seedable generator. `manual_seed` makes every later `rand` /
//! `randn` call reproducible, like `torch.manual_seed`; `*_with` take your own generator.

use std::sync::{Mutex, OnceLock};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal, Uniform};

use crate::{DType, Device, Error, Result, Shape, Tensor};

fn global_rng() -> &'static Mutex<StdRng> {
    static RNG: OnceLock<Mutex<StdRng>> = OnceLock::new();
    RNG.get_or_init(|| Mutex::new(StdRng::from_os_rng()))
}

/// Reseeds the generator behind `Tensor::rand` and `Tensor::randn`.
pub fn manual_seed(seed: u64) {
    *global_rng().lock().unwrap_or_else(|e| e.into_inner()) = StdRng::seed_from_u64(seed);
}

fn sample(
    dist: impl Distribution<f64>,
    rng: &mut impl Rng,
    shape: Shape,
    dtype: DType,
    device: Device,
) -> Result<Tensor> {
    if !dtype.is_float() {
        return Err(Error::UnsupportedDType { op: "rand", dtype, hint: ": random tensors are float" });
    }
    let n = shape.checked_elem_count("rand")?;
    let mut values = crate::error::try_vec(n)?;
    values.extend((0..n).map(|_| dist.sample(rng)));
    Tensor::from_vec(values, shape, Device::Cpu)?.to_dtype(dtype)?.to_device(device)
}

impl Tensor {
    /// Uniform in `[lo, hi)`.
    pub fn rand(lo: f64, hi: f64, shape: impl Into<Shape>, dtype: DType, device: Device) -> Result<Tensor> {
        Self::rand_with(&mut *global_rng().lock().unwrap_or_else(|e| e.into_inner()), lo, hi, shape, dtype, device)
    }

    /// Normal with the given mean and standard deviation.
    pub fn randn(mean: f64, std: f64, shape: impl Into<Shape>, dtype: DType, device: Device) -> Result<Tensor> {
        Self::randn_with(&mut *global_rng().lock().unwrap_or_else(|e| e.into_inner()), mean, std, shape, dtype, device)
    }

    pub fn rand_with(
        rng: &mut impl Rng,
        lo: f64,
        hi: f64,
        shape: impl Into<Shape>,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        if lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less) || !lo.is_finite() || !hi.is_finite() {
            return Err(Error::invalid("rand", format!("bad range [{lo}, {hi})")));
        }
        let dist = Uniform::new(lo, hi).map_err(|e| Error::invalid("rand", e.to_string()))?;
        sample(dist, rng, shape.into(), dtype, device)
    }

    pub fn randn_with(
        rng: &mut impl Rng,
        mean: f64,
        std: f64,
        shape: impl Into<Shape>,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        // rand_distr accepts a negative std (and any mean); PyTorch rejects them, and so do we.
        if !std.is_finite() || std < 0.0 || !mean.is_finite() {
            return Err(Error::invalid(
                "randn",
                format!("mean {mean}, std {std}: the std must be finite and >= 0, the mean finite"),
            ));
        }
        let dist =
            Normal::new(mean, std).map_err(|e| Error::invalid("randn", format!("mean {mean}, std {std}: {e}")))?;
        sample(dist, rng, shape.into(), dtype, device)
    }
}
