//! Costs of the execution engine rather than of single kernels, measured the same way on
//! every device (`rnn bench gpu` runs them on the GPU and the CPU side by side; `rnn bench
//! train` runs the optimizer step on its device):
//!
//! - how long the host takes to *queue* tiny ops, apart from how long they take to finish;
//! - one training step of the MLP 784-512-256-10 (batch 128, cross entropy, Adam);
//! - one AdamW step over many f32 parameters, which must move 28 bytes per parameter (read
//!   p, g, m, v: 16; write p, m, v: 12), against a plain copy of the same bytes.

use std::time::Instant;

use rnn::nn::optim::{AdamConfig, AdamW, Optimizer};
use rnn::nn::{Linear, Module, VarBuilder};
use rnn::{DType, Device, Epilogue, GradStore, Tensor};

use crate::timing::{median, time_call, TimingConfig};
use crate::CliResult;

/// Bytes an Adam / AdamW step moves per f32 parameter.
pub const ADAM_BYTES_PER_PARAM: usize = 28;

/// Median seconds per call, split into the host's share and the whole.
#[derive(Clone, Copy, Debug)]
pub struct QueuedTime {
    /// Time until the calls returned (their work queued, not necessarily done).
    pub enqueue: f64,
    /// Time until the device finished them (one synchronize after the last call).
    pub total: f64,
}

/// Times `calls` calls of `f` per sample: the enqueue time is read before waiting for the
/// device, the total after one synchronize. The device is idle when each sample starts.
/// Warm-up, minimum time and minimum samples as `time_call`; medians, divided by `calls`.
pub fn time_queued(
    timing: TimingConfig,
    device: Device,
    calls: usize,
    mut f: impl FnMut() -> rnn::Result<()>,
) -> rnn::Result<QueuedTime> {
    let mut sample = || -> rnn::Result<(f64, f64)> {
        device.synchronize()?;
        let start = Instant::now();
        (0..calls).try_for_each(|_| f())?;
        let enqueue = start.elapsed().as_secs_f64();
        device.synchronize()?;
        Ok((enqueue, start.elapsed().as_secs_f64()))
    };
    for _ in 0..timing.warmup_calls {
        sample()?;
    }
    let (mut enqueue, mut total) = (Vec::new(), Vec::new());
    let start = Instant::now();
    while total.len() < timing.min_calls || start.elapsed().as_secs_f64() < timing.min_seconds {
        let (e, t) = sample()?;
        enqueue.push(e);
        total.push(t);
    }
    let per_call = |values: &mut Vec<f64>| median(values) / calls as f64;
    Ok(QueuedTime { enqueue: per_call(&mut enqueue), total: per_call(&mut total) })
}

/// Tiny ops per sample of the op-overhead measurement.
pub const TINY_OPS: usize = 500;

/// `a + b` on two 16-element f32 tensors, `TINY_OPS` times per sample.
pub fn tiny_add(timing: TimingConfig, device: Device) -> rnn::Result<QueuedTime> {
    let a = Tensor::randn(0.0, 1.0, 16, DType::F32, Device::Cpu)?.to_device(device)?;
    let b = Tensor::randn(0.0, 1.0, 16, DType::F32, Device::Cpu)?.to_device(device)?;
    time_queued(timing, device, TINY_OPS, || a.add(&b).map(drop))
}

pub const MLP_BATCH: usize = 128;
pub const MLP_WIDTHS: [usize; 4] = [784, 512, 256, 10];

/// The MLP of `rnn train` (784-512-256-10, ReLU, fused Linear where the device has it) with
/// Adam(1e-3) and one fixed batch.
pub struct MlpStep {
    layers: Vec<Linear>,
    optimizer: Box<dyn Optimizer>,
    x: Tensor,
    targets: Tensor,
}

impl MlpStep {
    pub fn new(device: Device) -> rnn::Result<MlpStep> {
        let mut vb = VarBuilder::new(device, DType::F32, 3);
        let mut layers = Vec::new();
        for (i, w) in MLP_WIDTHS.windows(2).enumerate() {
            let hidden = i + 2 < MLP_WIDTHS.len();
            let layer = Linear::new(w[0], w[1], &mut vb)?;
            layers.push(if hidden { layer.with_activation(Epilogue::Relu) } else { layer });
        }
        let params = layers.iter().flat_map(|l| l.parameters()).collect();
        let optimizer = rnn::OptimizerConfig::adam(1e-3).build(params)?;
        let x = Tensor::rand(0.0, 1.0, (MLP_BATCH, MLP_WIDTHS[0]), DType::F32, Device::Cpu)?.to_device(device)?;
        let classes = MLP_WIDTHS[3];
        let ids: Vec<u32> = (0..MLP_BATCH).map(|i| (i * 7 % classes) as u32).collect();
        let targets = Tensor::from_vec(ids, MLP_BATCH, device)?;
        Ok(MlpStep { layers, optimizer, x, targets })
    }

