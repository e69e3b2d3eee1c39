//! Kernel plans: a GPU op as pure data, built once for both GPU runtimes. A `Program` is
//! the buffers an op needs beyond its inputs and the launches that fill them; each
//! `KernelPlan` names its kernel by a short key (template and substitutions), says how to
//! launch it and with which buffers and `Info` words. A runtime (cudarc, wgpu, the host
//! emulator) only allocates buffers and launches plans: it never looks at layouts.

use std::fmt::Write;

use super::gemm::GemmLaunch;
use super::target::{Lang, Target, BLOCK, CUDA_INFO_WORDS};
use crate::{DType, Error, Layout, Result, Shape};

/// The rank word of a contiguous layout in `Info`: kernels then index it as `start + i`
/// without per-dim arithmetic (`strided_offset` in common.cuh / common.wgsl).
pub(crate) const CONTIGUOUS: u64 = 0xffff_ffff;

/// A kernel's text: a template of rnn-kernels and the values of its `{{name}}` placeholders.
///
/// `key` names it exactly (the template's address and length, every substitution with its
/// length, the half flag), so a runtime finds a loaded kernel by a short string and fills the
/// source text, several KiB, in only when the key is new.
#[derive(Clone, Debug)]
pub(crate) struct KernelSource {
    lang: Lang,
    template: &'static str,
    subs: Vec<(&'static str, String)>,
    half: bool,
    key: String,
}

impl KernelSource {
    /// `template` with `subs` (placeholder, value); `half` when it touches f16 / bf16.
    pub fn new(target: &Target, template: &'static str, subs: &[(&'static str, &str)], half: bool) -> KernelSource {
        let mut key = format!("{:x}+{}", template.as_ptr() as usize, template.len());
        for (name, value) in subs {
            // The length makes the key unambiguous whatever characters the values hold.
            let _ = write!(key, "|{name}={}:{value}", value.len());
        }
        if half {
            key.push_str("|half");
        }
        let subs = subs.iter().map(|(k, v)| (*k, v.to_string())).collect();
        KernelSource { lang: target.lang, template, subs, half, key }
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    #[cfg(all(test, feature = "cuda-emu"))]
    pub fn lang(&self) -> Lang {
        self.lang
    }

    /// The full source: the language's shared helpers, then the filled template. A CUDA
    /// kernel on half types defines `RNN_HALF` first (common.cuh then includes the fp16 /
    /// bf16 headers); a WGSL one enables f16.
    pub fn text(&self) -> String {
        let mut body = self.template.to_string();
        for (name, value) in &self.subs {
            body = body.replace(&format!("{{{{{name}}}}}"), value);
        }
        debug_assert!(!body.contains("{{"), "unfilled placeholder in kernel:\n{body}");
        let (prelude, common) = match self.lang {
            Lang::Cuda => ("#define RNN_HALF\n", rnn_kernels::cuda::COMMON),
            Lang::Wgsl => ("enable f16;\n", rnn_kernels::wgsl::COMMON),
        };
        format!("{}{common}\n{body}", if self.half { prelude } else { "" })
    }
}

/// A launch configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LaunchDims {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
}

/// How much parallel work a launch has; `Target::launch_dims` turns it into a grid.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Grid {
    /// One thread per element, `BLOCK` threads per block (kernels loop with a grid stride).
    Threads(usize),
    /// `blocks` blocks of `threads` threads (kernels loop over blocks with a grid stride).
    Blocks(usize, u32),
    /// An exact grid of `[x, y, z]` blocks of `threads` threads, for kernels that do not loop.
    Exact([u32; 3], u32),
}

impl Grid {
    fn is_empty(self) -> bool {
        match self {
            Grid::Threads(n) | Grid::Blocks(n, _) => n == 0,
            Grid::Exact(g, _) => g.contains(&0),
        }
    }
}

impl Target {
    /// The launch dimensions of `grid`: grid-stride grids are capped at `max_grid` blocks.
    pub fn launch_dims(&self, op: &'static str, grid: Grid) -> Result<LaunchDims> {
        let capped = |blocks: usize| blocks.clamp(1, self.max_grid) as u32;
        let (grid, threads) = match grid {
            Grid::Threads(n) => ([capped(n.div_ceil(BLOCK)), 1, 1], BLOCK as u32),
            Grid::Blocks(blocks, threads) => ([capped(blocks), 1, 1], threads),
            Grid::Exact(g, threads) => {
                if g.iter().any(|&d| d as usize > self.max_grid) {
                    return Err(Error::invalid(op, format!("a grid of {g:?} blocks exceeds the device's grid")));
                }
                (g, threads)
            }
        };
        Ok(LaunchDims { grid, block: [threads, 1, 1], shared_bytes: 0 })
    }

    /// The `Info` words of a kernel: `scalars`, then the base position of each layout, then
    /// the layouts (rank, start offset, dims, strides; a contiguous layout is `CONTIGUOUS`,
    /// start offset). `strided_offset` in common.cuh and common.wgsl reads this format.
    pub fn info(&self, op: &'static str, scalars: &[usize], layouts: &[&Layout]) -> Result<Vec<u64>> {
        let mut words: Vec<u64> = scalars.iter().map(|&s| s as u64).collect();
        let mut base = scalars.len() + layouts.len();
        for l in layouts {
            words.push(base as u64);
            base += if l.is_contiguous() { 2 } else { 2 + 2 * l.dims().len() };
        }
        for l in layouts {
            if l.is_contiguous() {
                words.extend([CONTIGUOUS, l.start_offset() as u64]);
            } else {
                words.extend([l.dims().len() as u64, l.start_offset() as u64]);
                words.extend(l.dims().iter().map(|&d| d as u64));
                words.extend(l.strides().iter().map(|&s| s as u64));
            }
        }
        self.check_info(op, &words)?;
        Ok(words)
    }

