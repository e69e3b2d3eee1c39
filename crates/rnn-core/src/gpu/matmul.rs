//! Plans of batched matmul: `[batch.., m, k] @ [batch.., k, n]` (equal batch dims, broadcast
//! ones with stride 0) into a contiguous row-major `[batch.., m, n]`. On CUDA one cuBLASLt
//! product (`gemm.rs`; f16 / bf16 accumulate in f32). On wgpu a kernel that reads the
//! operands through their strides, chosen here by the adapter: on GPUs the register-blocked
//! tiled kernel staging k-slices in workgroup memory (`matmul.wgsl`); on CPU adapters
//! (lavapipe), where memory accesses are what costs, the large-block kernel of
//! `matmul_unit.rs`, with vec4 access to b and out when their layout allows it.

use super::elementwise::fill_into;
use super::gemm::{operand, row_major_product};
use super::matmul_unit::{self, unit_source, Access};
use super::plan::{Arg, Grid, KernelSource, Launch, Program};
use super::target::Target;
use crate::{DType, Error, Layout, Result};

/// Rows and columns of the output tile of one workgroup of `matmul.wgsl` (`TILE` there).
const TILE: usize = 64;
/// Invocations per workgroup of `matmul.wgsl` (16 x 16).
const TILE_THREADS: u32 = 256;

/// An operand of a product: its dtype, layout and the length of its storage.
pub(crate) type MatmulOperand<'a> = (DType, &'a Layout, usize);

/// The sizes of one product.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Problem {
    pub batch: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

fn check_extent(op: &'static str, l: &Layout, len: usize) -> Result<()> {
    if l.storage_extent() > len {
        return Err(Error::invalid(op, format!("layout {l:?} reaches past a storage of {len} elements")));
    }
    Ok(())
}

/// The CPU backend's errors: a shared float dtype, `[.., m, k]` and `[.., k, n]` layouts
/// with equal batch dims, inside their storages.
pub(crate) fn problem(
    op: &'static str,
    (a, la, a_len): MatmulOperand,
    (b, lb, b_len): MatmulOperand,
) -> Result<Problem> {
    if a != b {
        return Err(Error::DTypeMismatch { op, lhs: a, rhs: b });
    }
    if !a.is_float() {
        return Err(Error::UnsupportedDType { op, dtype: a, hint: ": use a float dtype" });
    }
    let (ad, bd) = (la.dims(), lb.dims());
    let r = ad.len();
    if r < 2 || r != bd.len() {
        return Err(Error::invalid(op, format!("expected [.., m, k] and [.., k, n] layouts, got {la:?}, {lb:?}")));
    }
    if ad[..r - 2] != bd[..r - 2] || ad[r - 1] != bd[r - 2] {
        return Err(Error::ShapeMismatch { op, lhs: la.shape().clone(), rhs: lb.shape().clone() });
    }
    check_extent(op, la, a_len)?;
    check_extent(op, lb, b_len)?;
    Ok(Problem { batch: ad[..r - 2].iter().product(), m: ad[r - 2], n: bd[r - 1], k: ad[r - 1] })
}

/// `a @ b` of inputs 0 and 1.
pub(crate) fn matmul(target: &Target, a: MatmulOperand, b: MatmulOperand) -> Result<Program> {
    let pr = problem("matmul", a, b)?;
    let (dtype, len) = (a.0, pr.batch * pr.m * pr.n);
    let mut p = Program::new(target, "matmul", dtype, len);
    if len == 0 {
        return Ok(p);
    }
    if pr.k == 0 {
        fill_into(&mut p, Program::OUT, dtype, len, 0.0)?;
        return Ok(p);
    }
    if target.gemm {
        let oa = operand(&mut p, Arg::Input(0), dtype, a.1)?;
        let ob = operand(&mut p, Arg::Input(1), dtype, b.1)?;
        let g = row_major_product(dtype, pr.batch, (pr.m, pr.n), oa, ob, Program::OUT);
        p.launches.push(Launch::Gemm(g));
        return Ok(p);
    }
    let kernel = wgsl_kernel(target, dtype, &pr, b.1)?;
    launch_tiles(&mut p, pr, a.1, b.1, kernel)?;
    Ok(p)
}

