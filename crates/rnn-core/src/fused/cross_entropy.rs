//! Fused softmax-cross-entropy from logits (`Tensor::cross_entropy_logits`, PyTorch's
//! `F.cross_entropy(logits, targets, reduction="none", ignore_index, label_smoothing)` for
//! `[N, C]` logits and class ids): per row, `lse = log(sum(exp(x)))` (saved for the backward)
//! and `loss = lse - (1 - s) x[t] - s mean(x)` (label smoothing `s`), 0 for an ignored row.
//! The backward (`CrossEntropyBackward`) writes `dx = g (softmax(x) - (1 - s) onehot(t) - s/C)`
//! from the logits and the saved `lse`: the probabilities are never stored.
//!
//! A class id out of range (and not ignored) is an `Error::IndexOutOfRange`: at once on the
//! CPU; on a GPU the kernel records it and it is reported at the next sync point
//! (`gpu/deferred.rs`), as index ops do. Kernels: `cross_entropy.cu` / `.wgsl` (one block per
//! row) and `cross_entropy_backward.cu` / `.wgsl` (one thread per element).

use std::sync::Arc;

use super::attention::stat_dtype;
use super::rows::{compute_slice, contiguous_arg, float_only, float_word, map_row_chunks, store, Compute};
use super::{FusedKernels, FusedOp};
use crate::autocast::AutocastOp;
use crate::cpu::simd::fold_lanes;
use crate::cpu::strided::StridedIndex;
use crate::cpu::CpuStorage;
use crate::gpu::elementwise::template;
use crate::gpu::index::add_check;
use crate::gpu::plan::{Arg, Grid, KernelSource, Program};
use crate::gpu::target::{Lang, Target, BLOCK};
use crate::gpu::variants::ID_DTYPES;
use crate::{DType, Error, Layout, Result, Shape, Tensor};

const OP: &str = "cross_entropy";

/// Inputs: logits `[N, C]` (float), class ids `[N]` (u8, u32 or i64). Output: the loss of
/// each row `[N]`; saved: the log-sum-exp of each row `[N]` (f32, f64 for f64 logits).
#[derive(Clone, Copy, Debug)]
pub(crate) struct CrossEntropy {
    pub smoothing: f64,
    pub ignore: Option<i64>,
}

impl CrossEntropy {
    fn ignored(&self, id: i64) -> bool {
        self.ignore == Some(id)
    }

    /// The ids as the CPU reads them, each checked against `classes` unless ignored.
    fn checked_ids(&self, ids: &CpuStorage, l: &Layout, classes: usize, shape: &[usize]) -> Result<Vec<i64>> {
        let ids = ids.indices_at(OP, StridedIndex::new(l))?;
        let bad = ids.iter().find(|&&id| !self.ignored(id) && !(0..classes as i64).contains(&id));
        if let Some(&index) = bad {
            return Err(Error::IndexOutOfRange { op: OP, index, size: classes, shape: shape.into() });
        }
        Ok(ids)
    }

    fn cpu_in<F: Compute>(&self, inputs: &[(&CpuStorage, &Layout)]) -> Result<Vec<CpuStorage>> {
        let ((xs, xl), (ids, il)) = (inputs[0], inputs[1]);
        let (rows, classes) = (xl.dims()[0], xl.dims()[1]);
        let ids = self.checked_ids(ids, il, classes, xl.dims())?;
        let x = compute_slice::<F>(xs, xl)?;
        let mut loss = crate::cpu::parallel::zeroed_vec::<F>(rows)?;
        let mut lse = crate::cpu::parallel::zeroed_vec::<F>(rows)?;
        let s = F::c(self.smoothing);
        map_row_chunks(rows, (&mut loss, 1), (&mut lse, 1), classes * 8, |first, loss, lse| {
            for (r, (loss, lse)) in loss.iter_mut().zip(lse.iter_mut()).enumerate() {
                let i = first + r;
                let row = &x[i * classes..(i + 1) * classes];
                *lse = log_sum_exp(row);
                if self.ignored(ids[i]) {
                    continue;
                }
                *loss = *lse - (F::c(1.0) - s) * row[ids[i] as usize];
                if self.smoothing > 0.0 {
                    let sum = fold_lanes(row, F::c(0.0), |v| v, |a, b| a + b);
                    *loss = *loss - s * sum / F::c(classes as f64);
                }
            }
        });
        Ok(vec![store(loss, xs.dtype())?, F::into_storage(lse)])
    }
}

