//! `GpuProfiler`: named regions timed on one device, summarized or exported as a Chrome trace.
//!
//! GPU ops are asynchronous, so a region's time must include the kernels queued inside it:
//! `start` waits for the device to finish the work queued before it, and `end` waits for the
//! work queued inside the region. On a CUDA device the duration is measured by CUDA events
//! recorded on the device's stream (the GPU's own clock); on wgpu devices, whose timestamp
//! queries are optional, and on the CPU it is the wall clock read after synchronizing.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use rnn_core::{Device, Error, Result};

use super::GpuContext;

/// One timed region.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileEvent {
    pub name: String,
    /// When the region started, from the profiler's creation.
    pub start: Duration,
    pub duration: Duration,
    /// Bytes of device memory the caller reported for the region (`end`'s `memory_used`).
    pub memory_used: u64,
    /// The `GpuManager` id of the GPU the caller reported for the region (`end`'s
    /// `device_id`); the Chrome trace shows each id as its own row.
    pub device_id: usize,
}

/// The statistics of every region of one name.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileSummary {
    pub name: String,
    pub count: usize,
    pub total: Duration,
    pub mean: Duration,
    pub min: Duration,
    pub max: Duration,
    /// The largest `memory_used` reported for a region of this name.
    pub max_memory_used: u64,
}

/// A region started and not yet ended.
struct OpenRegion {
    start: Instant,
    #[cfg(feature = "cuda")]
    event: Option<rnn_core::cuda::CudaTimingEvent>,
}

/// Times named regions of work on one device.
///
/// ```
/// use rnn::gpu::GpuProfiler;
/// # fn main() -> rnn::Result<()> {
/// let mut profiler = GpuProfiler::default();
/// let device = profiler.device();
/// let x = rnn::Tensor::ones((64, 64), rnn::DType::F32, device)?;
/// profiler.start("matrix_multiply")?;
/// let y = x.matmul(&x)?;
/// profiler.end("matrix_multiply", 64 * 64 * 4, 0)?;
/// profiler.start("activation")?;
/// let _z = y.relu()?;
/// profiler.end("activation", 64 * 64 * 4, 0)?;
/// profiler.print_summary();
/// assert_eq!(profiler.summary().len(), 2);
/// # Ok(()) }
/// ```
pub struct GpuProfiler {
    device: Device,
    origin: Instant,
    open: HashMap<String, OpenRegion>,
    events: Vec<ProfileEvent>,
}

impl GpuProfiler {
    /// A profiler timing work on `device`.
    pub fn new(device: Device) -> GpuProfiler {
        GpuProfiler { device, origin: Instant::now(), open: HashMap::new(), events: Vec::new() }
    }

    /// A profiler timing work on the context's GPU.
    pub fn for_context(context: &GpuContext) -> GpuProfiler {
        GpuProfiler::new(context.device())
    }

    pub fn device(&self) -> Device {
        self.device
    }

    /// Whether durations come from device events (CUDA) rather than the wall clock.
    pub fn uses_device_events(&self) -> bool {
        cfg!(feature = "cuda") && matches!(self.device, Device::Cuda(_))
    }

    /// Starts the region `name` once the work queued so far has finished. Starting a region
    /// that is already open is an error.
    pub fn start(&mut self, name: &str) -> Result<()> {
        if self.open.contains_key(name) {
            return Err(Error::invalid("GpuProfiler::start", format!("region '{name}' is already started")));
        }
        self.device.synchronize()?;
        #[cfg(feature = "cuda")]
        let event = match self.device {
            Device::Cuda(i) => Some(rnn_core::cuda::record_timing_event(i)?),
            _ => None,
        };
        let region = OpenRegion {
            start: Instant::now(),
            #[cfg(feature = "cuda")]
            event,
        };
        self.open.insert(name.to_string(), region);
        Ok(())
    }

    /// Ends the region `name` once the work queued in it has finished, and returns its time.
    /// `memory_used` (bytes) and `device_id` are what the caller attributes to the region:
    /// they are recorded with it (the summary shows the largest `memory_used` per name), not
    /// measured. Ending a region that was not started is an error.
    pub fn end(&mut self, name: &str, memory_used: u64, device_id: usize) -> Result<Duration> {
        let region = self.open.remove(name).ok_or_else(|| {
            Error::invalid("GpuProfiler::end", format!("region '{name}' was not started (call start first)"))
        })?;
        let duration = self.region_time(&region)?;
        let start = region.start.saturating_duration_since(self.origin);
        self.events.push(ProfileEvent { name: name.to_string(), start, duration, memory_used, device_id });
        Ok(duration)
    }

