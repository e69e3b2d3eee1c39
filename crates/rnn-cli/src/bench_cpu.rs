//! `rnn bench cpu`: the workloads of `bench/cpu_bench.py` (same names, shapes, metrics and
//! timing) on `Device::Cpu`, printed as a table while they run and returned as records.

use std::io::Write;

use rnn::{DType, Device, NoGradGuard, Tensor};
use serde::Serialize;

use crate::timing::{median, time_call, Measurement, TimingConfig};
use crate::CliResult;

const N16M: usize = 16 * 1024 * 1024;
/// The sizes in the workload names; a quick run keeps the names and shrinks the sizes.
pub(crate) const MATMUL_LABELS: [usize; 4] = [256, 512, 1024, 2048];
const NAME_WIDTH: usize = 28;

/// Problem sizes and timing of one run.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Elements of the unary, binary and sum inputs.
    pub elems: usize,
    /// Softmax input is `[softmax_rows, softmax_cols]`, reduced over the last dim.
    pub softmax_rows: usize,
    pub softmax_cols: usize,
    /// Square matmul sizes, one per name in `MATMUL_LABELS`.
    pub matmul: [usize; 4],
    pub timing: TimingConfig,
}

impl Sizes {
    /// Exactly the sizes of `bench/cpu_bench.py`.
    pub const FULL: Sizes = Sizes {
        elems: N16M,
        softmax_rows: 16384,
        softmax_cols: 1024,
        matmul: MATMUL_LABELS,
        timing: TimingConfig::FULL,
    };
    /// A smoke test: 1M elements, matmul up to 512, 0.1 s per workload.
    pub const QUICK: Sizes = Sizes {
        elems: 1 << 20,
        softmax_rows: 1024,
        softmax_cols: 1024,
        matmul: [64, 128, 256, 512],
        timing: TimingConfig::QUICK,
    };
}

/// One result, in the JSON format `cpu_bench.py --json` writes.
#[derive(Clone, Debug, Serialize)]
pub struct Record {
    pub suite: &'static str,
    pub name: String,
    pub metric: &'static str,
    pub value: f64,
    pub higher_is_better: bool,
    pub threads: usize,
}

/// What a workload's value measures.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Score {
    /// Floating-point operations per call, reported as GFLOP/s.
    Flops(f64),
    /// Bytes read and written per call, reported as GB/s.
    Bytes(f64),
    /// Time per call, reported in ms.
    Millis,
}

impl Score {
    fn metric(self) -> &'static str {
        match self {
            Score::Flops(_) => "GFLOP/s",
            Score::Bytes(_) => "GB/s",
            Score::Millis => "ms",
        }
    }

    fn value(self, seconds: f64) -> f64 {
        match self {
            Score::Flops(amount) | Score::Bytes(amount) => amount / seconds / 1e9,
            Score::Millis => seconds * 1e3,
        }
    }
}

/// Runs every workload, printing one line per workload to `out` as it finishes.
pub fn run(sizes: Sizes, quick: bool, out: &mut dyn Write) -> CliResult<Vec<Record>> {
    let mut bench = start(sizes, quick, out)?;
    {
        let _no_grad = NoGradGuard::new();
        bench_matmul_rows(&mut bench)?;
        bench_memory_rows(&mut bench)?;
    }
    bench_mlp(&mut bench)?;
    let fused = if quick { &crate::bench_fused_nn::QUICK } else { &crate::bench_fused_nn::FULL };
    crate::bench_fused_nn::bench_fused_nn(&mut bench, fused)?;
    Ok(bench.records)
}

/// Only the matmul rows, f32, bf16 and f16 (`rnn bench cpu --matmul-only`).
pub fn run_matmul(sizes: Sizes, quick: bool, out: &mut dyn Write) -> CliResult<Vec<Record>> {
    let mut bench = start(sizes, quick, out)?;
    let _no_grad = NoGradGuard::new();
    bench_matmul_rows(&mut bench)?;
    Ok(bench.records)
}

/// Only the memory-bound rows: elementwise, softmax, sum (`rnn bench cpu --memory-only`).
pub fn run_memory(sizes: Sizes, quick: bool, out: &mut dyn Write) -> CliResult<Vec<Record>> {
    let mut bench = start(sizes, quick, out)?;
    let _no_grad = NoGradGuard::new();
    bench_memory_rows(&mut bench)?;
    Ok(bench.records)
}

/// One f32 product of a training step: `m x k` times `k x n`, `ta` / `tb` marking an
/// operand read transposed (a view of the stored matrix, as the step reads it).
type ProductShape = (usize, usize, usize, bool, bool);

