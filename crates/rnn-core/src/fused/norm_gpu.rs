//! LayerNorm / RMSNorm programs for CUDA and WGSL: the forward (`norm.cu` / `norm.wgsl`,
//! one block per row), the input gradient (`norm_backward`, one block per row) and the
//! weight and bias gradients (`norm_params`, one thread per column). Inputs with another
//! layout than a contiguous one are copied first, so the kernels index rows directly.

use super::attention::stat_dtype;
use super::norm::{Norm, NormBackward};
use super::rows::{contiguous_arg, float_only, float_word};
use super::FusedOp;
use crate::gpu::elementwise::template;
use crate::gpu::plan::{Arg, Grid, KernelSource, Program};
use crate::gpu::target::{Lang, Target, BLOCK};
use crate::{DType, Layout, Result};

/// Which kernel of the family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    Forward,
    Backward,
    Params,
}

impl Pass {
    const ALL: [Pass; 3] = [Pass::Forward, Pass::Backward, Pass::Params];

    fn label(self) -> &'static str {
        match self {
            Pass::Forward => "forward",
            Pass::Backward => "backward",
            Pass::Params => "params",
        }
    }
}

fn source(target: &Target, pass: Pass, rms: bool, dtype: DType) -> Result<KernelSource> {
    float_only("layer_norm", dtype)?;
    let t = target.elem_type("layer_norm", dtype)?;
    let tmpl = match pass {
        Pass::Forward => template(target, rnn_kernels::cuda::NORM, rnn_kernels::wgsl::NORM),
        Pass::Backward => template(target, rnn_kernels::cuda::NORM_BACKWARD, rnn_kernels::wgsl::NORM_BACKWARD),
        Pass::Params => template(target, rnn_kernels::cuda::NORM_PARAMS, rnn_kernels::wgsl::NORM_PARAMS),
    };
    let rms = if rms { "true" } else { "false" };
    let subs = [("T", t), ("C", target.compute_type(dtype)), ("rms", rms)];
    Ok(KernelSource::new(target, tmpl, &subs, target.needs_half(&[dtype])))
}

fn variant(pass: Pass, rms: bool, dtype: DType) -> String {
    // The params kernel does not depend on `rms` (a flag word says whether there is a mean).
    match pass {
        Pass::Params => format!("norm/params/{dtype}"),
        _ => format!("{}/{}/{dtype}", if rms { "rms_norm" } else { "layer_norm" }, pass.label()),
    }
}

/// Every kernel of the family for `target`.
pub(crate) fn variants(target: &Target) -> Vec<(String, KernelSource)> {
    let mut v = Vec::new();
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for pass in Pass::ALL {
            for rms in [false, true] {
                if pass == Pass::Params && rms {
                    continue;
                }
                if let Ok(s) = source(target, pass, rms, dtype) {
                    v.push((variant(pass, rms, dtype), s));
                }
            }
        }
    }
    v
}

/// Threads per block of a one-block-per-row kernel: CUDA blocks as wide as the row (up to
/// `BLOCK`), so short rows leave no thread idle; WGSL fixes the size in the shader.
fn row_threads(target: &Target, n: usize) -> u32 {
    match target.lang {
        Lang::Cuda => (n.min(BLOCK).next_power_of_two() as u32).clamp(32, BLOCK as u32),
        Lang::Wgsl => BLOCK as u32,
    }
}

/// rows and row length of a layout normalized over its last dim.
fn rows_of(l: &Layout) -> (usize, usize) {
    let dims = l.dims();
    (dims[..dims.len() - 1].iter().product(), dims[dims.len() - 1])
}

