//! `rnn bench attention`: fused scaled dot-product attention on the CPU, forward and
//! forward + backward, at the sizes of `bench/attention_bench.py` (B = 4, H = 8, D = 64,
//! N in 256 / 1024 / 4096, causal and not, and the GPT training step's B = 32, H = 4, N = 64,
//! D = 32, causal; f32): time, GFLOP/s and the peak extra heap memory of one call, counted
//! by this binary's allocator ([`CountingAlloc`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use rnn::{scaled_dot_product_attention, AttentionMask, DType, Device, NoGradGuard, Tensor};

use crate::bench_cpu::Record;
use crate::timing::{time_call, TimingConfig};
use crate::CliResult;

/// The system allocator, counting live and peak bytes (two relaxed atomic adds per call:
/// no measurable cost next to the allocations themselves).
pub struct CountingAlloc;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

impl CountingAlloc {
    fn count(size: usize) {
        let now = LIVE.fetch_add(size, Relaxed) + size;
        PEAK.fetch_max(now, Relaxed);
    }
}

// SAFETY: every call goes to the system allocator unchanged; only sizes are counted.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            Self::count(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            Self::count(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Relaxed);
    }
}

/// The peak of live heap bytes above those live before `f`, while `f` runs. The host buffer
/// cache is emptied first: buffers it kept from earlier calls would otherwise serve `f`
/// without counting (as torch's figure counts its allocations, see attention_bench.py).
fn peak_extra<T>(f: impl FnOnce() -> T) -> (T, usize) {
    rnn::cpu_empty_cache();
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let out = f();
    (out, PEAK.load(Relaxed).saturating_sub(base))
}

/// The growth of this process's peak resident set while `f` runs: the measure
/// bench/attention_bench.py takes of PyTorch (Linux: writing 5 to /proc/self/clear_refs
/// resets the peak to the current resident set). Comparable only under
/// `MALLOC_MMAP_THRESHOLD_=65536`, as there: every buffer above 64 KiB is then mapped on
/// allocation and unmapped on free, and smaller ones come from memory already resident, on
/// both sides alike. The host buffer cache is emptied first, as for `peak_extra`.
fn rss_peak_extra<T>(f: impl FnOnce() -> T) -> CliResult<(T, usize)> {
    rnn::cpu_empty_cache();
    let unavailable = |e: std::io::Error| format!("--rss needs Linux's /proc/self (clear_refs, status): {e}");
    std::fs::write("/proc/self/clear_refs", "5").map_err(unavailable)?;
    let before = status_kb("VmRSS")?;
    let out = f();
    Ok((out, status_kb("VmHWM")?.saturating_sub(before) * 1024))
}

/// A `kB` field of /proc/self/status.
fn status_kb(field: &str) -> CliResult<usize> {
    let status =
        std::fs::read_to_string("/proc/self/status").map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
    let value = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':')?.trim().strip_suffix("kB")?.trim().parse().ok());
    Ok(value.ok_or_else(|| format!("no {field} in /proc/self/status"))?)
}

const BATCH: usize = 4;
const HEADS: usize = 8;
const D: usize = 64;
/// The attention of the GPT training step (bench/gpt_twin.py): batch, heads, context, head dim.
const GPT: [usize; 4] = [32, 4, 64, 32];
const NAME_WIDTH: usize = 30;

/// Sequence lengths and timing of one run.
#[derive(Clone, Debug)]
pub struct AttentionSizes {
    pub lengths: Vec<usize>,
    pub timing: TimingConfig,
    /// Peak memory as resident-set growth (`rss_peak_extra`, rows `attnrss_*`) instead of
    /// live heap bytes (`peak_extra`, rows `attnmem_*`).
    pub rss: bool,
}

impl AttentionSizes {
    /// The sizes of `bench/attention_bench.py`; one warm-up call and three timed ones (a
    /// forward + backward at N = 4096 is seconds long on a few cores). `quick` shrinks both.
    pub fn new(quick: bool) -> Self {
        match quick {
            true => AttentionSizes { lengths: vec![64, 256], timing: TimingConfig::QUICK, rss: false },
            false => AttentionSizes {
                lengths: vec![256, 1024, 4096],
                timing: TimingConfig { warmup_calls: 1, min_seconds: 0.5, min_calls: 3 },
                rss: false,
            },
        }
    }
}

/// One benchmarked shape: `[B, H, N, D]`, its masks (causal or not) and its name part.
struct Workload {
    dims: [usize; 4],
    causal: &'static [bool],
    tag: String,
}

