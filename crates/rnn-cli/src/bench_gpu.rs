//! `rnn bench gpu`: a GPU device against its references, measured side by side in one run:
//! the engine's costs (tiny-op enqueue and end-to-end time, an MLP training step, an AdamW
//! step over 10M parameters; see `bench_engine`) against the CPU backend and a device copy,
//! matmul GFLOP/s against the CPU backend on the same machine, and elementwise, softmax and
//! sum GB/s against a plain device-to-device buffer copy of the same bytes, and a Linear
//! layer's fused forward (`Tensor::linear`) against the same matmul, add and ReLU run apart.
//! Every timed call waits for the device (except the enqueue times, which are read before
//! the wait), so submission overhead is included on both sides.

use std::io::Write;

use rnn::{DType, Device, NoGradGuard, Tensor};

use crate::bench_cpu::Record;
use crate::bench_engine::{self, ADAM_BYTES_PER_PARAM};
use crate::timing::{time_call, TimingConfig};
use crate::CliResult;

/// Problem sizes of one run.
#[derive(Clone, Copy, Debug)]
pub struct GpuSizes {
    pub matmul: &'static [usize],
    pub elems: usize,
    pub softmax: (usize, usize),
    /// Parameters of the AdamW step.
    pub adam_params: usize,
    pub timing: TimingConfig,
}

impl GpuSizes {
    /// The sizes of bench/gpu_bench.py (matmul up to 8192: meant for real GPUs).
    pub const FULL: GpuSizes = GpuSizes {
        matmul: &[1024, 2048, 4096, 8192],
        elems: 16 << 20,
        softmax: (16384, 1024),
        adam_params: 10_000_000,
        timing: TimingConfig::FULL,
    };
    /// Full memory-bound sizes with matmul up to 2048, for slow (software) adapters.
    pub const SMALL_MATMUL: GpuSizes = GpuSizes { matmul: &[256, 512, 1024, 2048], ..GpuSizes::FULL };
    /// Small enough for a software adapter (lavapipe) in a minute.
    /// (The AdamW step keeps its 10M parameters: it is the engine figure compared across builds.)
    pub const QUICK: GpuSizes = GpuSizes {
        matmul: &[128, 256, 512],
        elems: 1 << 20,
        softmax: (1024, 1024),
        adam_params: 10_000_000,
        timing: TimingConfig::QUICK,
    };
}

struct Bench<'a> {
    device: Device,
    timing: TimingConfig,
    records: Vec<Record>,
    out: &'a mut dyn Write,
}

impl Bench<'_> {
    /// Median seconds of `f` followed by a device synchronize.
    fn seconds(&self, device: Device, mut f: impl FnMut() -> rnn::Result<()>) -> CliResult<f64> {
        let m = time_call(self.timing, || {
            f()?;
            device.synchronize()
        })?;
        Ok(m.median_seconds)
    }

    fn push(&mut self, name: String, metric: &'static str, value: f64, higher_is_better: bool) {
        let threads = rayon::current_num_threads();
        self.records.push(Record { suite: "gpu", name, metric, value, higher_is_better, threads });
    }

    /// Records `value` (higher is better) and prints it with its reference and their ratio.
    fn report(&mut self, name: &str, metric: &'static str, value: f64, reference: (&str, f64)) -> CliResult<()> {
        self.report_either(name, metric, value, reference, true)
    }

    /// Records a time (lower is better) and prints it with its reference and their ratio.
    fn report_time(&mut self, name: &str, metric: &'static str, value: f64, reference: (&str, f64)) -> CliResult<()> {
        self.report_either(name, metric, value, reference, false)
    }

    fn report_either(
        &mut self,
        name: &str,
        metric: &'static str,
        value: f64,
        reference: (&str, f64),
        higher_is_better: bool,
    ) -> CliResult<()> {
        let ratio = value / reference.1;
        writeln!(
            self.out,
            "{name:<24} {value:>10.2} {metric:<8} {:<16} {:>10.2}  {ratio:>6.2}x",
            reference.0, reference.1
        )?;
        self.out.flush()?;
        self.push(name.to_string(), metric, value, higher_is_better);
        if reference.1.is_finite() {
            self.push(format!("{}:{name}", reference.0), metric, reference.1, higher_is_better);
        }
        Ok(())
    }
}

/// The matmul sizes of `--matmul-only`, those of bench/burn_matmul.
const TWIN_MATMUL_SIZES: [usize; 3] = [256, 512, 1024];

/// Runs the suite on `device`, printing a table as it goes.
pub fn run(sizes: GpuSizes, device: Device, out: &mut dyn Write) -> CliResult<Vec<Record>> {
    let mut bench = start(device, sizes.timing, out)?;
    // The training step records its graph; everything else runs without one.
    bench_mlp_step(&mut bench)?;
    let _no_grad = NoGradGuard::new();
    bench_op_overhead(&mut bench)?;
    bench_adamw(&mut bench, sizes.adam_params)?;
    bench_matmul(&mut bench, sizes.matmul)?;
    bench_linear(&mut bench, sizes.matmul[sizes.matmul.len() / 2])?;
    bench_memory_bound(&mut bench, sizes)?;
    Ok(bench.records)
}