pub(crate) fn forward(op: &Norm, target: &Target, inputs: &[(DType, &Layout, usize)]) -> Result<Program> {
    let (dtype, xl, _) = inputs[0];
    let (rows, n) = rows_of(xl);
    let stat = stat_dtype(dtype);
    let mut outputs = vec![(dtype, rows * n)];
    outputs.extend(std::iter::repeat_n((stat, rows), if op.rms { 1 } else { 2 }));
    let mut p = Program::with_outputs(target, op.name(), &outputs);
    let (x, x0) = contiguous_arg(&mut p, Arg::Input(0), dtype, xl)?;
    let mut params = inputs[1..].iter().enumerate().map(|(i, (_, l, _))| (i + 1, *l));
    let mut param = |p: &mut Program, present: bool| match present.then(|| params.next()).flatten() {
        Some((i, l)) => contiguous_arg(p, Arg::Input(i), dtype, l),
        None => Ok((x, x0)),
    };
    let (w, w0) = param(&mut p, op.weight)?;
    let (b, b0) = param(&mut p, op.bias)?;
    let (mean, rstd) = match op.rms {
        true => (p.temp(stat, 1), Arg::Temp(1)),
        false => (Arg::Temp(1), Arg::Temp(2)),
    };
    let eps = float_word(target, op.eps);
    let scalars = [rows, n, x0, w0, b0, op.weight as usize, op.bias as usize, eps];
    let info = target.info(op.name(), &scalars, &[])?;
    let grid = Grid::Blocks(rows, row_threads(target, n));
    p.kernel(
        source(target, Pass::Forward, op.rms, dtype)?,
        variant(Pass::Forward, op.rms, dtype),
        grid,
        &[x, w, b, Program::OUT, mean, rstd],
        info,
    )?;
    Ok(p)
}

pub(crate) fn backward(op: &NormBackward, target: &Target, inputs: &[(DType, &Layout, usize)]) -> Result<Program> {
    let fwd = op.fwd;
    let (dtype, xl, _) = inputs[0];
    let (rows, n) = rows_of(xl);
    let params = fwd.weight as usize + fwd.bias as usize;
    let mut outputs = vec![(dtype, rows * n)];
    outputs.extend(std::iter::repeat_n((dtype, n), params));
    let name = op.name();
    let mut p = Program::with_outputs(target, name, &outputs);
    let arg = |p: &mut Program, i: usize| contiguous_arg(p, Arg::Input(i), inputs[i].0, inputs[i].1);
    let (x, x0) = arg(&mut p, 0)?;
    let (g, g0) = arg(&mut p, 1)?;
    let stats = if fwd.rms { 1 } else { 2 };
    let (rstd, r0) = arg(&mut p, 1 + stats)?;
    let (mean, m0) = if fwd.rms { (rstd, r0) } else { arg(&mut p, 2)? };
    let (w, w0) = if fwd.weight { arg(&mut p, 2 + stats)? } else { (x, x0) };
    let info = target.info(name, &[rows, n, x0, g0, w0, fwd.weight as usize, m0, r0], &[])?;
    let grid = Grid::Blocks(rows, row_threads(target, n));
    let dx_source = source(target, Pass::Backward, fwd.rms, dtype)?;
    p.kernel(dx_source, variant(Pass::Backward, fwd.rms, dtype), grid, &[x, g, w, mean, rstd, Program::OUT], info)?;
    if params > 0 {
        // Outputs 1 and 2 are dw then db; a missing one is written to a scratch buffer.
        let mut next = 1;
        let mut out = |p: &mut Program, present: bool| match present {
            true => {
                next += 1;
                Arg::Temp(next - 1)
            }
            false => p.temp(dtype, n),
        };
        let (dw, db) = (out(&mut p, fwd.weight), out(&mut p, fwd.bias));
        let info = target.info(name, &[rows, n, x0, g0, m0, r0, usize::from(!fwd.rms)], &[])?;
        let params_source = source(target, Pass::Params, false, dtype)?;
        p.kernel(
            params_source,
            variant(Pass::Params, fwd.rms, dtype),
            Grid::Threads(n),
            &[x, g, mean, rstd, dw, db],
            info,
        )?;
    }
    Ok(p)
}
