//! The `rnn` command: `devices`, `bench`, `train`, `generate`.

mod bench_attention;
mod bench_attention_gpu;
mod bench_cpu;
mod bench_engine;
mod bench_fused_nn;
mod bench_gpu;
mod bench_matmul_lowp;
mod bench_resnet;
mod bench_train;
mod devices;
mod distributed;
mod gpt;
mod output;
mod timing;
mod train;

/// Counts heap bytes, for the peak-memory column of `rnn bench attention`.
#[global_allocator]
static ALLOC: bench_attention::CountingAlloc = bench_attention::CountingAlloc;

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use rnn::train::atomic_file::{check_replaceable, write_atomic};

/// Every command returns this; `main` prints the error and exits non-zero.
pub type CliResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[derive(Parser)]
#[command(name = "rnn", version, about = "Deep learning in Rust: devices, benchmarks, training")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the devices this build can use on this machine.
    Devices,
    /// Run a benchmark suite.
    #[command(subcommand)]
    Bench(BenchSuite),
    /// Train a digit classifier (built-in drawn digits by default, or MNIST) on the best
    /// device; writes loss/accuracy curves and a checkpoint.
    Train(train::TrainArgs),
    /// Sample text from a GPT checkpoint written by `rnn train --model gpt`.
    Generate(gpt::GenerateArgs),
}

#[derive(Subcommand)]
enum BenchSuite {
    /// The CPU workloads of bench/cpu_bench.py (f32, bf16 and f16 matmul, elementwise, reductions, MLP step,
    /// fused LayerNorm / cross entropy against their compositions).
    Cpu(CpuSuiteArgs),
    /// Epoch time of the `rnn train` MLP and CNN through the Network API (bench/train_bench.py
    /// is the PyTorch twin), and an AdamW step over 10M parameters against a copy of its bytes.
    Train(TrainBenchArgs),
    /// A GPU against its references in one run: op overhead, MLP training step and matmul vs
    /// the CPU backend; AdamW and memory-bound ops vs a device-to-device copy.
    Gpu(GpuBenchArgs),
    /// Fused scaled dot-product attention, forward and forward + backward. On the CPU: time,
    /// GFLOP/s and peak extra memory (bench/attention_bench.py is the PyTorch twin); with
    /// `--device cuda:N` or `wgpu:N`: TFLOP/s at N up to 16384, bf16 on CUDA
    /// (bench/attention_gpu_bench.py, torch's flash backend, is the twin).
    Attention(AttentionBenchArgs),
}

/// Options every benchmark suite takes.
#[derive(Args)]
struct BenchOptions {
    /// Write the results as a JSON list of records (the format of the PyTorch twin's --json).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Shrink sizes and times for a smoke test (numbers are not comparable to a full run).
    #[arg(long)]
    quick: bool,
    /// Worker threads (default: all cores, or RAYON_NUM_THREADS); at most 1024.
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
}

#[derive(Args)]
struct CpuSuiteArgs {
    #[command(flatten)]
    options: BenchOptions,
    /// Only the matmul rows: f32, bf16 and f16 (bench/cpu_bench.py --matmul-only is the twin).
    #[arg(long, conflicts_with = "memory_only")]
    matmul_only: bool,
    /// Only the memory-bound rows: elementwise, softmax, sum (the twin's --memory-only).
    #[arg(long, conflicts_with = "gemm_shapes")]
    memory_only: bool,
    /// Only f32 products at the MLP and GPT training shapes, transposed operands included,
    /// and Linear layers' forward at a few widths (no twin: run it with and without
    /// RNN_CPU_F32_GEMM=packed to compare our kernels).
    #[arg(long, conflicts_with = "matmul_only")]
    gemm_shapes: bool,
}

#[derive(Args)]
struct AttentionBenchArgs {
    #[command(flatten)]
    options: BenchOptions,
    /// `cpu` (default), `cuda:N` or `wgpu:N` / `wgpu:<name>`.
    #[arg(long)]
    device: Option<String>,
    /// These sequence lengths (comma-separated) instead of 256,1024,4096 on the CPU
    /// (the GPT shape's row is always run) and 1024,4096,16384 on a GPU.
    #[arg(long, value_delimiter = ',', value_name = "N,..")]
    lengths: Vec<usize>,
    /// CPU: measure peak memory as the growth of the peak resident set, the measure the
    /// PyTorch twin takes (Linux; run under MALLOC_MMAP_THRESHOLD_=65536 as the twin does:
    /// bench/run_attention.sh); its rows are named attnrss_*, and nothing is timed.
    #[arg(long)]
    rss: bool,
}

#[derive(Args)]
struct TrainBenchArgs {
    #[command(flatten)]
    options: BenchOptions,
    /// `cpu`, `cuda:N` or `wgpu:N` (default: the best available).
    #[arg(long)]
    device: Option<String>,
    /// Only the ResNet-8 workload (bench/train_bench.py --resnet-only is the twin).
    #[arg(long)]
    resnet_only: bool,
}

