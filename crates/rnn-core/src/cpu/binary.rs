//! Binary ops, comparisons and where_cond. Inputs already share one (broadcast) shape;
//! a broadcast input simply has stride 0, and the common cases get contiguous fast paths.

use super::parallel::{output_vec, par_fill, zeroed_vec, HEAVY};
use super::simd::{map_slice, zip_assign, zip_slice};
use super::strided::{for_each_row_piece, rows};
use super::unary::{contiguous_slice, map, map_with_work};
use super::CpuStorage;
use crate::op_table::{BinaryKernel, BinaryOp, BinaryVisitor, CmpOp};
use crate::{Error, Layout, Result};

fn is_scalar(l: &Layout) -> bool {
    l.strides().iter().zip(l.dims()).all(|(&s, &d)| s == 0 || d == 1)
}

/// `f(a[i], b[i])` for every element of two same-shape layouts; `f` costs `work` units per
/// element (see `parallel::PAR_WORK`).
pub fn zip_map<T, U, V>(
    work: usize,
    (a, la): (&[T], &Layout),
    (b, lb): (&[U], &Layout),
    f: impl Fn(T, U) -> V + Sync + Send,
) -> Result<Vec<V>>
where
    T: Copy + Sync,
    U: Copy + Sync,
    V: Copy + bytemuck::Zeroable + Send + 'static,
{
    let n = la.shape().elem_count();
    if n == 0 {
        return Ok(Vec::new());
    }
    if is_scalar(lb) {
        let s = b[lb.start_offset()];
        return map_with_work(work, a, la, |x| f(x, s));
    }
    if is_scalar(la) {
        let s = a[la.start_offset()];
        return map_with_work(work, b, lb, |y| f(s, y));
    }
    // Every element is written below: no zeroing.
    let mut out = output_vec(n)?;
    match (la.contiguous_offsets(), lb.contiguous_offsets()) {
        (Some((sa, _)), Some((sb, _))) => par_fill(&mut out, work, |chunk, first| {
            let n = chunk.len();
            zip_slice(&a[sa + first..][..n], &b[sb + first..][..n], chunk, &f)
        }),
        _ => {
            let (ra, rb) = (rows(la), rows(lb));
            par_fill(&mut out, work, |chunk, first| {
                for_each_row_piece([&ra, &rb], first, chunk.len(), |k, [sa, sb], col, take| {
                    let dst = &mut chunk[k..k + take];
                    let (ia, ib) = (sa + col * ra.stride, sb + col * rb.stride);
                    zip_row(dst, (a, ia, ra.stride), (b, ib, rb.stride), &f)
                })
            })
        }
    }
    Ok(out)
}

/// One row piece of `zip_map`: `(data, first offset, stride)` per input. The common
/// broadcast rows (a bias added to every row: strides 1 and 1, or 1 and 0) stay vectorized.
#[inline]
fn zip_row<T: Copy, U: Copy, V>(
    dst: &mut [V],
    (a, ia, sa): (&[T], usize, usize),
    (b, ib, sb): (&[U], usize, usize),
    f: &impl Fn(T, U) -> V,
) {
    let n = dst.len();
    match (sa, sb) {
        (1, 1) => zip_slice(&a[ia..ia + n], &b[ib..ib + n], dst, f),
        (1, 0) => map_slice(&a[ia..ia + n], dst, &|x| f(x, b[ib])),
        (0, 1) => map_slice(&b[ib..ib + n], dst, &|y| f(a[ia], y)),
        _ => dst.iter_mut().enumerate().for_each(|(j, o)| *o = f(a[ia + j * sa], b[ib + j * sb])),
    }
}

/// `cond[i] ? t[i] : f[i]` with `cond` contiguous and `t`, `f` seen through their layouts.
fn select<T: Copy + Sync + Send + bytemuck::Zeroable>(
    cond: &[bool],
    t: &[T],
    lt: &Layout,
    f: &[T],
    lf: &Layout,
) -> Result<Vec<T>> {
    let mut out = zeroed_vec(cond.len())?;
    let (rt, rf) = (rows(lt), rows(lf));
    par_fill(&mut out, 1, |chunk, first| {
        for_each_row_piece([&rt, &rf], first, chunk.len(), |k, [st, sf], col, take| {
            let (it, jf) = (st + col * rt.stride, sf + col * rf.stride);
            let dst = &mut chunk[k..k + take];
            let cond = &cond[first + k..][..take];
            if rt.stride == 1 && rf.stride == 1 {
                for (((o, &c), &a), &b) in dst.iter_mut().zip(cond).zip(&t[it..it + take]).zip(&f[jf..jf + take]) {
                    *o = [b, a][c as usize];
                }
            } else {
                for (j, (o, &c)) in dst.iter_mut().zip(cond).enumerate() {
                    let (a, b) = (t[it + j * rt.stride], f[jf + j * rf.stride]);
                    *o = [b, a][c as usize];
                }
            }
        })
    });
    Ok(out)
}

/// `dst[i] = f(dst[i], src[i])` with `src` seen through `ls` (same element count as `dst`).
fn zip_into<T>(
    work: usize,
    dst: &mut [T],
    (src, ls): (&[T], &Layout),
    f: impl Fn(T, T) -> T + Sync + Send,
) -> Result<()>
where
    T: Copy + Send + Sync + bytemuck::Zeroable + 'static,
{
    if ls.shape().elem_count() != dst.len() {
        let msg = format!("{} elements into a buffer of {}", ls.shape().elem_count(), dst.len());
        return Err(Error::invalid("binary_assign", msg));
    }
    let src = contiguous_slice(src, ls)?;
    par_fill(dst, work, |chunk, first| zip_assign(chunk, &src[first..first + chunk.len()], &f));
    Ok(())
}