/// f32 products at training shapes (`rnn bench cpu --gemm-shapes`): the MLP step's (those of
/// `bench_mlp`) and the char-GPT step's, then Linear layers' forward (`bench_linear_forward`).
pub fn run_gemm_shapes(sizes: Sizes, quick: bool, out: &mut dyn Write) -> CliResult<Vec<Record>> {
    // Char-GPT, 2048 tokens, width 128: projections, MLP, head, their gradients.
    const GPT: [ProductShape; 6] = [
        (2048, 128, 128, false, false),
        (2048, 512, 128, false, false),
        (2048, 128, 512, false, false),
        (128, 512, 2048, true, false),
        (2048, 128, 512, false, true),
        (2048, 65, 128, false, true),
    ];
    let mut bench = start(sizes, quick, out)?;
    let _no_grad = NoGradGuard::new();
    writeln!(bench.out, "f32 kernels: {}", if rnn::cpu_f32_gemm_is_packed() { "packed GEMM" } else { "gemm crate" })?;
    for shape in Mlp::product_shapes(&MLP_WIDTHS, MLP_BATCH).into_iter().chain(GPT) {
        let (name, flops) = (product_name(shape), product_flops(shape));
        let (a, b) = product_operands(shape)?;
        bench.measure(&name, Score::Flops(flops), || a.matmul(&b).map(drop))?;
    }
    bench_linear_forward(&mut bench)?;
    Ok(bench.records)
}

/// Linear layers' forward products (`x · wᵀ` through `Tensor::linear`, as `nn::Linear` runs
/// them; `m x n x k` is batch x outputs x inputs): inputs of 512 and 1024 features, whose
/// transposed weight the product copies to padded columns first (see `cpu/padded_columns.rs`
/// in rnn-core), at batches 32 to 512, and of 2 rows, which run one matrix-vector product
/// per row; and 784 inputs, which it multiplies as they are.
fn bench_linear_forward(bench: &mut Bench) -> CliResult<()> {
    const LINEAR: [(usize, usize, usize); 6] =
        [(2, 1024, 1024), (32, 512, 512), (128, 256, 512), (128, 1024, 1024), (512, 512, 512), (128, 512, 784)];
    for (m, n, k) in LINEAR {
        let (x, w) = (randn((m, k))?, randn((n, k))?);
        let name = format!("linear_f32_{m}x{n}x{k}");
        let flops = product_flops((m, n, k, false, true));
        bench.measure(&name, Score::Flops(flops), || x.linear(&w, None, rnn::Epilogue::None).map(drop))?;
    }
    Ok(())
}

/// `gemm_f32_<m>x<n>x<k>`, then `_ta` / `_tb` for a transposed operand.
fn product_name((m, n, k, ta, tb): ProductShape) -> String {
    format!("gemm_f32_{m}x{n}x{k}{}{}", if ta { "_ta" } else { "" }, if tb { "_tb" } else { "" })
}

fn product_flops((m, n, k, _, _): ProductShape) -> f64 {
    2.0 * (m * n * k) as f64
}

/// Random operands of `shape`, each stored as the step stores it (a transposed operand is a
/// view of the other orientation).
fn product_operands((m, n, k, ta, tb): ProductShape) -> rnn::Result<(Tensor, Tensor)> {
    let a = if ta { randn((k, m))?.t()? } else { randn((m, k))? };
    let b = if tb { randn((n, k))?.t()? } else { randn((k, n))? };
    Ok((a, b))
}

/// The elementwise, softmax and sum rows.
fn bench_memory_rows(bench: &mut Bench) -> CliResult<()> {
    bench_elementwise(bench)?;
    bench_reductions(bench)
}

/// A seeded bench writing to `out`, its header printed.
fn start(sizes: Sizes, quick: bool, out: &mut dyn Write) -> CliResult<Bench<'_>> {
    rnn::manual_seed(0);
    let mut bench = Bench { sizes, threads: rayon::current_num_threads(), records: Vec::new(), out };
    bench.print_header(quick)?;
    Ok(bench)
}

/// The f32, bf16 and f16 matmul rows.
fn bench_matmul_rows(bench: &mut Bench) -> CliResult<()> {
    bench_matmul(bench)?;
    crate::bench_matmul_lowp::bench_matmul_low_precision(bench, bench.sizes.matmul)
}

/// Collects records and prints them as they come.
pub(crate) struct Bench<'a> {
    sizes: Sizes,
    threads: usize,
    records: Vec<Record>,
    out: &'a mut dyn Write,
}

