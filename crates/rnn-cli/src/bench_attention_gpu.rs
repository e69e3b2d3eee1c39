//! `rnn bench attention --device cuda:0` (or a wgpu device): fused scaled dot-product
//! attention on a GPU, forward and backward TFLOP/s at the sizes and with the record names of
//! its PyTorch twin, `bench/attention_gpu_bench.py` (torch's flash backend in bf16): B = 4,
//! H = 8, N in 1024 / 4096 / 16384, D in 64 / 128, causal and not.
//!
//! FLOPs as FlashAttention-2's paper counts them: the forward is `4 B H N² D`, halved by a
//! causal mask; the backward 2.5 forwards, timed as forward + backward minus forward (on
//! CUDA twice: the deterministic two-pass backward, and the one with atomic dq). Every
//! call ends with a device synchronize. CUDA runs bf16 (the goal's dtype); wgpu has no bf16
//! and runs f32.

use std::io::Write;

use rnn::{scaled_dot_product_attention, AttentionMask, DType, Device, NoGradGuard, Tensor};

use crate::bench_cpu::Record;
use crate::timing::{time_call, TimingConfig};
use crate::CliResult;

const BATCH: usize = 4;
const HEADS: usize = 8;

/// Sequence lengths, head sizes and timing of one run.
#[derive(Clone)]
pub struct GpuAttentionSizes {
    pub lengths: Vec<usize>,
    pub head_dims: &'static [usize],
    pub timing: TimingConfig,
}

impl GpuAttentionSizes {
    /// The goal's sizes, or with `quick` the twin's `--small` ones (N in 128 / 256).
    pub fn new(quick: bool) -> Self {
        let (lengths, timing) = match quick {
            true => (vec![128, 256], TimingConfig::QUICK),
            false => (vec![1024, 4096, 16384], TimingConfig::FULL),
        };
        GpuAttentionSizes { lengths, head_dims: &[64, 128], timing }
    }
}

/// The dtype the device runs the benchmark in.
fn bench_dtype(device: Device) -> DType {
    match device {
        Device::Cpu | Device::Wgpu(_) => DType::F32,
        _ => DType::BF16,
    }
}

/// Runs every size on `device`, printing a line per shape to `out`.
pub fn run(sizes: &GpuAttentionSizes, device: Device, out: &mut dyn Write) -> CliResult<Vec<Record>> {
    device.check_available()?;
    let dtype = bench_dtype(device);
    writeln!(
        out,
        "rnn {} attention benchmark ({device}, {dtype:?}, B={BATCH} H={HEADS}); twin: bench/attention_gpu_bench.py",
        env!("CARGO_PKG_VERSION")
    )?;
    let mut records = Vec::new();
    rnn::manual_seed(0);
    for &d in sizes.head_dims {
        for &n in &sizes.lengths {
            for causal in [false, true] {
                let times = measure([BATCH, HEADS, n, d], causal, dtype, device, sizes.timing)?;
                let flops = crate::bench_attention::forward_flops([BATCH, HEADS, n, d], causal);
                let (fwd_tf, bwd_tf) = (flops / times.fwd / 1e12, 2.5 * flops / times.bwd / 1e12);
                let tag = format!("n{n}_d{d}_{}", if causal { "causal" } else { "full" });
                write!(
                    out,
                    "{tag:24} fwd {:9.3} ms {fwd_tf:8.3} TFLOP/s   bwd {:9.3} ms {bwd_tf:8.3} TFLOP/s",
                    times.fwd * 1e3,
                    times.bwd * 1e3
                )?;
                let mut values = vec![("fwd", fwd_tf), ("bwd", bwd_tf)];
                if let Some(atomic) = times.bwd_atomic {
                    let tf = 2.5 * flops / atomic / 1e12;
                    write!(out, "   bwd atomic dq {:9.3} ms {tf:8.3} TFLOP/s", atomic * 1e3)?;
                    values.push(("bwd_atomic", tf));
                }
                writeln!(out)?;
                out.flush()?;
                for (pass, value) in values {
                    let name = format!("attention_{pass}_{tag}");
                    let threads = rayon::current_num_threads();
                    records.push(Record {
                        suite: "attention",
                        name,
                        metric: "TFLOP/s",
                        value,
                        higher_is_better: true,
                        threads,
                    });
                }
            }
        }
    }
    Ok(records)
}

/// Median seconds of one shape's passes.
struct Times {
    fwd: f64,
    /// The backward (forward + backward minus forward), deterministic two-pass on CUDA.
    bwd: f64,
    /// On CUDA, the backward that adds dq with atomics (`rnn::set_attention_atomic_dq`).
    bwd_atomic: Option<f64>,
}

fn measure(dims: [usize; 4], causal: bool, dtype: DType, device: Device, timing: TimingConfig) -> CliResult<Times> {
    let randn = || Tensor::randn(0.0, 1.0, &dims[..], DType::F32, Device::Cpu)?.to_dtype(dtype)?.to_device(device);
    let (q, k, v, grad) = (randn()?, randn()?, randn()?, randn()?);
    let mask = if causal { AttentionMask::causal() } else { AttentionMask::none() };
    let forward = || -> rnn::Result<()> {
        let _no_grad = NoGradGuard::new();
        scaled_dot_product_attention(&q, &k, &v, &mask, None)?;
        device.synchronize()
    };
    // The output's gradient is `grad`, as the twin's `out.backward(grad)`; rnn's backward
    // starts from a scalar, so one product and one sum over the output are timed with it.
    let both = || -> rnn::Result<()> {
        let (q, k, v) = (q.requires_grad(), k.requires_grad(), v.requires_grad());
        let out = scaled_dot_product_attention(&q, &k, &v, &mask, None)?;
        out.mul(&grad)?.sum_all()?.backward()?;
        device.synchronize()
    };
    let fwd = time_call(timing, forward)?.median_seconds;
    let backward = |atomic_dq: bool| -> CliResult<f64> {
        let before = rnn::attention_atomic_dq();
        rnn::set_attention_atomic_dq(atomic_dq);
        let total = time_call(timing, both);
        rnn::set_attention_atomic_dq(before);
        Ok((total?.median_seconds - fwd).max(1e-12))
    };
    let bwd = backward(false)?;
    let bwd_atomic = if matches!(device, Device::Cuda(_)) { Some(backward(true)?) } else { None };
    Ok(Times { fwd, bwd, bwd_atomic })
}