/// Only the f32 matmul rows, at the sizes of bench/burn_matmul (`--matmul-only`).
pub fn run_matmul(timing: TimingConfig, device: Device, out: &mut dyn Write) -> CliResult<Vec<Record>> {
    let mut bench = start(device, timing, out)?;
    let _no_grad = NoGradGuard::new();
    bench_matmul(&mut bench, &TWIN_MATMUL_SIZES)?;
    Ok(bench.records)
}

/// Checks `device` and prints the table's header.
fn start(device: Device, timing: TimingConfig, out: &mut dyn Write) -> CliResult<Bench<'_>> {
    if device.is_cpu() {
        return Err(
            "rnn bench gpu needs a GPU device (see `rnn devices`; software adapters via --device wgpu:N)".into()
        );
    }
    device.check_available()?;
    rnn::manual_seed(0);
    let bench = Bench { device, timing, records: Vec::new(), out };
    writeln!(bench.out, "rnn {} GPU benchmark on {device} ({})", env!("CARGO_PKG_VERSION"), describe(device))?;
    writeln!(
        bench.out,
        "{:<24} {:>10} {:<8} {:<16} {:>10}  {:>7}",
        "name", "value", "metric", "reference", "value", "ratio"
    )?;
    Ok(bench)
}

fn describe(device: Device) -> String {
    match device {
        Device::Wgpu(i) => rnn::wgpu_adapters()
            .into_iter()
            .find(|a| a.ordinal == i)
            .map_or_else(String::new, |a| format!("{}, {}", a.name, a.backend)),
        _ => String::new(),
    }
}

fn randn(shape: impl Into<rnn::Shape>, device: Device) -> rnn::Result<Tensor> {
    Tensor::randn(0.0, 1.0, shape, DType::F32, Device::Cpu)?.to_device(device)
}

/// `a + b` on 16 elements, 500 times per sample: the host time to queue one op (read before
/// waiting) and its end-to-end time (one wait after the 500), against the CPU backend's
/// (lower is better; the ratio is GPU / CPU time).
fn bench_op_overhead(bench: &mut Bench) -> CliResult<()> {
    let gpu = bench_engine::tiny_add(bench.timing, bench.device)?;
    let cpu = bench_engine::tiny_add(bench.timing, Device::Cpu)?;
    bench.report_time("op_add16_enqueue", "us/op", gpu.enqueue * 1e6, ("cpu", cpu.enqueue * 1e6))?;
    bench.report_time("op_add16", "us/op", gpu.total * 1e6, ("cpu", cpu.total * 1e6))
}

/// One MLP training step (784-512-256-10, batch 128, cross entropy, Adam): end to end
/// against the CPU backend, the host's enqueue share, on wgpu the summed time of its
/// kernels (timestamp queries) and on CUDA the device's own time.
fn bench_mlp_step(bench: &mut Bench) -> CliResult<()> {
    let gpu = bench_engine::mlp_step(bench.timing, bench.device)?;
    let cpu = bench_engine::mlp_step(bench.timing, Device::Cpu)?;
    let name = format!("mlp_step_b{}", bench_engine::MLP_BATCH);
    bench.report_time(&name, "ms", gpu.total * 1e3, ("cpu", cpu.total * 1e3))?;
    bench.report_time(&format!("{name}_enqueue"), "ms", gpu.enqueue * 1e3, ("step total", gpu.total * 1e3))?;
    #[cfg(feature = "wgpu")]
    if let Device::Wgpu(ordinal) = bench.device {
        // The goal "a step takes at most 1.3x its kernels' time" is a ratio here >= 0.77.
        if let Some(kernels) = bench_engine::mlp_step_kernel_seconds(bench.timing, ordinal)? {
            bench.report_time(&format!("{name}_kernels"), "ms", kernels * 1e3, ("step total", gpu.total * 1e3))?;
        }
    }
    match bench_engine::mlp_step_device_seconds(bench.timing, bench.device)? {
        Some(device) => {
            bench.report_time(&format!("{name}_device"), "ms", device * 1e3, ("step total", gpu.total * 1e3))
        }
        None => {
            writeln!(
                bench.out,
                "{:<24} {:>10} (CUDA events only; wgpu: the _kernels row)",
                format!("{name}_device"),
                "n/a"
            )?;
            Ok(())
        }
    }
}

