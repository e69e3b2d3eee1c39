//! `rnn devices`: what this build can run on, on this machine.

use std::io::Write;

use rnn::Device;

use crate::CliResult;

const GPU_DEVICES: [Device; 2] = [Device::Cuda(0), Device::Wgpu(0)];

/// Prints the CPU (threads, model) and whether each GPU backend is usable.
pub fn run(out: &mut dyn Write) -> CliResult<()> {
    writeln!(out, "{:<8} available ({})", Device::Cpu.to_string(), cpu_summary())?;
    for device in GPU_DEVICES {
        let name = device.to_string();
        match device.check_available() {
            Ok(()) => writeln!(out, "{name:<8} available")?,
            Err(e) => writeln!(out, "{name:<8} not available: {e}")?,
        }
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
