//! cuBLASLt's contract, executed on the host: what the emulator runs for a `GemmLaunch`.

use crate::gpu::gemm::{GemmLaunch, Matrix, Operand, BIAS_ALIGNMENT};
use crate::gpu::plan::Arg;
use crate::{Error, Result};

/// Executes `g` on host memory as cuBLASLt defines `cublasLtMatmul` (alpha 1, beta 0,
/// column-major, accumulation in f64, then the epilogue): `read(arg, element)` and
/// `write(arg, element, value)` access the buffers. Checks what cuBLASLt assumes of its
/// arguments (leading dimensions, the declared alignments at every batch entry, given each
/// buffer's base address in `base`) and returns the first violation as an error.
pub(super) fn execute(
    g: &GemmLaunch,
    base: impl Fn(Arg) -> u64,
    read: impl Fn(Arg, usize) -> Result<f64>,
    mut write: impl FnMut(Arg, usize, f64) -> Result<()>,
) -> Result<()> {
    check_contract(g, &base)?;
    let dims = |m: &Matrix| if m.trans { (m.cols, m.rows) } else { (m.rows, m.cols) };
    let ((_, ak), d) = (dims(&g.a.matrix), g.d.matrix);
    for batch in 0..g.batch {
        for i in 0..d.rows {
            for j in 0..d.cols {
                let mut v = 0.0;
                for p in 0..ak {
                    v += read_op(g.a, batch, i, p, &read)? * read_op(g.b, batch, p, j, &read)?;
                }
                if let Some((act, bias, offset)) = g.bias {
                    v += read(bias, offset + i as usize)?;
                    v = act.unary().map_or(v, |op| op.eval_f64(v));
                }
                write(g.d.arg, element(g.d, batch, i, j), v)?;
            }
        }
    }
    Ok(())
}

/// The element of `o`'s buffer holding entry (r, c) of batch entry `batch` (no transpose).
fn element(o: Operand, batch: usize, r: u64, c: u64) -> usize {
    (o.offset as i64 + batch as i64 * o.matrix.batch_stride + r as i64 + c as i64 * o.matrix.ld) as usize
}

/// Entry (i, j) of `op(M)` for batch entry `batch`.
fn read_op(o: Operand, batch: usize, i: u64, j: u64, read: &impl Fn(Arg, usize) -> Result<f64>) -> Result<f64> {
    let (r, c) = if o.matrix.trans { (j, i) } else { (i, j) };
    read(o.arg, element(o, batch, r, c))
}

fn check_contract(g: &GemmLaunch, base: &impl Fn(Arg) -> u64) -> Result<()> {
    let fail = |msg: String| Err(Error::Msg(format!("gemm contract: {msg}")));
    let dims = |m: &Matrix| if m.trans { (m.cols, m.rows) } else { (m.rows, m.cols) };
    let ((ar, ak), (bk, bc), d) = (dims(&g.a.matrix), dims(&g.b.matrix), g.d.matrix);
    if (ar, bc, ak) != (d.rows, d.cols, bk) || d.trans {
        return fail(format!("operand dims {:?} x {:?} -> {d:?}", g.a.matrix, g.b.matrix));
    }
    let size = g.dtype.size_in_bytes() as u64;
    for (o, align) in [g.a, g.b, g.d].into_iter().zip(g.alignments) {
        if o.matrix.ld < o.matrix.rows as i64 {
            return fail(format!("leading dimension {} below {} rows", o.matrix.ld, o.matrix.rows));
        }
        for batch in 0..g.batch {
            let at = base(o.arg) + element(o, batch, 0, 0) as u64 * size;
            let col = if o.matrix.cols > 1 { at + o.matrix.ld as u64 * size } else { at };
            if at % u64::from(align) != 0 || col % u64::from(align) != 0 {
                return fail(format!("batch entry {batch} of {o:?} is not {align}-byte aligned"));
            }
        }
    }
    match g.bias {
        Some((_, arg, offset)) if (base(arg) + offset as u64 * size) % BIAS_ALIGNMENT as u64 != 0 => {
            fail(format!("the bias at element {offset} is not {BIAS_ALIGNMENT}-byte aligned"))
        }
        _ => Ok(()),
    }
}