/// One AdamW step over `n` parameters in GB/s of the 28 bytes per parameter it moves,
/// against a device copy of the same bytes; and its time in ms.
fn bench_adamw(bench: &mut Bench, n: usize) -> CliResult<()> {
    let seconds = bench_engine::adamw_step_seconds(bench.timing, bench.device, n)?;
    let bytes = ADAM_BYTES_PER_PARAM * n;
    let copy = bench_engine::copy_seconds(bench.timing, bench.device, bytes / 2)?;
    let label = format!("adamw_{}M", n / 1_000_000);
    bench.report(&label, "GB/s", bytes as f64 / seconds / 1e9, ("device copy", bytes as f64 / copy / 1e9))?;
    bench.report_time(&format!("{label}_ms"), "ms", seconds * 1e3, ("device copy", copy * 1e3))
}

/// The matmul dtypes measured on `device`: f32 everywhere; on CUDA also TF32 (f32 through
/// tensor cores, `rnn::set_allow_tf32`) and bf16.
fn matmul_kinds(device: Device) -> Vec<(&'static str, DType, bool)> {
    let mut kinds = vec![("f32", DType::F32, false)];
    if matches!(device, Device::Cuda(_)) {
        kinds.extend([("tf32", DType::F32, true), ("bf16", DType::BF16, false)]);
    }
    kinds
}

/// The CPU reference is measured up to this size (larger ones take seconds per call there).
const CPU_REFERENCE_MAX: usize = 2048;

fn bench_matmul(bench: &mut Bench, sizes: &[usize]) -> CliResult<()> {
    for &n in sizes {
        for (label, dtype, tf32) in matmul_kinds(bench.device) {
            let (a, b) = (randn((n, n), Device::Cpu)?.to_dtype(dtype)?, randn((n, n), Device::Cpu)?.to_dtype(dtype)?);
            let (ga, gb) = (a.to_device(bench.device)?, b.to_device(bench.device)?);
            let flops = 2.0 * (n as f64).powi(3) / 1e9;
            set_tf32(tf32);
            let gpu = bench.seconds(bench.device, || ga.matmul(&gb).map(drop));
            set_tf32(false);
            let cpu = match n <= CPU_REFERENCE_MAX && dtype == DType::F32 && !tf32 {
                true => flops / bench.seconds(Device::Cpu, || a.matmul(&b).map(drop))?,
                false => f64::NAN,
            };
            bench.report(&format!("matmul_{label}_{n}"), "GFLOP/s", flops / gpu?, ("cpu", cpu))?;
        }
    }
    Ok(())
}

/// `relu(x @ wᵀ + b)` for square `n x n` operands in f32: one fused op (cuBLASLt epilogue
/// on CUDA) against a matmul, a broadcast add and a ReLU.
fn bench_linear(bench: &mut Bench, n: usize) -> CliResult<()> {
    let (x, w, b) = (randn((n, n), bench.device)?, randn((n, n), bench.device)?, randn(n, bench.device)?);
    let flops = 2.0 * (n as f64).powi(3) / 1e9;
    let fused = bench.seconds(bench.device, || x.linear(&w, Some(&b), rnn::Epilogue::Relu).map(drop))?;
    let apart = bench.seconds(bench.device, || x.matmul(&w.t()?)?.add(&b)?.relu().map(drop))?;
    bench.report(&format!("linear_relu_f32_{n}"), "GFLOP/s", flops / fused, ("unfused", flops / apart))
}

/// Whether CUDA f32 matmuls may use TF32 (read by the backend at each matmul).
fn set_tf32(on: bool) {
    rnn::set_allow_tf32(on);
}

type UnaryFn = fn(&Tensor) -> rnn::Result<Tensor>;

fn bench_memory_bound(bench: &mut Bench, sizes: GpuSizes) -> CliResult<()> {
    let n = sizes.elems;
    let (x, y) = (randn(n, bench.device)?, randn(n, bench.device)?);
    let label = format!("{}M", n >> 20);
    let unary: [(&str, UnaryFn); 3] = [("relu", Tensor::relu), ("exp", Tensor::exp), ("gelu", Tensor::gelu)];
    for (name, op) in unary {
        bench.bandwidth(&format!("unary_{name}_{label}"), 8 * n, || op(&x).map(drop))?;
    }
    bench.bandwidth(&format!("binary_add_{label}"), 12 * n, || x.add(&y).map(drop))?;
    bench.bandwidth(&format!("sum_{label}"), 4 * n, || x.sum_all().map(drop))?;
    let (rows, cols) = sizes.softmax;
    let s = randn((rows, cols), bench.device)?;
    bench.bandwidth(&format!("softmax_{rows}x{cols}"), 8 * rows * cols, || s.softmax(-1).map(drop))
}

impl Bench<'_> {
    /// GB/s of `f` moving `bytes`, against a device copy of the same bytes.
    fn bandwidth(&mut self, name: &str, bytes: usize, f: impl FnMut() -> rnn::Result<()>) -> CliResult<()> {
        let op = bytes as f64 / self.seconds(self.device, f)? / 1e9;
        let copy = bytes as f64 / rnn::gpu_memory::time_buffer_copy(self.device, (bytes / 2) as u64, 9)? / 1e9;
        self.report(name, "GB/s", op, ("device copy", copy))
    }
}