/// The WGSL kernel of a product: the one place that chooses between them (see the module
/// documentation). Neither needs aligned sizes; the vec4 access mode only needs b's layout.
fn wgsl_kernel(target: &Target, dtype: DType, pr: &Problem, lb: &Layout) -> Result<TileKernel> {
    if !target.cpu {
        return Ok((tiled_source(target, dtype)?, format!("matmul/{dtype}"), (TILE, TILE, TILE_THREADS)));
    }
    let access = Access::of(pr, lb);
    let variant = format!("matmul_unit/{}/{dtype}", access.name());
    let tile = (matmul_unit::TILE_ROWS, matmul_unit::TILE_COLS, matmul_unit::THREADS);
    Ok((unit_source(target, dtype, access)?, variant, tile))
}

/// The layout of `l`'s batch dims alone: `strided_offset(z, ..)` over it is the storage
/// position of matrix `z`.
fn batch_layout(l: &Layout) -> Layout {
    let r = l.dims().len();
    Layout::new(l.dims()[..r - 2].to_vec().into(), l.strides()[..r - 2].to_vec(), l.start_offset())
}

/// Splits `0..count` into `(start, len)` chunks of at most `max`.
fn chunks(count: usize, max: usize) -> impl Iterator<Item = (usize, u32)> {
    (0..count).step_by(max).map(move |start| (start, (count - start).min(max) as u32))
}

pub(crate) fn tiled_source(target: &Target, dtype: DType) -> Result<KernelSource> {
    let t = target.elem_type("matmul", dtype)?;
    Ok(KernelSource::new(target, rnn_kernels::wgsl::MATMUL, &[("T", t)], target.needs_half(&[dtype])))
}

/// A kernel, its variant name, and the (rows, columns) of its workgroups' output tiles and
/// their invocations.
type TileKernel = (KernelSource, String, (usize, usize, u32));

/// Launches `kernel` over the whole output, one workgroup per output tile of one product:
/// one launch normally; grids past the device's per-dimension limit are split. Both WGSL
/// kernels read the same `Info` words.
fn launch_tiles(p: &mut Program, pr: Problem, la: &Layout, lb: &Layout, kernel: TileKernel) -> Result<()> {
    let target = p.target;
    let (source, variant, (rows, cols, threads)) = kernel;
    let r = la.dims().len();
    let (a_rs, a_cs, b_rs, b_cs) = (la.strides()[r - 2], la.strides()[r - 1], lb.strides()[r - 2], lb.strides()[r - 1]);
    let (ba, bb) = (batch_layout(la), batch_layout(lb));
    let max = target.max_grid;
    for (z0, nz) in chunks(pr.batch, max) {
        for (y0, ny) in chunks(pr.m.div_ceil(rows), max) {
            for (x0, nx) in chunks(pr.n.div_ceil(cols), max) {
                let scalars = [pr.m, pr.n, pr.k, a_rs, a_cs, b_rs, b_cs, x0, y0, z0];
                let info = target.info("matmul", &scalars, &[&ba, &bb])?;
                let args = [Arg::Input(0), Arg::Input(1), Program::OUT];
                p.kernel(source.clone(), variant.clone(), Grid::Exact([nx, ny, nz], threads), &args, info)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The variant and workgroup size of the single launch of `a @ b` on `target`.
    fn launched(target: &Target, la: &Layout, lb: &Layout) -> (String, [u32; 3]) {
        let (a_len, b_len) = (la.storage_extent(), lb.storage_extent());
        let p = matmul(target, (DType::F32, la, a_len), (DType::F32, lb, b_len)).unwrap();
        match p.launches.as_slice() {
            [Launch::Kernel(k)] => (k.variant.clone(), k.dims.block),
            _ => panic!("expected one kernel launch"),
        }
    }

    #[test]
    fn cpu_adapters_get_the_unit_kernel_with_the_access_b_allows() {
        let cpu = Target::wgsl(65535, false).on_cpu(true);
        let (a, b) = (Layout::contiguous((37, 20)), Layout::contiguous((20, 300)));
        assert_eq!(launched(&cpu, &a, &b), ("matmul_unit/vec4/f32".into(), [8, 1, 1]));
        let transposed = Layout::contiguous((300, 20)).transpose(0, 1).unwrap();
        assert_eq!(launched(&cpu, &a, &transposed).0, "matmul_unit/strided/f32");
        let odd_n = Layout::contiguous((20, 301));
        assert_eq!(launched(&cpu, &a, &odd_n).0, "matmul_unit/strided/f32");
        let odd_start = Layout::contiguous_with_offset((20, 300), 1);
        assert_eq!(launched(&cpu, &a, &odd_start).0, "matmul_unit/strided/f32");
        let gpu = Target::wgsl(65535, false);
        assert_eq!(launched(&gpu, &a, &b), ("matmul/f32".into(), [256, 1, 1]));
    }
}
