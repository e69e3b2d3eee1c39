//! The `rnn` command: `devices`, `bench cpu`, `train`.

mod bench_cpu;
mod devices;
mod timing;

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// Every command returns this; `main` prints the error and exits non-zero.
pub type CliResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Exit status of a command that exists but is not implemented in this version.
const EXIT_NOT_AVAILABLE: u8 = 2;

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
    /// Train a model (not available in this version).
    Train {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        args: Vec<String>,
    },
}

#[derive(Subcommand)]
enum BenchSuite {
    /// The CPU workloads of bench/cpu_bench.py (f32 matmul, elementwise, reductions, MLP step).
    Cpu(CpuBenchArgs),
}

#[derive(Args)]
struct CpuBenchArgs {
    /// Write the results as a JSON list of records (the format of bench/cpu_bench.py --json).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Shrink sizes and times for a smoke test (numbers are not comparable to a full run).
    #[arg(long)]
    quick: bool,
    /// Worker threads (default: all cores, or RAYON_NUM_THREADS).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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
        Command::Devices => devices::run(&mut io::stdout().lock())?,
        Command::Bench(BenchSuite::Cpu(args)) => bench_cpu(&args)?,
        Command::Train { .. } => return Ok(train_not_available()),
    }
    Ok(ExitCode::SUCCESS)
}

fn bench_cpu(args: &CpuBenchArgs) -> CliResult<()> {
    if let Some(threads) = args.threads {
        set_threads(threads)?;
    }
    // Open the output first, so a bad path fails before the benchmark, not after it.
    let json_file = args.json.as_deref().map(create_file).transpose()?;
    let sizes = if args.quick { bench_cpu::Sizes::QUICK } else { bench_cpu::Sizes::FULL };
    let records = bench_cpu::run(sizes, args.quick, &mut io::stdout().lock())?;
    if let (Some(file), Some(path)) = (json_file, &args.json) {
        write_json(file, path, &records)?;
        eprintln!("wrote {} records to {}", records.len(), path.display());
    }
    Ok(())
}

fn set_threads(threads: usize) -> CliResult<()> {
    if threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .map_err(|e| format!("cannot set up {threads} threads: {e}").into())
}

fn create_file(path: &Path) -> CliResult<File> {
    File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()).into())
}

fn write_json(mut file: File, path: &Path, records: &[bench_cpu::Record]) -> CliResult<()> {
    let text = serde_json::to_string_pretty(records)?;
    writeln!(file, "{text}").map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(())
}

fn train_not_available() -> ExitCode {
    eprintln!(
        "rnn train: the training command is not available in this version of rnn \
         (version {}); the training API is still being written.",
        env!("CARGO_PKG_VERSION")
    );
    ExitCode::from(EXIT_NOT_AVAILABLE)
}
