//! The host side of the GPU backends, written once: plan builders (`elementwise`, `reduce`,
//! `index`, `window`, `matmul`, `gemm`) turn an op and its layouts into a `Program` for a
//! `Target`, and `run` executes a program on any runtime that implements `GpuStorage`
//! (cudarc, wgpu, the host emulator of CUDA). Every `BackendStorage` method of a GPU
//! storage comes from the blanket impl below. Index checks of a program are evaluated at
//! the next sync point rather than after the program (`deferred`).

// Without a GPU backend the plans are only built by tests.
#![cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]

pub(crate) mod deferred;
pub(crate) mod elementwise;
pub(crate) mod gemm;
pub(crate) mod index;
pub(crate) mod matmul;
pub(crate) mod matmul_unit;
pub(crate) mod optim;
pub(crate) mod plan;
pub(crate) mod reduce;
pub(crate) mod target;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) mod user_kernel;
pub(crate) mod variants;
pub(crate) mod window;

use self::deferred::Deferred;
use self::gemm::GemmLaunch;
use self::plan::{Arg, KernelPlan, Launch, Program};
use self::target::Target;
use crate::cpu::CpuStorage;
use crate::fused::FusedOp;
use crate::op_table::{BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::storage::{BackendStorage, Storage};
use crate::window::Window2d;
use crate::{DType, Device, Error, Layout, Result};

/// Whether a runtime ran a product with its fused epilogue (CUDA runtimes only).
#[cfg_attr(not(any(feature = "cuda", feature = "cuda-emu")), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GemmOutcome {
    Done,
    /// No fused kernel for this epilogue: the product was not run.
    EpilogueUnsupported,
}

/// The buffers of a `GemmLaunch`.
#[cfg_attr(not(any(feature = "cuda", feature = "cuda-emu")), allow(dead_code))]
pub(crate) struct GemmBuffers<'a, S> {
    pub a: &'a S,
    pub b: &'a S,
    pub d: &'a S,
    pub bias: Option<&'a S>,
}

/// A GPU runtime's storage: a buffer of one dtype on one device, and the few primitives a
/// program needs. Everything else is shared.
pub(crate) trait GpuStorage: Clone + std::fmt::Debug + Sized + 'static {
    fn elem_dtype(&self) -> DType;
    /// The number of elements.
    fn len(&self) -> usize;
    fn ordinal(&self) -> usize;
    /// The device `ordinal` of this runtime.
    fn device_of(ordinal: usize) -> Device;
    /// The target plans for device `ordinal` are built for (opening it if need be).
    fn target_of(ordinal: usize) -> Result<Target>;
    /// An uninitialized buffer of `len` elements of `dtype` on device `ordinal`.
    fn alloc(ordinal: usize, dtype: DType, len: usize) -> Result<Self>;
    fn upload(cpu: &CpuStorage, ordinal: usize) -> Result<Self>;
    /// Reads the buffer back (waits for the ops queued before). Pending index checks are not
    /// looked at: `to_cpu` (`deferred::download`) does that.
    fn download(&self) -> Result<CpuStorage>;
    /// Reads several buffers of one device back, in one wait where the runtime can.
    fn download_all(all: &[&Self]) -> Result<Vec<CpuStorage>> {
        all.iter().map(|s| s.download()).collect()
    }
    /// This runtime's index checks pending on the calling thread (`deferred.rs`); each
    /// runtime keeps them in a `thread_local!`.
    fn deferred() -> &'static std::thread::LocalKey<Deferred<Self>>;
    /// Queues `plan` with `args` (its buffers, in order; never empty).
    fn launch(plan: &KernelPlan, args: &[&Self]) -> Result<()>;
    /// Queues a product. Runtimes without one never get a `GemmLaunch` (`Target::gemm`).
    fn gemm(g: &GemmLaunch, buffers: GemmBuffers<'_, Self>) -> Result<GemmOutcome> {
        let _ = (g, buffers);
        Err(Error::Msg("internal: this GPU runtime has no gemm".into()))
    }
    /// This runtime's storage inside a `Storage`, if it is one.
    fn of(s: &Storage) -> Option<&Self>;
    /// The device address of element 0, for kernels that read buffer addresses from a table
    /// (the multi-tensor optimizer update, `optim.rs`); `None` where kernels cannot follow
    /// addresses (WGSL).
    fn device_address(&self) -> Option<u64> {
        None
    }
}