impl Bench<'_> {
    fn print_header(&mut self, quick: bool) -> CliResult<()> {
        let version = env!("CARGO_PKG_VERSION");
        writeln!(self.out, "rnn {version} CPU benchmark, threads={}", self.threads)?;
        if quick {
            writeln!(self.out, "quick mode: reduced sizes and times, numbers are not comparable to a full run")?;
        }
        writeln!(
            self.out,
            "{:<NAME_WIDTH$} {:>12}  {:<8} {:>12} {:>7}",
            "name", "value", "metric", "ms/call", "calls"
        )?;
        writeln!(self.out, "{}", "-".repeat(NAME_WIDTH + 45))?;
        Ok(self.out.flush()?)
    }

    /// Times `f`, records the result and prints its line.
    pub(crate) fn measure(&mut self, name: &str, score: Score, f: impl FnMut() -> rnn::Result<()>) -> CliResult<()> {
        let m = time_call(self.sizes.timing, f)?;
        let record = Record {
            suite: "cpu",
            name: name.to_string(),
            metric: score.metric(),
            value: score.value(m.median_seconds),
            higher_is_better: !matches!(score, Score::Millis),
            threads: self.threads,
        };
        self.print_line(&record, m)?;
        self.records.push(record);
        Ok(())
    }

    fn print_line(&mut self, r: &Record, m: Measurement) -> CliResult<()> {
        let ms = m.median_seconds * 1e3;
        writeln!(self.out, "{:<NAME_WIDTH$} {:>12.3}  {:<8} {:>12.4} {:>7}", r.name, r.value, r.metric, ms, m.calls)?;
        Ok(self.out.flush()?)
    }
}

fn randn(shape: impl Into<rnn::Shape>) -> rnn::Result<Tensor> {
    Tensor::randn(0.0, 1.0, shape, DType::F32, Device::Cpu)
}

fn bench_matmul(bench: &mut Bench) -> CliResult<()> {
    for (label, n) in MATMUL_LABELS.into_iter().zip(bench.sizes.matmul) {
        let (a, b) = (randn((n, n))?, randn((n, n))?);
        let flops = 2.0 * (n as f64).powi(3);
        bench.measure(&format!("matmul_f32_{label}"), Score::Flops(flops), || a.matmul(&b).map(drop))?;
    }
    Ok(())
}

type UnaryFn = fn(&Tensor) -> rnn::Result<Tensor>;
type BinaryFn = fn(&Tensor, &Tensor) -> rnn::Result<Tensor>;

fn bench_elementwise(bench: &mut Bench) -> CliResult<()> {
    let n = bench.sizes.elems;
    let (x, y) = (randn(n)?, randn(n)?);
    let unary: [(&str, UnaryFn); 4] =
        [("relu", Tensor::relu), ("exp", Tensor::exp), ("tanh", Tensor::tanh), ("gelu", Tensor::gelu)];
    for (name, op) in unary {
        let bytes = 2.0 * 4.0 * n as f64;
        bench.measure(&format!("unary_{name}_16M"), Score::Bytes(bytes), || op(&x).map(drop))?;
    }
    let binary: [(&str, BinaryFn); 2] = [("add", Tensor::add), ("mul", Tensor::mul)];
    for (name, op) in binary {
        let bytes = 3.0 * 4.0 * n as f64;
        bench.measure(&format!("binary_{name}_16M"), Score::Bytes(bytes), || op(&x, &y).map(drop))?;
    }
    Ok(())
}

fn bench_reductions(bench: &mut Bench) -> CliResult<()> {
    let (rows, cols) = (bench.sizes.softmax_rows, bench.sizes.softmax_cols);
    let x = randn((rows, cols))?;
    let bytes = 2.0 * 4.0 * (rows * cols) as f64;
    bench.measure("softmax_16M", Score::Bytes(bytes), || x.softmax(-1).map(drop))?;
    let n = bench.sizes.elems;
    let flat = randn(n)?;
    bench.measure("sum_16M", Score::Bytes(4.0 * n as f64), || flat.sum_all().map(drop))
}

/// 784-512-256-10 with ReLU between layers, weights tracked for gradients: fused Linear
/// layers (`Tensor::linear`, weights `[out, in]`), as `torch.nn.Linear` in the twin.
struct Mlp {
    widths: Vec<usize>,
    layers: Vec<(Tensor, Tensor)>,
}