#[derive(Args)]
struct GpuBenchArgs {
    #[command(flatten)]
    options: BenchOptions,
    /// `cuda:N` or `wgpu:N` / `wgpu:<name>` (default: the best available GPU).
    #[arg(long)]
    device: Option<String>,
    /// Matmul up to 2048 only (for software adapters; the full run goes to 8192).
    #[arg(long)]
    small_matmul: bool,
    /// Only the f32 matmul rows, at the sizes of bench/burn_matmul (256, 512, 1024).
    #[arg(long)]
    matmul_only: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if std::env::var("RNN_GPU_DEBUG").is_ok_and(|v| v != "0") {
        // GPU device, kernel-compile and launch logs go to stderr.
        tracing_subscriber::fmt()
            .with_max_level(tracing_subscriber::filter::LevelFilter::DEBUG)
            .with_writer(io::stderr)
            .init();
    }
    match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> CliResult<ExitCode> {
    match command {
        Command::Devices => return devices::run(&mut io::stdout().lock()),
        Command::Bench(BenchSuite::Cpu(args)) => bench_cpu(&args)?,
        Command::Bench(BenchSuite::Train(args)) => bench_train(&args)?,
        Command::Bench(BenchSuite::Gpu(args)) => bench_gpu(&args)?,
        Command::Bench(BenchSuite::Attention(args)) => bench_attention(&args)?,
        Command::Train(args) => train::run(&args)?,
        Command::Generate(args) => gpt::generate(&args)?,
    }
    Ok(ExitCode::SUCCESS)
}

fn bench_cpu(args: &CpuSuiteArgs) -> CliResult<()> {
    let sizes = if args.options.quick { bench_cpu::Sizes::QUICK } else { bench_cpu::Sizes::FULL };
    if args.matmul_only {
        return run_bench(&args.options, |out| bench_cpu::run_matmul(sizes, args.options.quick, out));
    }
    if args.memory_only {
        return run_bench(&args.options, |out| bench_cpu::run_memory(sizes, args.options.quick, out));
    }
    if args.gemm_shapes {
        return run_bench(&args.options, |out| bench_cpu::run_gemm_shapes(sizes, args.options.quick, out));
    }
    run_bench(&args.options, |out| bench_cpu::run(sizes, args.options.quick, out))
}

fn bench_attention(args: &AttentionBenchArgs) -> CliResult<()> {
    let quick = args.options.quick;
    let device = args.device.as_deref().map(rnn::Device::parse).transpose()?.unwrap_or(rnn::Device::Cpu);
    if args.lengths.contains(&0) {
        return Err("--lengths: every sequence length must be at least 1".into());
    }
    if !device.is_cpu() {
        if args.rss {
            return Err("--rss measures the CPU's resident set; leave it out with --device cuda / wgpu".into());
        }
        let mut sizes = bench_attention_gpu::GpuAttentionSizes::new(quick);
        if !args.lengths.is_empty() {
            sizes.lengths = args.lengths.clone();
        }
        return run_bench(&args.options, |out| bench_attention_gpu::run(&sizes, device, out));
    }
    let mut sizes = bench_attention::AttentionSizes::new(quick);
    sizes.rss = args.rss;
    if !args.lengths.is_empty() {
        sizes.lengths = args.lengths.clone();
    }
    run_bench(&args.options, |out| bench_attention::run(&sizes, quick, out))
}

fn bench_train(args: &TrainBenchArgs) -> CliResult<()> {
    let device = match &args.device {
        Some(name) => rnn::Device::parse(name)?,
        None => rnn::Device::best()?,
    };
    let sizes = if args.options.quick { bench_train::TrainSizes::QUICK } else { bench_train::TrainSizes::FULL };
    if args.resnet_only {
        return run_bench(&args.options, |out| bench_train::run_resnet(sizes, device, out));
    }
    run_bench(&args.options, |out| bench_train::run(sizes, device, out))
}

fn bench_gpu(args: &GpuBenchArgs) -> CliResult<()> {
    let device = match &args.device {
        Some(name) => rnn::Device::parse(name)?,
        None => rnn::Device::best()?,
    };
    let sizes = match (args.options.quick, args.small_matmul) {
        (true, _) => bench_gpu::GpuSizes::QUICK,
        (false, true) => bench_gpu::GpuSizes::SMALL_MATMUL,
        (false, false) => bench_gpu::GpuSizes::FULL,
    };
    if args.matmul_only {
        return run_bench(&args.options, |out| bench_gpu::run_matmul(sizes.timing, device, out));
    }
    run_bench(&args.options, |out| bench_gpu::run(sizes, device, out))
}

/// Sets the thread count, checks the JSON path (so a bad path fails before the benchmark,
/// not after it), runs `suite` printing to stdout, and writes its records.
fn run_bench(
    options: &BenchOptions,
    suite: impl FnOnce(&mut dyn Write) -> CliResult<Vec<bench_cpu::Record>>,
) -> CliResult<()> {
    if let Some(threads) = options.threads {
        set_threads(threads)?;
    }
    if let Some(path) = &options.json {
        check_replaceable(path).map_err(|e| format!("--json: {e}"))?;
    }
    let records = suite(&mut io::stdout().lock())?;
    if let Some(path) = &options.json {
        let text = serde_json::to_string_pretty(&records)? + "\n";
        write_atomic(path, text.as_bytes())?;
        eprintln!("wrote {} records to {}", records.len(), path.display());
    }
    Ok(())
}

/// The most threads `--threads` may ask for: enough for any machine this runs on (the bench
/// scripts pass `nproc`), while a typo such as 100000 is an error, not 100000 threads.
const MAX_THREADS: usize = 1024;

fn set_threads(threads: usize) -> CliResult<()> {
    if threads == 0 || threads > MAX_THREADS {
        return Err(format!("--threads must be between 1 and {MAX_THREADS}, got {threads}").into());
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .map_err(|e| format!("cannot set up {threads} threads: {e}").into())
}
