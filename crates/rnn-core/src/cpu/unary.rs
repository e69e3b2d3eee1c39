//! Unary ops and dtype casts: one strided map, specialised per op by the op table.

use half::{bf16, f16};

use super::parallel::{output_vec, par_fill, HEAVY};
use super::simd::map_slice;
use super::strided::{for_each_row_piece, rows};
use super::CpuStorage;
use crate::num::{bf16_to_f32, f32_to_bf16};
use crate::op_table::{UnaryKernel, UnaryOp, UnaryVisitor};
use crate::{DType, Error, Layout, Result, WithDType};

/// `f` applied to every element of `src` seen through `l`, in row-major order.
pub fn map<T, U>(src: &[T], l: &Layout, f: impl Fn(T) -> U + Sync + Send) -> Result<Vec<U>>
where
    T: Copy + Sync,
    U: Copy + bytemuck::Zeroable + Send + 'static,
{
    map_with_work(1, src, l, f)
}

/// `map` for an `f` that costs `work` units per element (see `parallel::PAR_WORK`).
pub fn map_with_work<T, U>(work: usize, src: &[T], l: &Layout, f: impl Fn(T) -> U + Sync + Send) -> Result<Vec<U>>
where
    T: Copy + Sync,
    U: Copy + bytemuck::Zeroable + Send + 'static,
{
    // Every element is written below: no zeroing.
    let mut out = output_vec(l.shape().elem_count())?;
    match l.contiguous_offsets() {
        Some((start, end)) => {
            let src = &src[start..end];
            par_fill(&mut out, work, |chunk, first| map_slice(&src[first..first + chunk.len()], chunk, &f));
        }
        None => {
            let r = rows(l);
            par_fill(&mut out, work, |chunk, first| {
                for_each_row_piece([&r], first, chunk.len(), |k, [start], col, take| {
                    let dst = &mut chunk[k..k + take];
                    let begin = start + col * r.stride;
                    if r.stride == 1 {
                        map_slice(&src[begin..begin + take], dst, &f);
                    } else {
                        dst.iter_mut().enumerate().for_each(|(j, o)| *o = f(src[begin + j * r.stride]));
                    }
                })
            })
        }
    }
    Ok(out)
}

/// The elements seen through `l` as one contiguous slice, borrowed when they already are.
pub fn contiguous_slice<'a, T>(v: &'a [T], l: &Layout) -> Result<std::borrow::Cow<'a, [T]>>
where
    T: Copy + Sync + Send + bytemuck::Zeroable + 'static,
{
    Ok(match l.contiguous_offsets() {
        Some((a, b)) => std::borrow::Cow::Borrowed(&v[a..b]),
        None => std::borrow::Cow::Owned(map(v, l, |x| x)?),
    })
}

struct CpuUnary<'a> {
    s: &'a CpuStorage,
    l: &'a Layout,
    work: usize,
}

/// CPU cost per element: the arithmetic-only ops are memory-bound, the rest call exp,
/// tanh, erf, sin ... (see `parallel::HEAVY`).
pub(crate) fn work_of(op: UnaryOp) -> usize {
    match op {
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Recip | UnaryOp::Sqr | UnaryOp::Relu | UnaryOp::Step => 1,
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc | UnaryOp::Sign => 1,
        _ => HEAVY,
    }
}

impl UnaryVisitor for CpuUnary<'_> {
    type Out = Result<CpuStorage>;

    fn visit<K: UnaryKernel>(self) -> Result<CpuStorage> {
        let (l, w) = (self.l, self.work);
        Ok(match self.s {
            CpuStorage::F32(v) => CpuStorage::F32(map_with_work(w, v, l, K::f::<f32>)?),
            CpuStorage::F64(v) => CpuStorage::F64(map_with_work(w, v, l, K::f::<f64>)?),
            CpuStorage::F16(v) => CpuStorage::F16(map_with_work(w, v, l, |x| f16::from_f32(K::f(x.to_f32())))?),
            CpuStorage::BF16(v) => CpuStorage::BF16(map_with_work(w, v, l, |x| f32_to_bf16(K::f(bf16_to_f32(x))))?),
            s => {
                return Err(Error::UnsupportedDType {
                    op: K::NAME,
                    dtype: s.dtype(),
                    hint: ": unary math needs a float dtype, convert with to_dtype",
                })
            }
        })
    }
}

impl CpuStorage {
    pub fn unary(&self, l: &Layout, op: UnaryOp) -> Result<CpuStorage> {
        op.visit(CpuUnary { s: self, l, work: work_of(op) })
    }