impl Mlp {
    fn new(widths: &[usize]) -> rnn::Result<Mlp> {
        let layers = widths
            .windows(2)
            .map(|w| {
                let std = 1.0 / (w[0] as f64).sqrt();
                let weight = Tensor::randn(0.0, std, (w[1], w[0]), DType::F32, Device::Cpu)?.requires_grad();
                let bias = Tensor::zeros(w[1], DType::F32, Device::Cpu)?.requires_grad();
                Ok((weight, bias))
            })
            .collect::<rnn::Result<_>>()?;
        Ok(Mlp { widths: widths.to_vec(), layers })
    }

    fn forward(&self, x: &Tensor) -> rnn::Result<Tensor> {
        let mut h = x.clone();
        for (i, (w, b)) in self.layers.iter().enumerate() {
            let act = if i + 1 < self.layers.len() { rnn::Epilogue::Relu } else { rnn::Epilogue::None };
            h = h.linear(w, Some(b), act)?;
        }
        Ok(h)
    }

    /// Forward, cross entropy, backward; the gradients are dropped.
    fn train_step(&self, x: &Tensor, targets: &Tensor) -> rnn::Result<()> {
        let loss = rnn::nn::cross_entropy(&self.forward(x)?, targets)?;
        loss.backward().map(drop)
    }

    /// The products of one training step of an MLP of `widths`, as the step runs them: for
    /// each layer (weight `[out, in]`) the forward `x · Wᵀ`, the weight gradient `gzᵀ · x`,
    /// and the input gradient `gz · W` for every layer but the first (the data needs none).
    fn product_shapes(widths: &[usize], batch: usize) -> Vec<ProductShape> {
        let mut shapes = Vec::new();
        for (i, w) in widths.windows(2).enumerate() {
            let (inputs, outputs) = (w[0], w[1]);
            shapes.push((batch, outputs, inputs, false, true));
            shapes.push((outputs, inputs, batch, true, false));
            if i > 0 {
                shapes.push((batch, inputs, outputs, false, false));
            }
        }
        shapes
    }
}

/// `batch` class ids in `[0, classes)`, as u32.
pub(crate) fn random_targets(batch: usize, classes: usize) -> rnn::Result<Tensor> {
    let uniform = Tensor::rand(0.0, classes as f64, batch, DType::F32, Device::Cpu)?.to_vec::<f32>()?;
    let ids: Vec<u32> = uniform.iter().map(|&v| (v as u32).min(classes as u32 - 1)).collect();
    Tensor::from_vec(ids, batch, Device::Cpu)
}

/// The MLP of `bench_mlp` and its batch.
const MLP_WIDTHS: [usize; 4] = [784, 512, 256, 10];
const MLP_BATCH: usize = 128;

fn bench_mlp(bench: &mut Bench) -> CliResult<()> {
    let (batch, classes) = (MLP_BATCH, MLP_WIDTHS[3]);
    let mlp = Mlp::new(&MLP_WIDTHS)?;
    let x = randn((batch, MLP_WIDTHS[0]))?;
    let targets = random_targets(batch, classes)?;
    let name = "mlp_784_512_256_10_b128";
    // On a CPU worker thread, as `Network::train` runs its steps.
    let step = || rnn::on_cpu_workers(|| mlp.train_step(&x, &targets));
    bench.measure(name, Score::Millis, step)?;
    // The same step under bf16 autocast (f32 weights, bf16 matmuls, f32 loss), as
    // `torch.autocast("cpu", dtype=torch.bfloat16)` in the PyTorch twin.
    bench.measure("mlp_784_512_256_10_b128_bf16", Score::Millis, || rnn::autocast(DType::BF16, step)?)?;
    record_floor(bench, name, &Mlp::product_shapes(&mlp.widths, batch), step)
}

/// Rounds of [`record_floor`]'s side-by-side measurement.
const FLOOR_ROUNDS: usize = 7;

