//! `rnn devices`: what this build can run on, on this machine.

use std::io::Write;

use rnn::Device;

use crate::CliResult;

/// Prints the CPU (threads, model), whether CUDA is usable, and every wgpu adapter.
pub fn run(out: &mut dyn Write) -> CliResult<()> {
    writeln!(out, "{:<8} available ({})", Device::Cpu.to_string(), cpu_summary())?;
    match Device::Cuda(0).check_available() {
        Ok(()) => writeln!(out, "{:<8} available", "cuda:0")?,
        Err(e) => writeln!(out, "{:<8} not available: {e}", "cuda:0")?,
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
        Err(e) => writeln!(out, "best device: error: {e}")?,
    }
    Ok(out.flush()?)
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