/// The workloads: B = 4, H = 8, D = 64 at each of `lengths`, then the GPT's.
fn workloads(lengths: &[usize]) -> Vec<Workload> {
    let mut all: Vec<Workload> = lengths
        .iter()
        .map(|&n| Workload { dims: [BATCH, HEADS, n, D], causal: &[false, true], tag: format!("n{n}") })
        .collect();
    let [b, h, n, d] = GPT;
    all.push(Workload { dims: GPT, causal: &[true], tag: format!("gpt_b{b}h{h}n{n}d{d}") });
    all
}

/// Multiply-adds x 2 of the forward (`q kᵀ` and `p v`), halved by a causal mask.
pub(crate) fn forward_flops([b, h, n, d]: [usize; 4], causal: bool) -> f64 {
    let full = 4.0 * (b * h * d) as f64 * (n * n) as f64;
    if causal {
        full / 2.0
    } else {
        full
    }
}

/// Runs every workload, printing a line per result to `out`.
pub fn run(sizes: &AttentionSizes, quick: bool, out: &mut dyn Write) -> CliResult<Vec<Record>> {
    let threads = rayon::current_num_threads();
    writeln!(
        out,
        "rnn {} attention benchmark (CPU, f32, B={BATCH} H={HEADS} D={D}), threads={threads}",
        env!("CARGO_PKG_VERSION")
    )?;
    if quick {
        writeln!(out, "quick mode: reduced sizes and times, numbers are not comparable to a full run")?;
    }
    writeln!(out, "{:<NAME_WIDTH$} {:>10} {:>10} {:>12} {:>6}", "name", "ms/call", "GFLOP/s", "peak MB", "calls")?;
    writeln!(out, "{}", "-".repeat(NAME_WIDTH + 44))?;
    rnn::manual_seed(0);
    let mut records = Vec::new();
    for shape in workloads(&sizes.lengths) {
        let randn = || Tensor::randn(0.0, 1.0, &shape.dims[..], DType::F32, Device::Cpu);
        let (q, k, v) = (randn()?, randn()?, randn()?);
        for &causal in shape.causal {
            let mask = if causal { AttentionMask::causal() } else { AttentionMask::none() };
            let tag = format!("{}{}", shape.tag, if causal { "_causal" } else { "" });
            // Each call returns its results (the output; the three gradients), so that the
            // memory passes read the peak while they are alive, as the twin does.
            let forward = || -> rnn::Result<Vec<Tensor>> {
                let _no_grad = NoGradGuard::new();
                Ok(vec![scaled_dot_product_attention(&q, &k, &v, &mask, None)?])
            };
            // The PyTorch convention: a backward costs 2.5 forwards (five products, not two).
            let both = || -> rnn::Result<Vec<Tensor>> {
                let (q, k, v) = (q.requires_grad(), k.requires_grad(), v.requires_grad());
                let grads = scaled_dot_product_attention(&q, &k, &v, &mask, None)?.sum_all()?.backward()?;
                Ok([&q, &k, &v].into_iter().filter_map(|t| grads.get(t).cloned()).collect())
            };
            let flops = forward_flops(shape.dims, causal);
            let mut one = |name: String, flops: f64, f: &dyn Fn() -> rnn::Result<Vec<Tensor>>| -> CliResult<()> {
                let rec = |name: String, metric, value, higher_is_better| Record {
                    suite: "attention",
                    name,
                    metric,
                    value,
                    higher_is_better,
                    threads,
                };
                if sizes.rss {
                    // Memory only, as the twin's memory pass: one warm-up call, then the
                    // measured one (the times come from the run without --rss).
                    f()?;
                    let (r, peak) = rss_peak_extra(f)?;
                    r?;
                    let mb = peak as f64 / 1e6;
                    writeln!(out, "{name:<NAME_WIDTH$} {:>10} {:>10} {mb:>12.2} {:>6}", "-", "-", 1)?;
                    records.push(rec(name.replacen("attn_", "attnrss_", 1), "MB", mb, false));
                    return Ok(());
                }
                let m = time_call(sizes.timing, || f().map(drop))?;
                let (r, peak) = peak_extra(f);
                r?;
                let gflops = flops / m.median_seconds / 1e9;
                let mb = peak as f64 / 1e6;
                let ms = m.median_seconds * 1e3;
                writeln!(out, "{name:<NAME_WIDTH$} {ms:>10.2} {gflops:>10.2} {mb:>12.2} {:>6}", m.calls)?;
                out.flush()?;
                records.push(rec(name.clone(), "GFLOP/s", gflops, true));
                records.push(rec(name.replacen("attn_", "attnmem_", 1), "MB", mb, false));
                Ok(())
            };
            one(format!("attn_fwd_{tag}"), flops, &forward)?;
            one(format!("attn_fwdbwd_{tag}"), 3.5 * flops, &both)?;
        }
    }
    Ok(records)
}
