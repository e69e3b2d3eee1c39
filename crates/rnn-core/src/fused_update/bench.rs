//! How close the CPU's fused Adam step comes to the memory bandwidth: the time of one step
//! over `n` f32 parameters against a parallel copy moving the same bytes. Adam reads p, g,
//! m, v and writes p, m, v: 28 bytes per parameter; the copy reads 14 and writes 14.

use std::time::Instant;

use rayon::prelude::*;

use super::{step, AdamHyper, ParamUpdate, UpdateRule};
use crate::{DType, Device, Error, Result, Tensor};

/// The measured times (the best of the runs) and the bandwidths they give.
#[derive(Clone, Copy, Debug)]
pub struct AdamBandwidth {
    pub params: usize,
    /// Seconds of one fused Adam step.
    pub adam_s: f64,
    /// Seconds of one copy of `14 * params` bytes.
    pub copy_s: f64,
}

impl AdamBandwidth {
    /// Bytes Adam moves per parameter.
    pub const BYTES_PER_PARAM: usize = 28;

    /// GB/s of the Adam step (28 bytes per parameter).
    pub fn adam_gbps(&self) -> f64 {
        (self.params * Self::BYTES_PER_PARAM) as f64 / self.adam_s / 1e9
    }

    /// GB/s of the copy (bytes read plus bytes written).
    pub fn copy_gbps(&self) -> f64 {
        (self.params * Self::BYTES_PER_PARAM) as f64 / self.copy_s / 1e9
    }

    /// Adam's bandwidth as a fraction of the copy's.
    pub fn ratio(&self) -> f64 {
        self.copy_s / self.adam_s
    }
}

/// Runs `runs` fused Adam steps over `params` f32 parameters and `runs` copies of the same
/// traffic on the CPU (same thread pool), keeping the fastest of each.
pub fn cpu_adam_bandwidth(params: usize, runs: usize) -> Result<AdamBandwidth> {
    if runs == 0 {
        return Err(Error::invalid("cpu_adam_bandwidth", "runs must be at least 1"));
    }
    let tensor = |v: f64| Tensor::full(v, params, DType::F32, Device::Cpu);
    let (p, g, m, v) = (tensor(0.5)?, tensor(0.01)?, tensor(0.0)?, tensor(0.0)?);
    let update = ParamUpdate { param: &p, grad: &g, states: [Some(&m), Some(&v), None] };
    let mut adam_s = f64::INFINITY;
    for run in 1..=runs {
        let hyper = AdamHyper {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            decoupled: false,
            amsgrad: false,
            step: run as u64,
        };
        let start = Instant::now();
        step(&UpdateRule::Adam(hyper), &[update])?;
        adam_s = adam_s.min(start.elapsed().as_secs_f64());
    }
    // 14 bytes per parameter: 3.5 f32.
    let len = params * 7 / 2;
    let src = vec![1.0f32; len];
    let mut dst = vec![0.0f32; len];
    let chunk = len.div_ceil(rayon::current_num_threads().max(1) * 4).max(1 << 16);
    let mut copy_s = f64::INFINITY;
    for _ in 0..runs {
        let start = Instant::now();
        dst.par_chunks_mut(chunk).zip(src.par_chunks(chunk)).for_each(|(d, s)| d.copy_from_slice(s));
        copy_s = copy_s.min(start.elapsed().as_secs_f64());
    }
    std::hint::black_box(&dst);
    Ok(AdamBandwidth { params, adam_s, copy_s })
}
