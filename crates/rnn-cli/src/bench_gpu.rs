//! `rnn bench gpu`: a GPU device against its references, measured side by side in one run:
//! matmul GFLOP/s against the CPU backend on the same machine, and elementwise, softmax and
//! sum GB/s against a plain device-to-device buffer copy of the same bytes (wgpu devices).
//! Every timed call waits for the device, so submission overhead is included on both sides.

use std::io::Write;

use rnn::{DType, Device, NoGradGuard, Tensor};

use crate::bench_cpu::Record;
use crate::timing::{time_call, TimingConfig};
use crate::CliResult;

/// Problem sizes of one run.
#[derive(Clone, Copy, Debug)]
pub struct GpuSizes {
    pub matmul: &'static [usize],
    pub elems: usize,
    pub softmax: (usize, usize),
    pub timing: TimingConfig,
}

impl GpuSizes {
    pub const FULL: GpuSizes = GpuSizes {
        matmul: &[256, 512, 1024, 2048],
        elems: 16 << 20,
        softmax: (16384, 1024),
        timing: TimingConfig::FULL,
    };
    /// Small enough for a software adapter (lavapipe) in a minute.
    pub const QUICK: GpuSizes =
        GpuSizes { matmul: &[128, 256, 512], elems: 1 << 20, softmax: (1024, 1024), timing: TimingConfig::QUICK };
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

    /// Records `value` and prints it with its reference and their ratio.
    fn report(&mut self, name: &str, metric: &'static str, value: f64, reference: (&str, f64)) -> CliResult<()> {
        let ratio = value / reference.1;
        writeln!(
            self.out,
            "{name:<24} {value:>10.2} {metric:<8} {:<16} {:>10.2}  {ratio:>6.2}x",
            reference.0, reference.1
        )?;
        self.out.flush()?;
        self.push(format!("{}:{name}", self.device), metric, value, true);
        self.push(format!("{}:{name}", reference.0), metric, reference.1, true);
        Ok(())
    }
}

/// Runs the suite on `device`, printing a table as it goes.
pub fn run(sizes: GpuSizes, device: Device, out: &mut dyn Write) -> CliResult<Vec<Record>> {
    if device.is_cpu() {
        return Err(
            "rnn bench gpu needs a GPU device (see `rnn devices`; software adapters via --device wgpu:N)".into()
        );
    }
    device.check_available()?;
    rnn::manual_seed(0);
    let mut bench = Bench { device, timing: sizes.timing, records: Vec::new(), out };
    writeln!(bench.out, "rnn {} GPU benchmark on {device} ({})", env!("CARGO_PKG_VERSION"), describe(device))?;
    writeln!(
        bench.out,
        "{:<24} {:>10} {:<8} {:<16} {:>10}  {:>7}",
        "name", "value", "metric", "reference", "value", "ratio"
    )?;
    let _no_grad = NoGradGuard::new();
    bench_launch_overhead(&mut bench)?;
    bench_matmul(&mut bench, sizes.matmul)?;
    bench_memory_bound(&mut bench, sizes)?;
    Ok(bench.records)
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

/// Host time per launched op: 200 tiny ops queued, then one wait, against the same ops on
/// the CPU backend (lower is better; the ratio is GPU / CPU time).
fn bench_launch_overhead(bench: &mut Bench) -> CliResult<()> {
    const OPS: usize = 200;
    let x = randn(16, bench.device)?;
    let cpu_x = randn(16, Device::Cpu)?;
    let gpu = bench.seconds(bench.device, || (0..OPS).try_for_each(|_| x.relu().map(drop)))? / OPS as f64;
    let cpu = bench.seconds(Device::Cpu, || (0..OPS).try_for_each(|_| cpu_x.relu().map(drop)))? / OPS as f64;
    writeln!(
        bench.out,
        "{:<24} {:>10.2} {:<8} {:<16} {:>10.2}  {:>6.2}x",
        "op_overhead_us",
        gpu * 1e6,
        "us/op",
        "cpu",
        cpu * 1e6,
        gpu / cpu
    )?;
    let name = format!("{}:op_overhead", bench.device);
    bench.push(name, "us/op", gpu * 1e6, false);
    bench.push("cpu:op_overhead".into(), "us/op", cpu * 1e6, false);
    Ok(())
}

fn bench_matmul(bench: &mut Bench, sizes: &[usize]) -> CliResult<()> {
    for &n in sizes {
        let (a, b) = (randn((n, n), Device::Cpu)?, randn((n, n), Device::Cpu)?);
        let (ga, gb) = (a.to_device(bench.device)?, b.to_device(bench.device)?);
        let flops = 2.0 * (n as f64).powi(3) / 1e9;
        let gpu = bench.seconds(bench.device, || ga.matmul(&gb).map(drop))?;
        let cpu = bench.seconds(Device::Cpu, || a.matmul(&b).map(drop))?;
        bench.report(&format!("matmul_f32_{n}"), "GFLOP/s", flops / gpu, ("cpu", flops / cpu))?;
    }
    Ok(())
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