/// The work per element of a binary op, for the parallel split: pow goes through exp and
/// log, `//` and `%` through the C library's fmod; the others are memory-bound.
fn binary_work(name: &str) -> usize {
    if matches!(name, "pow" | "floor_divide" | "remainder") {
        HEAVY
    } else {
        1
    }
}

/// The in-place twin of `CpuBinary`: the result goes into the left operand's buffer.
struct CpuBinaryAssign<'a> {
    dst: &'a mut CpuStorage,
    src: (&'a CpuStorage, &'a Layout),
}

impl BinaryVisitor for CpuBinaryAssign<'_> {
    type Out = Result<()>;

    fn visit<K: BinaryKernel>(self) -> Result<()> {
        let (dst, (src, ls)) = (self.dst, self.src);
        let work = binary_work(K::NAME);
        macro_rules! arm {
            ($($v:ident),*) => {
                match (dst, src) {
                    $((CpuStorage::$v(d), CpuStorage::$v(s)) => zip_into(work, d, (s, ls), K::f),)*
                    (d, s) => Err(Error::DTypeMismatch { op: K::NAME, lhs: d.dtype(), rhs: s.dtype() }),
                }
            };
        }
        arm!(U8, U32, I64, F16, BF16, F32, F64)
    }
}

struct CpuBinary<'a> {
    a: (&'a CpuStorage, &'a Layout),
    b: (&'a CpuStorage, &'a Layout),
}

impl BinaryVisitor for CpuBinary<'_> {
    type Out = Result<CpuStorage>;

    fn visit<K: BinaryKernel>(self) -> Result<CpuStorage> {
        let ((a, la), (b, lb)) = (self.a, self.b);
        let work = binary_work(K::NAME);
        macro_rules! arm {
            ($($v:ident),*) => {
                match (a, b) {
                    $((CpuStorage::$v(a), CpuStorage::$v(b)) => CpuStorage::$v(zip_map(work, (a, la), (b, lb), K::f)?),)*
                    _ => return Err(Error::DTypeMismatch { op: K::NAME, lhs: a.dtype(), rhs: b.dtype() }),
                }
            };
        }
        Ok(arm!(U8, U32, I64, F16, BF16, F32, F64))
    }
}

impl CpuStorage {
    pub fn binary(&self, la: &Layout, rhs: &CpuStorage, lb: &Layout, op: BinaryOp) -> Result<CpuStorage> {
        op.visit(CpuBinary { a: (self, la), b: (rhs, lb) })
    }

    /// `self = op(self, rhs)` over the whole buffer, element by element (the same kernel as
    /// `binary`, so the same bits); `rhs`, seen through `lr`, has as many elements as `self`.
    pub fn binary_assign(&mut self, rhs: &CpuStorage, lr: &Layout, op: BinaryOp) -> Result<()> {
        op.visit(CpuBinaryAssign { dst: self, src: (rhs, lr) })
    }

    pub fn cmp(&self, la: &Layout, rhs: &CpuStorage, lb: &Layout, op: CmpOp) -> Result<CpuStorage> {
        macro_rules! arm {
            ($($v:ident),*) => {
                match (self, rhs) {
                    $((CpuStorage::$v(a), CpuStorage::$v(b)) => match op {
                        CmpOp::Eq => zip_map(1, (a, la), (b, lb), |x, y| (x == y) as u8),
                        CmpOp::Ne => zip_map(1, (a, la), (b, lb), |x, y| (x != y) as u8),
                        CmpOp::Lt => zip_map(1, (a, la), (b, lb), |x, y| (x < y) as u8),
                        CmpOp::Le => zip_map(1, (a, la), (b, lb), |x, y| (x <= y) as u8),
                        CmpOp::Gt => zip_map(1, (a, la), (b, lb), |x, y| (x > y) as u8),
                        CmpOp::Ge => zip_map(1, (a, la), (b, lb), |x, y| (x >= y) as u8),
                    }?,)*
                    _ => return Err(Error::DTypeMismatch { op: op.name(), lhs: self.dtype(), rhs: rhs.dtype() }),
                }
            };
        }
        Ok(CpuStorage::U8(arm!(U8, U32, I64, F16, BF16, F32, F64)))
    }

    /// `cond[i] != 0 ? on_true[i] : on_false[i]`; `self` is the condition.
    pub fn where_cond(
        &self,
        lc: &Layout,
        t: &CpuStorage,
        lt: &Layout,
        f: &CpuStorage,
        lf: &Layout,
    ) -> Result<CpuStorage> {
        let cond = self.nonzero_mask(lc)?;
        macro_rules! arm {
            ($($v:ident),*) => {
                match (t, f) {
                    $((CpuStorage::$v(t), CpuStorage::$v(f)) => CpuStorage::$v(select(&cond, t, lt, f, lf)?),)*
                    _ => return Err(Error::DTypeMismatch { op: "where_cond", lhs: t.dtype(), rhs: f.dtype() }),
                }
            };
        }
        Ok(arm!(U8, U32, I64, F16, BF16, F32, F64))
    }

    /// Contiguous booleans `x != 0` of an integer tensor.
    fn nonzero_mask(&self, l: &Layout) -> Result<Vec<bool>> {
        match self {
            CpuStorage::U8(v) => map(v, l, |x| x != 0),
            CpuStorage::U32(v) => map(v, l, |x| x != 0),
            CpuStorage::I64(v) => map(v, l, |x| x != 0),
            s => Err(Error::UnsupportedDType {
                op: "where_cond",
                dtype: s.dtype(),
                hint: ": the condition must be u8, u32 or i64",
            }),
        }
    }
}