/// `log(sum(exp(x)))` of a row, shifted by its max (which skips NaN, as the GPU kernels'
/// does; a NaN still makes the result NaN through the sum).
fn log_sum_exp<F: Compute>(x: &[F]) -> F {
    let max = fold_lanes(x, F::neg_infinity(), |v| v, |a, b| if b > a { b } else { a });
    let sum = fold_lanes(x, F::c(0.0), |v| (v - max).vexp(), |a, b| a + b);
    max + sum.ln()
}

fn check(op: &CrossEntropy, inputs: &[&Tensor]) -> Result<()> {
    let (logits, ids) = (inputs[0], inputs[1]);
    float_only(OP, logits.dtype())?;
    logits.expect_rank(OP, 2)?;
    if ids.dtype().is_float() {
        return Err(Error::UnsupportedDType { op: OP, dtype: ids.dtype(), hint: ": class ids must be u8, u32 or i64" });
    }
    if ids.dims() != [logits.dims()[0]] {
        let msg = format!("targets of shape {:?} do not match logits of shape {:?}", ids.dims(), logits.dims());
        return Err(Error::invalid(OP, msg));
    }
    if !(0.0..=1.0).contains(&op.smoothing) {
        return Err(Error::invalid(OP, format!("label_smoothing must be in [0, 1], got {}", op.smoothing)));
    }
    Ok(())
}

impl FusedOp for CrossEntropy {
    fn autocast(&self) -> Option<AutocastOp> {
        Some(AutocastOp::Loss)
    }

    fn name(&self) -> &'static str {
        OP
    }

    fn output(&self, inputs: &[&Tensor]) -> Result<(Shape, DType)> {
        check(self, inputs)?;
        Ok((Shape::from(vec![inputs[0].dims()[0]]), inputs[0].dtype()))
    }

    fn saved(&self, inputs: &[&Tensor]) -> Result<Vec<(Shape, DType)>> {
        Ok(vec![(Shape::from(vec![inputs[0].dims()[0]]), stat_dtype(inputs[0].dtype()))])
    }

    fn cpu(&self, inputs: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>> {
        match inputs[0].0.dtype() {
            DType::F64 => self.cpu_in::<f64>(inputs).map(Some),
            _ => self.cpu_in::<f32>(inputs).map(Some),
        }
    }

    fn gpu(&self, target: &Target, inputs: &[(DType, &Layout, usize)]) -> Result<Option<Program>> {
        forward_program(self, target, inputs).map(Some)
    }

    fn backward(&self, inputs: &[Tensor], saved: &[Tensor], _: &Tensor, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let lse = saved.first().ok_or_else(|| Error::Msg(format!("internal: {OP} saved no log-sum-exp")))?;
        let op = CrossEntropyBackward { fwd: *self };
        let dx = Tensor::fused(Arc::new(op), &[&inputs[0], &inputs[1], lse, g])?;
        Ok(vec![inputs[0].tracks_grad().then_some(dx), None])
    }
}

/// The gradient of `CrossEntropy`. Inputs: logits, ids, the saved log-sum-exp, the gradient
/// of each row's loss `[N]`. Output: the logits' gradient.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CrossEntropyBackward {
    pub fwd: CrossEntropy,
}