    /// Converts to `dtype` as PyTorch does: integers to integers wrap (two's complement
    /// truncation, exact for i64), anything else goes through f64 (exact for every pair of
    /// our dtypes but i64 above 2^53) with Rust `as` semantics: floats to integers truncate
    /// and saturate, NaN gives 0, and each float result is rounded once.
    pub fn to_dtype(&self, l: &Layout, dtype: DType) -> Result<CpuStorage> {
        fn cast<T: WithDType, U: WithDType>(v: &[T], l: &Layout) -> Result<CpuStorage> {
            Ok(U::into_storage(map(v, l, |x| U::from_f64(x.to_f64()))?))
        }
        fn wrap<T: Copy + Into<i64> + Send + Sync>(v: &[T], l: &Layout, dtype: DType) -> Result<CpuStorage> {
            Ok(match dtype {
                DType::U8 => CpuStorage::U8(map(v, l, |x| x.into() as u8)?),
                DType::U32 => CpuStorage::U32(map(v, l, |x| x.into() as u32)?),
                _ => CpuStorage::I64(map(v, l, |x| x.into())?),
            })
        }
        // f32 <-> 16-bit float are the casts autocast runs on every step: a contiguous
        // input goes through `half`'s slice conversions (F16C), a strided one is converted
        // element by element, directly (the same rounding, as f32 -> f64 is exact), never
        // through f64.
        if let Some(out) = half_cast(self, l, dtype)? {
            return Ok(out);
        }
        match (self, dtype) {
            (CpuStorage::F32(v), DType::BF16) => return Ok(CpuStorage::BF16(map(v, l, f32_to_bf16)?)),
            (CpuStorage::F32(v), DType::F16) => return Ok(CpuStorage::F16(map(v, l, f16::from_f32)?)),
            (CpuStorage::BF16(v), DType::F32) => return Ok(CpuStorage::F32(map(v, l, bf16_to_f32)?)),
            (CpuStorage::F16(v), DType::F32) => return Ok(CpuStorage::F32(map(v, l, f16::to_f32)?)),
            _ => {}
        }
        if !self.dtype().is_float() && !dtype.is_float() {
            return match self {
                CpuStorage::U8(v) => wrap(v, l, dtype),
                CpuStorage::U32(v) => wrap(v, l, dtype),
                CpuStorage::I64(v) => wrap(v, l, dtype),
                s => Err(Error::Msg(format!("internal: {:?} is not an integer dtype", s.dtype()))),
            };
        }
        cpu_each!(self, v => match dtype {
            DType::U8 => cast::<_, u8>(v, l),
            DType::U32 => cast::<_, u32>(v, l),
            DType::I64 => cast::<_, i64>(v, l),
            DType::F16 => cast::<_, f16>(v, l),
            DType::BF16 => cast::<_, bf16>(v, l),
            DType::F32 => cast::<_, f32>(v, l),
            DType::F64 => cast::<_, f64>(v, l),
        })
    }

    /// A contiguous copy of the elements seen through `l`.
    pub fn copy_strided(&self, l: &Layout) -> Result<CpuStorage> {
        Ok(cpu_map_same!(self, v => match l.contiguous_offsets() {
            Some((start, end)) => v[start..end].to_vec(),
            None => map(v, l, |x| x)?,
        }))
    }
}

/// f32 to and from f16 / bf16 over a contiguous layout, the casts around every mixed-precision
/// op: slice conversions (F16C for f16 where the CPU has it, vectorized integer rounding for
/// bf16; see `matmul_half_kernels::GemmElem`), the same
/// values as the f64 route of `to_dtype` (one nearest-even rounding, NaN kept). `None` for
/// other casts and strided layouts.
fn half_cast(s: &CpuStorage, l: &Layout, dtype: DType) -> Result<Option<CpuStorage>> {
    use super::matmul_half::GemmElem;
    fn convert<T: Sync, U: bytemuck::Zeroable + Send + 'static>(src: &[T], f: fn(&[T], &mut [U])) -> Result<Vec<U>> {
        let mut out = output_vec(src.len())?;
        par_fill(&mut out, 1, |chunk, first| f(&src[first..first + chunk.len()], chunk));
        Ok(out)
    }
    let Some((start, end)) = l.contiguous_offsets() else { return Ok(None) };
    Ok(Some(match (s, dtype) {
        (CpuStorage::F32(v), DType::F16) => CpuStorage::F16(convert(&v[start..end], f16::narrow_slice)?),
        (CpuStorage::F32(v), DType::BF16) => CpuStorage::BF16(convert(&v[start..end], bf16::narrow_slice)?),
        (CpuStorage::F16(v), DType::F32) => CpuStorage::F32(convert(&v[start..end], f16::widen)?),
        (CpuStorage::BF16(v), DType::F32) => CpuStorage::F32(convert(&v[start..end], bf16::widen)?),
        _ => return Ok(None),
    }))
}