    /// The time of a region ending now: device events on CUDA, else the wall clock after
    /// synchronizing.
    fn region_time(&self, region: &OpenRegion) -> Result<Duration> {
        #[cfg(feature = "cuda")]
        if let (Device::Cuda(i), Some(begin)) = (self.device, &region.event) {
            let end = rnn_core::cuda::record_timing_event(i)?;
            return end.elapsed_since(begin);
        }
        self.device.synchronize()?;
        Ok(region.start.elapsed())
    }

    /// Every region ended so far, in the order they ended.
    pub fn events(&self) -> &[ProfileEvent] {
        &self.events
    }

    /// Forgets every region, open or ended.
    pub fn clear(&mut self) {
        self.open.clear();
        self.events.clear();
    }

    /// Count, total, mean, min and max time per region name, in the order the names first
    /// ended.
    pub fn summary(&self) -> Vec<ProfileSummary> {
        let mut order: Vec<&str> = Vec::new();
        let mut times: HashMap<&str, Vec<(Duration, u64)>> = HashMap::new();
        for e in &self.events {
            let entry = times.entry(e.name.as_str()).or_default();
            if entry.is_empty() {
                order.push(&e.name);
            }
            entry.push((e.duration, e.memory_used));
        }
        order
            .into_iter()
            .map(|name| {
                let t: Vec<Duration> = times[name].iter().map(|&(d, _)| d).collect();
                let total: Duration = t.iter().sum();
                ProfileSummary {
                    name: name.to_string(),
                    count: t.len(),
                    total,
                    mean: total.div_f64(t.len() as f64),
                    min: t.iter().copied().min().unwrap_or_default(),
                    max: t.iter().copied().max().unwrap_or_default(),
                    max_memory_used: times[name].iter().map(|&(_, m)| m).max().unwrap_or(0),
                }
            })
            .collect()
    }

    /// The summary as a table.
    pub fn report(&self) -> String {
        let clock = if self.uses_device_events() { "CUDA events" } else { "wall clock after synchronize" };
        let mut out = format!("GPU profile on {} ({clock})\n", self.device);
        let width = self.events.iter().map(|e| e.name.len()).max().unwrap_or(0).max(6);
        let _ = writeln!(
            out,
            "{:<width$}  {:>6}  {:>12}  {:>12}  {:>12}  {:>12}  {:>12}",
            "region", "count", "total ms", "mean ms", "min ms", "max ms", "max MiB"
        );
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        for s in self.summary() {
            let _ = writeln!(
                out,
                "{:<width$}  {:>6}  {:>12.3}  {:>12.3}  {:>12.3}  {:>12.3}  {:>12.1}",
                s.name,
                s.count,
                ms(s.total),
                ms(s.mean),
                ms(s.min),
                ms(s.max),
                s.max_memory_used as f64 / (1 << 20) as f64
            );
        }
        if !self.open.is_empty() {
            let mut names: Vec<&str> = self.open.keys().map(String::as_str).collect();
            names.sort_unstable();
            let _ = writeln!(out, "not ended: {}", names.join(", "));
        }
        out
    }

    /// Prints [`GpuProfiler::report`] to stdout.
    pub fn print_summary(&self) {
        print!("{}", self.report());
    }

    /// The ended regions as Chrome trace JSON (`chrome://tracing`, Perfetto): complete
    /// events (`"ph": "X"`) with `ts` and `dur` in microseconds.
    pub fn chrome_trace_json(&self) -> String {
        let pid = std::process::id();
        let events: Vec<String> = self
            .events
            .iter()
            .map(|e| {
                format!(
                    "{{\"name\":{},\"ph\":\"X\",\"ts\":{:.3},\"dur\":{:.3},\"pid\":{pid},\"tid\":{},\"args\":{{\"memory_used\":{}}}}}",
                    json_string(&e.name),
                    e.start.as_secs_f64() * 1e6,
                    e.duration.as_secs_f64() * 1e6,
                    e.device_id,
                    e.memory_used
                )
            })
            .collect();
        format!("{{\"traceEvents\":[{}],\"displayTimeUnit\":\"ms\"}}\n", events.join(","))
    }

    /// Writes [`GpuProfiler::chrome_trace_json`] to `path`.
    pub fn export_chrome_trace(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.chrome_trace_json()).map_err(|e| Error::io(path, e))
    }
}

impl Default for GpuProfiler {
    /// A profiler on the device `Device::best()` picks (the CPU if that fails).
    fn default() -> GpuProfiler {
        GpuProfiler::new(Device::best().unwrap_or(Device::Cpu))
    }
}

impl std::fmt::Debug for GpuProfiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuProfiler")
            .field("device", &self.device)
            .field("open", &self.open.len())
            .field("events", &self.events.len())
            .finish()
    }
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