/// The buffer `a` names.
fn buffer<'a, S>(op: &'static str, inputs: &[&'a S], temps: &'a [S], a: Arg) -> Result<&'a S> {
    let found = match a {
        Arg::Input(i) => inputs.get(i).copied(),
        Arg::Temp(j) => temps.get(j),
    };
    found.ok_or_else(|| Error::Msg(format!("internal: {op} plan names a missing buffer {a:?}")))
}

fn buffers<'a, S>(op: &'static str, inputs: &[&'a S], temps: &'a [S], args: &[Arg]) -> Result<Vec<&'a S>> {
    args.iter().map(|&a| buffer(op, inputs, temps, a)).collect()
}

/// Runs `p` on device `ordinal` with `inputs`; returns the result buffer.
pub(crate) fn run<S: GpuStorage>(ordinal: usize, inputs: &[&S], p: &Program) -> Result<S> {
    run_outputs(ordinal, inputs, p)?
        .into_iter()
        .next()
        .ok_or_else(|| Error::Msg(format!("internal: {} plan has no result", p.op)))
}

/// Runs `p` on device `ordinal` with `inputs`; returns its `p.outputs` result buffers.
pub(crate) fn run_outputs<S: GpuStorage>(ordinal: usize, inputs: &[&S], p: &Program) -> Result<Vec<S>> {
    let mut temps = p.temps.iter().map(|&(d, n)| S::alloc(ordinal, d, n)).collect::<Result<Vec<S>>>()?;
    for launch in &p.launches {
        match launch {
            Launch::Kernel(k) => S::launch(k, &buffers(p.op, inputs, &temps, &k.args)?)?,
            Launch::Gemm(g) => {
                if let Some(d) = run_gemm(ordinal, p.op, g, inputs, &temps)? {
                    let Arg::Temp(j) = g.d.arg else {
                        return Err(Error::Msg(format!("internal: {} writes a product into an input", p.op)));
                    };
                    temps[j] = d;
                }
            }
        }
    }
    if let Some(c) = &p.check {
        let (flag, ids) =
            (buffer(p.op, inputs, &temps, Arg::Temp(c.flag))?, buffer(p.op, inputs, &temps, Arg::Input(c.ids))?);
        deferred::defer(ordinal, c, flag, ids)?;
    }
    temps.truncate(p.outputs);
    Ok(temps)
}

/// A product. Where the runtime has no fused kernel for its epilogue, the product alone,
/// then the fallback program, whose result replaces the product's output (returned).
fn run_gemm<S: GpuStorage>(
    ordinal: usize,
    op: &'static str,
    g: &GemmLaunch,
    inputs: &[&S],
    temps: &[S],
) -> Result<Option<S>> {
    let get = |a| buffer(op, inputs, temps, a);
    let bias = g.bias.map(|(_, arg, _)| get(arg)).transpose()?;
    let with = |bias| Ok::<_, Error>(GemmBuffers { a: get(g.a.arg)?, b: get(g.b.arg)?, d: get(g.d.arg)?, bias });
    if S::gemm(g, with(bias)?)? == GemmOutcome::Done {
        return Ok(None);
    }
    let (Some(fallback), Some(bias)) = (&g.fallback, bias) else {
        return Err(Error::Msg(format!("internal: {op}: no fallback for an unsupported epilogue")));
    };
    S::gemm(&GemmLaunch { bias: None, fallback: None, ..g.clone() }, with(None)?)?;
    run(ordinal, &[get(g.d.arg)?, bias], fallback).map(Some)
}

/// Builds a program for `x`'s device and runs it with `inputs`.
fn exec<S: GpuStorage>(x: &S, inputs: &[&S], build: impl FnOnce(&Target) -> Result<Program>) -> Result<S> {
    let program = build(&S::target_of(x.ordinal())?)?;
    run(x.ordinal(), inputs, &program)
}

