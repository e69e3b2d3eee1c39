//! `rnn devices`: what this build can run on, on this machine.

use std::io::Write;
use std::process::ExitCode;

use rnn::{Device, Error};

use crate::CliResult;

/// Prints the CPU (threads, model), whether CUDA is usable, every wgpu adapter and the
/// device `Device::best` picks. Exits with failure when something printed is an error: a
/// CUDA device that exists but cannot be opened, or a best device that cannot be resolved
/// (e.g. `RNN_GPU_DEVICE` names a missing device). A machine without a GPU is no error.
pub fn run(out: &mut dyn Write) -> CliResult<ExitCode> {
    let mut failed = false;
    writeln!(out, "{:<8} available ({})", Device::Cpu.to_string(), cpu_summary())?;
    match Device::Cuda(0).check_available() {
        Ok(()) => writeln!(out, "{:<8} available", "cuda:0")?,
        Err(e) if cuda_is_absent(&e) => writeln!(out, "{:<8} not available: {e}", "cuda:0")?,
        Err(e) => {
            failed = true;
            writeln!(out, "{:<8} error: {e}", "cuda:0")?
        }
    }
    let adapters = rnn::wgpu_adapters();
    if adapters.is_empty() {
        writeln!(out, "{:<8} no adapters found", "wgpu")?;
    }
    for a in adapters {
        let device = Device::Wgpu(a.ordinal).to_string();
        let kind = if a.is_software { "software, used only when asked for" } else { a.device_type.as_str() };
        let f16 = if a.shader_f16 { ", f16" } else { "" };
        writeln!(
            out,
            "{device:<8} {} ({}, {kind}{f16}, max buffer {} MiB)",
            a.name,
            a.backend,
            a.max_buffer_bytes >> 20
        )?;
    }
    match Device::best() {
        Ok(best) => writeln!(out, "best device: {best}")?,
        Err(e) => {
            failed = true;
            writeln!(out, "best device: error: {e}")?
        }
    }
    out.flush()?;
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// Whether a CUDA error only says there is no CUDA here (not compiled in, no driver, no
/// device), as opposed to a device that is there but failed to open.
fn cuda_is_absent(e: &Error) -> bool {
    #[cfg(feature = "cuda")]
    if matches!(e, Error::DeviceNotAvailable(_)) {
        return rnn::cuda::device_count() == 0;
    }
    matches!(e, Error::NotCompiledWith(_) | Error::DeviceNotAvailable(_))
}

fn cpu_summary() -> String {
    let threads = format!("{} rayon threads", rayon::current_num_threads());
    match cpu_model() {
        Some(model) => format!("{threads}, {model}"),
        None => threads,
    }
}

/// The `model name` line of /proc/cpuinfo, when there is one.
fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(key, _)| key.trim() == "model name")
        .map(|(_, value)| value.trim().to_string())
}