impl CrossEntropyBackward {
    fn cpu_in<F: Compute>(&self, inputs: &[(&CpuStorage, &Layout)]) -> Result<Vec<CpuStorage>> {
        let (xs, xl) = inputs[0];
        let (rows, classes) = (xl.dims()[0], xl.dims()[1]);
        // Checked by the forward: ids out of range only reach here ignored.
        let ids = inputs[1].0.indices_at(OP, StridedIndex::new(inputs[1].1))?;
        let x = compute_slice::<F>(xs, xl)?;
        let lse = compute_slice::<F>(inputs[2].0, inputs[2].1)?;
        let g = compute_slice::<F>(inputs[3].0, inputs[3].1)?;
        // Every row is written below (ignored rows with zeros): no zeroing pass first.
        let mut dx = crate::cpu::parallel::output_vec::<F>(rows * classes)?;
        let mut row_marks = vec![0u8; rows]; // one per row: splits the rows with dx
        let s = F::c(self.fwd.smoothing);
        let (on, off) = (F::c(1.0) - s, s / F::c(classes as f64));
        map_row_chunks(rows, (&mut dx, classes), (&mut row_marks, 1), classes * 8, |first, dx, chunk_rows| {
            for r in 0..chunk_rows.len() {
                let dx = &mut dx[r * classes..(r + 1) * classes];
                let i = first + r;
                let id = ids[i];
                if self.fwd.ignored(id) || !(0..classes as i64).contains(&id) {
                    dx.fill(F::c(0.0));
                    continue;
                }
                let (gi, l) = (g[i], lse[i]);
                let row = &x[i * classes..(i + 1) * classes];
                dx.iter_mut().zip(row).for_each(|(d, &v)| *d = gi * ((v - l).vexp() - off));
                dx[id as usize] = dx[id as usize] - gi * on;
            }
        });
        Ok(vec![store(dx, xs.dtype())?])
    }
}

impl FusedOp for CrossEntropyBackward {
    fn name(&self) -> &'static str {
        "cross_entropy_backward"
    }

    fn output(&self, inputs: &[&Tensor]) -> Result<(Shape, DType)> {
        check(&self.fwd, &inputs[..2])?;
        let rows = inputs[0].dims()[0];
        for t in &inputs[2..] {
            if t.dims() != [rows] {
                return Err(Error::ShapeMismatch { op: self.name(), lhs: inputs[0].shape().clone(), rhs: t.shape().clone() });
            }
        }
        Ok((inputs[0].shape().clone(), inputs[0].dtype()))
    }

    fn cpu(&self, inputs: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>> {
        match inputs[0].0.dtype() {
            DType::F64 => self.cpu_in::<f64>(inputs).map(Some),
            _ => self.cpu_in::<f32>(inputs).map(Some),
        }
    }

    fn gpu(&self, target: &Target, inputs: &[(DType, &Layout, usize)]) -> Result<Option<Program>> {
        backward_program(self, target, inputs).map(Some)
    }

    fn backward(&self, _: &[Tensor], _: &[Tensor], _: &Tensor, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Err(Error::invalid(self.name(), "the gradient of cross entropy's gradient (double backward) is not supported"))
    }
}

// ---- GPU programs ----

fn source(target: &Target, backward: bool, dtype: DType, ids: DType) -> Result<KernelSource> {
    float_only(OP, dtype)?;
    let (t, k) = (target.elem_type(OP, dtype)?, target.elem_type(OP, ids)?);
    let tmpl = match backward {
        false => template(target, rnn_kernels::cuda::CROSS_ENTROPY, rnn_kernels::wgsl::CROSS_ENTROPY),
        true => template(target, rnn_kernels::cuda::CROSS_ENTROPY_BACKWARD, rnn_kernels::wgsl::CROSS_ENTROPY_BACKWARD),
    };
    let subs = [("T", t), ("C", target.compute_type(dtype)), ("K", k)];
    Ok(KernelSource::new(target, tmpl, &subs, target.needs_half(&[dtype])))
}

fn variant(backward: bool, dtype: DType, ids: DType) -> String {
    format!("{OP}/{}/{dtype}/{ids}", if backward { "backward" } else { "forward" })
}

/// The ignored id as the kernels compare it (`has`, bits): CUDA compares ids as i64; WGSL
/// compares the 32 bits of an id (u32, or i64 stored as i32), so an ignored id no stored id
/// can equal is no ignored id there.
fn ignore_words(target: &Target, ignore: Option<i64>, ids: DType) -> (usize, usize) {
    match (target.lang, ignore) {
        (_, None) => (0, 0),
        (Lang::Cuda, Some(v)) => (1, v as u64 as usize),
        (Lang::Wgsl, Some(v)) => {
            let fits = match ids {
                DType::I64 => i32::try_from(v).map(|v| v as u32).ok(),
                _ => u32::try_from(v).ok(),
            };
            fits.map_or((0, 0), |bits| (1, bits as usize))
        }
    }
}

