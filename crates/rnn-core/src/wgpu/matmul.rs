//! Batched matmul: `[batch.., m, k] @ [batch.., k, n]` (equal batch dims, broadcast ones
//! with stride 0) with a register-blocked tiled kernel (`matmul.wgsl`). Operands are read
//! through their strides, so transposed and narrowed views are never copied; f16 computes
//! in f32 and rounds once on store.

use rnn_kernels::wgsl;

use super::launch::{info, kernel_source, Grid};
use super::storage::WgpuStorage;
use crate::storage::BackendStorage;
use crate::{Error, Layout, Result};

/// Rows and columns of the output tile of one workgroup (`TILE` in matmul.wgsl).
const TILE: usize = 64;

/// The sizes of one product and how its operands are read.
struct Problem {
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    /// a's row and column strides, then b's.
    strides: [usize; 4],
}

impl Problem {
    fn new(la: &Layout, lb: &Layout) -> Self {
        let (ad, bd) = (la.dims(), lb.dims());
        let r = ad.len();
        let inner = |l: &Layout| (l.strides()[r - 2], l.strides()[r - 1]);
        let ((a_rs, a_cs), (b_rs, b_cs)) = (inner(la), inner(lb));
        Problem {
            batch: ad[..r - 2].iter().product(),
            m: ad[r - 2],
            n: bd[r - 1],
            k: ad[r - 1],
            strides: [a_rs, a_cs, b_rs, b_cs],
        }
    }
}

/// The layout of `l`'s batch dims alone: `strided_offset(z, ..)` over it is the storage
/// position of matrix `z`.
fn batch_layout(l: &Layout) -> Layout {
    let r = l.dims().len();
    Layout::new(l.dims()[..r - 2].to_vec().into(), l.strides()[..r - 2].to_vec(), l.start_offset())
}

/// The dtype errors of the CPU backend: operands must share a float dtype.
fn check_operands(a: &WgpuStorage, la: &Layout, b: &WgpuStorage, lb: &Layout) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(Error::DTypeMismatch { op: "matmul", lhs: a.dtype(), rhs: b.dtype() });
    }
    if !a.dtype().is_float() {
        return Err(Error::UnsupportedDType { op: "matmul", dtype: a.dtype(), hint: ": use a float dtype" });
    }
    if la.dims().len() < 2 || la.dims().len() != lb.dims().len() {
        return Err(Error::invalid(
            "matmul",
            format!("expected [.., m, k] and [.., k, n] layouts, got {la:?}, {lb:?}"),
        ));
    }
    for (s, l) in [(a, la), (b, lb)] {
        if l.storage_extent() > s.len() {
            return Err(Error::invalid(
                "matmul",
                format!("layout {l:?} reaches past a storage of {} elements", s.len()),
            ));
        }
    }
    Ok(())
}

/// Splits `0..count` into `(start, len)` chunks of at most `max`.
fn chunks(count: usize, max: usize) -> impl Iterator<Item = (usize, u32)> {
    (0..count).step_by(max).map(move |start| (start, (count - start).min(max) as u32))
}

pub(crate) fn matmul(a: &WgpuStorage, la: &Layout, b: &WgpuStorage, lb: &Layout) -> Result<WgpuStorage> {
    check_operands(a, la, b, lb)?;
    let p = Problem::new(la, lb);
    let t = a.wgsl_type("matmul")?;
    let out = a.alloc_like(a.dtype(), p.batch * p.m * p.n)?;
    let source = kernel_source(wgsl::MATMUL, &[("T", t)], a.is_f16());
    let (ba, bb) = (batch_layout(la), batch_layout(lb));
    let ctx = a.ctx();
    // One launch normally; grids past the device's per-dimension limit are split.
    let max = ctx.limits.max_compute_workgroups_per_dimension.max(1) as usize;
    let [a_rs, a_cs, b_rs, b_cs] = p.strides;
    for (z0, nz) in chunks(p.batch, max) {
        for (y0, ny) in chunks(p.m.div_ceil(TILE), max) {
            for (x0, nx) in chunks(p.n.div_ceil(TILE), max) {
                let scalars = [p.m, p.n, p.k, a_rs, a_cs, b_rs, b_cs, x0, y0, z0];
                let words = info("matmul", &scalars, &[&ba, &bb])?;
                ctx.launch(&source, &words, &[a.buffer(), b.buffer(), out.buffer()], Grid::Xyz(nx, ny, nz))?;
            }
        }
    }
    Ok(out)
}