    fn check_info(&self, op: &'static str, words: &[u64]) -> Result<()> {
        if self.lang == Lang::Cuda && words.len() > CUDA_INFO_WORDS {
            let msg =
                format!("too many dims for a CUDA kernel ({} info words, at most {CUDA_INFO_WORDS})", words.len());
            return Err(Error::invalid(op, msg));
        }
        // The contiguous marker is the one word that may reach the maximum.
        match words.iter().find(|&&w| w > self.word_max()) {
            Some(w) => Err(Error::invalid(op, format!("size {w} exceeds the wgpu backend's 32-bit indexing"))),
            None => Ok(()),
        }
    }
}

/// A buffer a launch reads or writes: one of the program's inputs, or one of its temporaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arg {
    Input(usize),
    Temp(usize),
}

/// One kernel launch.
#[derive(Clone, Debug)]
pub(crate) struct KernelPlan {
    pub op: &'static str,
    pub source: KernelSource,
    /// What this launch exercises: the kernel variant and its work split, as listed by
    /// `variants` (the coverage unit of the CUDA emulator tests).
    pub variant: String,
    pub dims: LaunchDims,
    /// The buffers, in the kernel's parameter order after `info`.
    pub args: Vec<Arg>,
    pub info: Vec<u64>,
}

/// One step of a program.
#[derive(Clone, Debug)]
pub(crate) enum Launch {
    Kernel(KernelPlan),
    Gemm(GemmLaunch),
}

/// Indices a kernel range-checked: when the flag word holds a position, the op fails with
/// the index found there, as the CPU reports it.
#[derive(Clone, Debug)]
pub(crate) struct IdCheck {
    pub op: &'static str,
    /// The temporary holding the first bad position (all ones while there is none).
    pub flag: usize,
    /// The input holding the ids, walked through `layout` in the CPU's order.
    pub ids: usize,
    pub layout: Layout,
    /// The size of the indexed dim and the shape of the indexed tensor, for the error.
    pub size: usize,
    pub shape: Shape,
}

/// An op as buffers and launches. `temps[0]` is the result; a fused op with extra outputs
/// (`Program::outputs`) returns `temps[..outputs]`.
#[derive(Clone, Debug)]
pub(crate) struct Program {
    pub op: &'static str,
    pub target: Target,
    pub temps: Vec<(DType, usize)>,
    /// How many leading temporaries are results (1 but for fused ops with saved outputs).
    pub outputs: usize,
    pub launches: Vec<Launch>,
    pub check: Option<IdCheck>,
}

impl Program {
    /// A program whose result is a fresh `len`-element buffer of `dtype`.
    pub fn new(target: &Target, op: &'static str, dtype: DType, len: usize) -> Program {
        Program { op, target: *target, temps: vec![(dtype, len)], launches: Vec::new(), check: None, outputs: 1 }
    }

    /// A program whose results are fresh buffers of these (dtype, length)s: `Arg::Temp(i)`
    /// is result `i` (a fused op's output, then the extra outputs it saves).
    pub fn with_outputs(target: &Target, op: &'static str, outputs: &[(DType, usize)]) -> Program {
        let temps = outputs.to_vec();
        Program { op, target: *target, outputs: temps.len(), temps, launches: Vec::new(), check: None }
    }

    /// The result buffer.
    pub const OUT: Arg = Arg::Temp(0);

    /// A further temporary buffer.
    pub fn temp(&mut self, dtype: DType, len: usize) -> Arg {
        self.temps.push((dtype, len));
        Arg::Temp(self.temps.len() - 1)
    }

    /// Appends a launch of `source` over `grid` (nothing when the grid is empty).
    pub fn kernel(
        &mut self,
        source: KernelSource,
        variant: String,
        grid: Grid,
        args: &[Arg],
        info: Vec<u64>,
    ) -> Result<()> {
        self.kernel_shared(source, variant, (grid, 0), args, info)
    }

    /// `kernel` whose blocks get `shared_bytes` of dynamic shared memory (CUDA; WGSL
    /// declares its workgroup memory in the shader). Past the default 48 KiB per block the
    /// CUDA backend raises the kernel's cap, up to the device's opt-in maximum, when it loads
    /// the kernel: a source launched with more than 48 KiB must always be.
    pub fn kernel_shared(
        &mut self,
        source: KernelSource,
        variant: String,
        (grid, shared_bytes): (Grid, u32),
        args: &[Arg],
        info: Vec<u64>,
    ) -> Result<()> {
        if grid.is_empty() {
            return Ok(());
        }
        let dims = LaunchDims { shared_bytes, ..self.target.launch_dims(self.op, grid)? };
        let plan = KernelPlan { op: self.op, source, variant, dims, args: args.to_vec(), info };
        self.launches.push(Launch::Kernel(plan));
        Ok(())
    }
}