fn forward_program(op: &CrossEntropy, target: &Target, inputs: &[(DType, &Layout, usize)]) -> Result<Program> {
    let ((dtype, xl, _), (ids, il, _)) = (inputs[0], inputs[1]);
    let (rows, classes) = (xl.dims()[0], xl.dims()[1]);
    let mut p = Program::with_outputs(target, OP, &[(dtype, rows), (stat_dtype(dtype), rows)]);
    if rows == 0 {
        return Ok(p);
    }
    let (x, x0) = contiguous_arg(&mut p, Arg::Input(0), dtype, xl)?;
    let bad = add_check(&mut p, 1, il, classes, xl)?;
    let (has, ignore) = ignore_words(target, op.ignore, ids);
    let s = float_word(target, op.smoothing);
    let info = target.info(OP, &[rows, classes, x0, has, ignore, s], &[il])?;
    let threads = match target.lang {
        Lang::Cuda => (classes.min(BLOCK).next_power_of_two() as u32).clamp(32, BLOCK as u32),
        Lang::Wgsl => BLOCK as u32,
    };
    let args = [x, Arg::Input(1), Program::OUT, Arg::Temp(1), bad];
    p.kernel(source(target, false, dtype, ids)?, variant(false, dtype, ids), Grid::Blocks(rows, threads), &args, info)?;
    Ok(p)
}

fn backward_program(op: &CrossEntropyBackward, target: &Target, inputs: &[(DType, &Layout, usize)]) -> Result<Program> {
    let ((dtype, xl, _), (ids, il, _)) = (inputs[0], inputs[1]);
    let (rows, classes) = (xl.dims()[0], xl.dims()[1]);
    let mut p = Program::new(target, "cross_entropy_backward", dtype, rows * classes);
    let (x, x0) = contiguous_arg(&mut p, Arg::Input(0), dtype, xl)?;
    let (lse, l0) = contiguous_arg(&mut p, Arg::Input(2), inputs[2].0, inputs[2].1)?;
    let (g, g0) = contiguous_arg(&mut p, Arg::Input(3), dtype, inputs[3].1)?;
    let (has, ignore) = ignore_words(target, op.fwd.ignore, ids);
    let s = float_word(target, op.fwd.smoothing);
    let info = target.info(OP, &[rows * classes, classes, x0, has, ignore, s, l0, g0], &[il])?;
    let args = [x, Arg::Input(1), lse, g, Program::OUT];
    let grid = Grid::Threads(rows * classes);
    p.kernel(source(target, true, dtype, ids)?, variant(true, dtype, ids), grid, &args, info)?;
    Ok(p)
}

impl FusedKernels for CrossEntropy {
    fn variants(target: &Target) -> Vec<(String, KernelSource)> {
        let mut v = Vec::new();
        for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            for ids in ID_DTYPES {
                for backward in [false, true] {
                    if let Ok(s) = source(target, backward, dtype, ids) {
                        v.push((variant(backward, dtype, ids), s));
                    }
                }
            }
        }
        v
    }
}

impl Tensor {
    /// Softmax cross entropy of each row of `[N, C]` logits against class ids `[N]` (u8, u32
    /// or i64), like PyTorch's `F.cross_entropy(logits, targets, reduction="none",
    /// ignore_index=.., label_smoothing=..)`: `[N]` losses `lse(x) - (1 - s) x[t] - s mean(x)`,
    /// 0 where the target equals `ignore_index`. `label_smoothing` is in `[0, 1]`. A class id
    /// out of range is an `Error::IndexOutOfRange` (on a GPU at the next sync point). One
    /// fused kernel per direction; the probabilities are never stored. For PyTorch's mean
    /// reduction divide the sum by the number of rows not ignored.
    pub fn cross_entropy_logits(&self, targets: &Tensor, label_smoothing: f64, ignore_index: Option<i64>) -> Result<Tensor> {
        let op = CrossEntropy { smoothing: label_smoothing, ignore: ignore_index };
        Tensor::fused(Arc::new(op), &[self, targets])
    }
}