    /// Forward, cross-entropy loss, backward and the Adam update; nothing is read back.
    pub fn step(&mut self) -> rnn::Result<()> {
        let mut h = self.x.clone();
        for layer in &self.layers {
            h = layer.forward(&h)?;
        }
        let loss = rnn::nn::cross_entropy(&h, &self.targets)?;
        self.optimizer.step(&loss.backward()?)
    }
}

/// The MLP step's enqueue and total time per step.
pub fn mlp_step(timing: TimingConfig, device: Device) -> rnn::Result<QueuedTime> {
    let mut mlp = MlpStep::new(device)?;
    time_queued(timing, device, 1, || mlp.step())
}

/// Device time of one MLP step where the device has its own clock (CUDA events around the
/// step: the GPU's time from the step's first queued op to its last, idle gaps included);
/// `None` elsewhere (on wgpu `mlp_step_kernel_seconds` sums the kernels' own times).
pub fn mlp_step_device_seconds(timing: TimingConfig, device: Device) -> rnn::Result<Option<f64>> {
    let mut profiler = rnn::gpu::GpuProfiler::new(device);
    if !profiler.uses_device_events() {
        return Ok(None);
    }
    let mut mlp = MlpStep::new(device)?;
    (0..timing.warmup_calls).try_for_each(|_| mlp.step())?;
    let mut times = Vec::new();
    for _ in 0..timing.min_calls.max(5) {
        profiler.start("step")?;
        mlp.step()?;
        // Only the time is read here; the memory and device attributed to the event are unused.
        times.push(profiler.end("step", 0, 0)?.as_secs_f64());
    }
    Ok(Some(median(&mut times)))
}

/// The summed device time of one MLP step's kernels on wgpu device `ordinal` (timestamp
/// queries, `rnn::wgpu::set_kernel_timing`), averaged over the timed steps; `None` where the
/// adapter has no timestamp queries.
#[cfg(feature = "wgpu")]
pub fn mlp_step_kernel_seconds(timing: TimingConfig, ordinal: usize) -> rnn::Result<Option<f64>> {
    let device = Device::Wgpu(ordinal);
    let mut mlp = MlpStep::new(device)?;
    (0..timing.warmup_calls).try_for_each(|_| mlp.step())?;
    device.synchronize()?;
    if rnn::wgpu::set_kernel_timing(ordinal, true).is_err() {
        return Ok(None);
    }
    let steps = timing.min_calls.max(5);
    let run = (0..steps).try_for_each(|_| mlp.step()).and_then(|()| device.synchronize());
    let total = run.and_then(|()| rnn::wgpu::kernel_time(ordinal));
    rnn::wgpu::set_kernel_timing(ordinal, false)?;
    Ok(Some(total?.as_secs_f64() / steps as f64))
}

/// Median seconds of one AdamW step (PyTorch's defaults, lr 1e-3) over `n` f32 parameters
/// on `device`, waiting for the device after each.
pub fn adamw_step_seconds(timing: TimingConfig, device: Device, n: usize) -> CliResult<f64> {
    let p = Tensor::randn(0.0, 1.0, n, DType::F32, Device::Cpu)?.to_device(device)?;
    let g = Tensor::randn(0.0, 1e-2, n, DType::F32, Device::Cpu)?.to_device(device)?;
    let mut optimizer = AdamW::new(vec![p.clone()], AdamConfig { lr: 1e-3, ..AdamConfig::adamw() })?;
    let mut grads = GradStore::new();
    grads.insert(&p, g);
    let m = time_call(timing, || {
        optimizer.step(&grads)?;
        device.synchronize()
    })?;
    Ok(m.median_seconds)
}

/// Median seconds of copying `bytes` bytes once: device-to-device buffer copies on a GPU, a
/// `memcpy` between two host buffers on the CPU (it reads and writes `bytes` each).
pub fn copy_seconds(timing: TimingConfig, device: Device, bytes: usize) -> CliResult<f64> {
    if !device.is_cpu() {
        // In pieces of at most 64 MiB: some adapters cap a buffer at 128 MiB (lavapipe).
        const PIECE: usize = 64 << 20;
        let mut seconds = 0.0;
        for start in (0..bytes).step_by(PIECE) {
            let piece = (bytes - start).min(PIECE) as u64;
            seconds += rnn::gpu_memory::time_buffer_copy(device, piece, timing.min_calls.max(9))?;
        }
        return Ok(seconds);
    }
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    let m = time_call(timing, || -> rnn::Result<()> {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        Ok(())
    })?;
    Ok(m.median_seconds)
}