/// The step against its floor: the FLOPs of its `products` at the best rate of the square
/// f32 products (the `matmul_f32_*` sizes). Measured side by side, because this machine's
/// speed can move by a third between one workload and the next (the square products' rate
/// read 190-297 GFLOP/s across runs a few minutes apart): [`FLOOR_ROUNDS`] rounds of every
/// square product, the step's products alone at their own shapes (random operands, no
/// autograd, in one call on the CPU workers like the step), then the step, each timed over
/// a fifth of the usual time. Three more records:
/// `<name>_floor` (ms, at the median round's best rate), `<name>_vs_floor`, the median over
/// rounds of the step over that round's floor, and `<name>_products_vs_floor`, the same for
/// the products alone: what the step would take with nothing but its products, at the rate
/// the gemm kernels reach at those shapes.
fn record_floor(
    bench: &mut Bench,
    name: &str,
    products: &[ProductShape],
    mut step: impl FnMut() -> rnn::Result<()>,
) -> CliResult<()> {
    let flops: f64 = products.iter().map(|&p| product_flops(p)).sum();
    let squares = bench.sizes.matmul.map(|n| product_operands((n, n, n, false, false)));
    let squares = squares.into_iter().collect::<rnn::Result<Vec<_>>>()?;
    let alone = products.iter().map(|&p| product_operands(p)).collect::<rnn::Result<Vec<_>>>()?;
    let timing = bench.sizes.timing;
    let timing = TimingConfig { warmup_calls: 1, min_seconds: timing.min_seconds / 5.0, ..timing };
    let (mut rates, mut ratios, mut alone_ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..FLOOR_ROUNDS {
        let best = best_product_rate(&squares, timing)?;
        let alone_seconds = products_seconds(&alone, timing)?;
        let step_seconds = time_call(timing, &mut step)?.median_seconds;
        rates.push(best / 1e9);
        ratios.push(step_seconds / (flops / best));
        alone_ratios.push(alone_seconds / (flops / best));
    }
    let (rate, ratio, alone_ratio) =
        (median(&mut rates.clone()), median(&mut ratios.clone()), median(&mut alone_ratios));
    let floor_ms = flops / (rate * 1e9) * 1e3;
    let listed = |v: &[f64], digits: usize| v.iter().map(|x| format!("{x:.digits$}")).collect::<Vec<_>>().join(" ");
    writeln!(
        bench.out,
        "{name}: floor {floor_ms:.3} ms ({:.1} MFLOP at {rate:.1} GFLOP/s), step / floor {ratio:.3}, \
         its products alone / floor {alone_ratio:.3} (medians of {FLOOR_ROUNDS} rounds of the square products, the \
         step's products alone, then the step: steps {}; best GFLOP/s: {})",
        flops / 1e6,
        listed(&ratios, 3),
        listed(&rates, 1),
    )?;
    let records = [("floor", "ms", floor_ms), ("vs_floor", "x", ratio), ("products_vs_floor", "x", alone_ratio)];
    for (suffix, metric, value) in records {
        let (suite, threads) = ("cpu", bench.threads);
        let record_name = format!("{name}_{suffix}");
        bench.records.push(Record { suite, name: record_name, metric, value, higher_is_better: false, threads });
    }
    Ok(())
}

/// The best rate (FLOP/s) of the square products `squares` (operand pairs), each called on
/// the CPU workers as the step is (`rnn::on_cpu_workers`).
fn best_product_rate(squares: &[(Tensor, Tensor)], timing: TimingConfig) -> rnn::Result<f64> {
    // `on_cpu_workers` carries the caller's grad mode to the workers.
    let _no_grad = NoGradGuard::new();
    let mut best = 0.0_f64;
    for (a, b) in squares {
        let seconds = time_call(timing, || rnn::on_cpu_workers(|| a.matmul(b).map(drop)))?.median_seconds;
        let (m, k, n) = (a.dims()[0], a.dims()[1], b.dims()[1]);
        best = best.max(product_flops((m, n, k, false, false)) / seconds);
    }
    Ok(best)
}

/// The median time of the products `pairs` (operand pairs) one after the other, in one call
/// on the CPU workers, as the step runs its products: each call of `on_cpu_workers` costs a
/// hand-off to the pool (tens of µs on a VM), which the step pays once, not per product.
fn products_seconds(pairs: &[(Tensor, Tensor)], timing: TimingConfig) -> rnn::Result<f64> {
    let _no_grad = NoGradGuard::new();
    let products = || pairs.iter().try_for_each(|(a, b)| a.matmul(b).map(drop));
    Ok(time_call(timing, || rnn::on_cpu_workers(products))?.median_seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mlp_step_runs_eight_products_of_its_flops() {
        let shapes = Mlp::product_shapes(&MLP_WIDTHS, MLP_BATCH);
        // Forward and weight gradient of 3 layers, input gradient of the last 2.
        assert_eq!(shapes.len(), 8);
        assert!(shapes.contains(&(128, 512, 784, false, true)) && shapes.contains(&(512, 784, 128, true, false)));
        assert!(shapes.contains(&(128, 512, 256, false, false)) && !shapes.contains(&(128, 784, 512, false, false)));
        // 2 x 128 x (2 x (784·512 + 512·256 + 256·10) + 512·256 + 256·10) multiply-adds.
        let flops: f64 = shapes.iter().map(|&s| product_flops(s)).sum();
        assert_eq!(flops, 308_150_272.0);
    }
}