impl<S: GpuStorage> BackendStorage for S {
    fn dtype(&self) -> DType {
        self.elem_dtype()
    }
    fn device(&self) -> Device {
        S::device_of(self.ordinal())
    }
    fn to_cpu(&self) -> Result<CpuStorage> {
        deferred::download(self)
    }
    fn from_cpu(cpu: &CpuStorage, ordinal: usize) -> Result<Self> {
        S::upload(cpu, ordinal)
    }
    fn full(value: f64, n: usize, dtype: DType, ordinal: usize) -> Result<Self> {
        run::<S>(ordinal, &[], &elementwise::fill(&S::target_of(ordinal)?, value, n, dtype)?)
    }
    fn unary(&self, l: &Layout, op: UnaryOp) -> Result<Self> {
        exec(self, &[self], |t| elementwise::unary(t, op, self.dtype(), l))
    }
    fn binary(&self, l: &Layout, rhs: &Self, rl: &Layout, op: BinaryOp) -> Result<Self> {
        exec(self, &[self, rhs], |t| elementwise::binary(t, op, (self.dtype(), l), (rhs.dtype(), rl)))
    }
    fn cmp(&self, l: &Layout, rhs: &Self, rl: &Layout, op: CmpOp) -> Result<Self> {
        exec(self, &[self, rhs], |t| elementwise::cmp(t, op, (self.dtype(), l), (rhs.dtype(), rl)))
    }
    fn where_cond(&self, l: &Layout, on_true: &Self, tl: &Layout, on_false: &Self, fl: &Layout) -> Result<Self> {
        let operands = ((self.dtype(), l), (on_true.dtype(), tl), (on_false.dtype(), fl));
        exec(self, &[self, on_true, on_false], |t| elementwise::where_cond(t, operands.0, operands.1, operands.2))
    }
    fn reduce(&self, l: &Layout, op: ReduceOp, dims: &[usize]) -> Result<Self> {
        exec(self, &[self], |t| reduce::reduce(t, op, self.dtype(), l, dims))
    }
    fn matmul(&self, l: &Layout, rhs: &Self, rl: &Layout) -> Result<Self> {
        exec(self, &[self, rhs], |t| matmul::matmul(t, (self.dtype(), l, self.len()), (rhs.dtype(), rl, rhs.len())))
    }
    fn to_dtype(&self, l: &Layout, dtype: DType) -> Result<Self> {
        exec(self, &[self], |t| elementwise::copy(t, self.dtype(), l, dtype))
    }
    fn copy_strided(&self, l: &Layout) -> Result<Self> {
        exec(self, &[self], |t| elementwise::copy(t, self.dtype(), l, self.dtype()))
    }
    fn cat(parts: &[(&Self, &Layout)], dim: usize) -> Result<Self> {
        let (first, _) = parts.first().ok_or_else(|| Error::invalid("cat", "no tensors given"))?;
        if let Some((other, _)) = parts.iter().find(|(s, _)| s.dtype() != first.dtype()) {
            return Err(Error::DTypeMismatch { op: "cat", lhs: first.dtype(), rhs: other.dtype() });
        }
        let (inputs, layouts): (Vec<&Self>, Vec<&Layout>) = parts.iter().copied().unzip();
        exec(*first, &inputs, |t| elementwise::cat(t, first.dtype(), &layouts, dim))
    }
    fn index_select(&self, l: &Layout, ids: &Self, il: &Layout, dim: usize) -> Result<Self> {
        exec(self, &[self, ids], |t| index::index_select(t, (self.dtype(), l), (ids.dtype(), il), dim))
    }
    fn gather(&self, l: &Layout, ids: &Self, il: &Layout, dim: usize) -> Result<Self> {
        exec(self, &[self, ids], |t| index::gather(t, (self.dtype(), l), (ids.dtype(), il), dim))
    }
    fn scatter_add(&self, l: &Layout, ids: &Self, il: &Layout, src: &Self, sl: &Layout, dim: usize) -> Result<Self> {
        let operands = ((self.dtype(), l), (ids.dtype(), il), (src.dtype(), sl));
        exec(self, &[self, ids, src], |t| index::scatter_add(t, operands.0, operands.1, operands.2, dim))
    }
    fn unfold2d(&self, l: &Layout, w: &Window2d, pad_value: f64) -> Result<Self> {
        exec(self, &[self], |t| window::unfold2d(t, self.dtype(), l, w, pad_value))
    }
    fn fold2d(&self, l: &Layout, out_hw: (usize, usize), w: &Window2d) -> Result<Self> {
        exec(self, &[self], |t| window::fold2d(t, self.dtype(), l, out_hw, w))
    }
    fn fused(op: &dyn FusedOp, inputs: &[(&Self, &Layout)]) -> Result<Option<Vec<Self>>> {
        let (first, _) = inputs.first().ok_or_else(|| Error::invalid(op.name(), "no inputs"))?;
        let target = S::target_of(first.ordinal())?;
        let descs: Vec<_> = inputs.iter().map(|(s, l)| (s.dtype(), *l, s.len())).collect();
        let Some(program) = op.gpu(&target, &descs)? else {
            return Ok(None);
        };
        let storages: Vec<&Self> = inputs.iter().map(|(s, _)| *s).collect();
        run_outputs(first.ordinal(), &storages, &program).map(Some)
    }
}
