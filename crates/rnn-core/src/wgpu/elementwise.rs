//! Elementwise kernels: fill, strided copy / cast, cat, unary, binary, compare, where.
//! Each one-line op comes from the op table (`op.rs`); the templates are in rnn-kernels.

use std::sync::Arc;

use rnn_kernels::wgsl;

use super::context::WgpuContext;
use super::dtype::{compute_type, convert_expr, wgsl_type};
use super::launch::{index_fn, info, kernel_source, Grid};
use super::storage::WgpuStorage;
use crate::op::{BinaryOp, CmpOp, UnaryOp};
use crate::storage::BackendStorage;
use crate::{DType, Error, Layout, Result};

/// `n` copies of `value` converted to `dtype`.
pub(crate) fn fill(ctx: &Arc<WgpuContext>, value: f64, n: usize, dtype: DType) -> Result<WgpuStorage> {
    let t = wgsl_type("full", dtype, ctx.shader_f16)?;
    let out = WgpuStorage::alloc(ctx, dtype, n)?;
    // The value as the bits of one 32-bit word, converted on the host with the CPU's rules.
    let (bits, value_expr) = match dtype {
        DType::F32 | DType::F16 => ((value as f32).to_bits(), format!("{t}(bitcast<f32>(info[1]))")),
        DType::U8 => (u32::from(value as u8), "info[1]".to_string()),
        DType::U32 => (value as u32, "info[1]".to_string()),
        _ => (i32::try_from(value as i64).map_err(|_| fill_range(value))? as u32, "bitcast<i32>(info[1])".to_string()),
    };
    let src = kernel_source(wgsl::FILL, &[("O", t), ("value", &value_expr)], dtype == DType::F16);
    let mut words = info("full", &[n], &[])?;
    words.push(bits);
    ctx.launch(&src, &words, &[out.buffer()], Grid::Threads(n))?;
    Ok(out)
}

fn fill_range(value: f64) -> Error {
    Error::invalid("full", format!("{value} does not fit the wgpu backend's 32-bit integers"))
}

/// Writes `src` (seen through `l`) converted to `out`'s dtype into `out` seen through `ol`.
pub(crate) fn copy_into(src: &WgpuStorage, l: &Layout, out: &WgpuStorage, ol: &Layout) -> Result<()> {
    let (from, to) = (src.wgsl_type("copy")?, out.wgsl_type("copy")?);
    let convert = convert_expr(src.dtype(), out.dtype(), to);
    let f16 = src.is_f16() || out.is_f16();
    let subs = [("T", from), ("O", to), ("convert", &convert), ("index_x", index_fn(l)), ("index_out", index_fn(ol))];
    let source = kernel_source(wgsl::COPY, &subs, f16);
    let n = l.shape().elem_count();
    src.ctx().launch(&source, &info("copy", &[n], &[l, ol])?, &[src.buffer(), out.buffer()], Grid::Threads(n))
}

pub(crate) fn unary(x: &WgpuStorage, l: &Layout, op: UnaryOp) -> Result<WgpuStorage> {
    if !x.dtype().is_float() {
        let hint = ": elementwise math needs a float tensor";
        return Err(Error::UnsupportedDType { op: op.name(), dtype: x.dtype(), hint });
    }
    let t = x.wgsl_type(op.name())?;
    let subs = [("T", t), ("expr", op.wgsl_expr()), ("index_x", index_fn(l))];
    let source = kernel_source(wgsl::UNARY, &subs, x.is_f16());
    let n = l.shape().elem_count();
    let out = x.alloc_like(x.dtype(), n)?;
    x.ctx().launch(&source, &info(op.name(), &[n], &[l])?, &[x.buffer(), out.buffer()], Grid::Threads(n))?;
    Ok(out)
}

fn same_dtype(op: &'static str, a: &WgpuStorage, b: &WgpuStorage) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(Error::DTypeMismatch { op, lhs: a.dtype(), rhs: b.dtype() });
    }
    Ok(())
}

/// The stored result of `op` on `a` and `b`: the op table's expression for floats; integers
/// wrap like the CPU's (u8 to 8 bits), divide by zero to 0 and take `pow` through f32.
fn binary_store(op: BinaryOp, dtype: DType, t: &str) -> String {
    let expr = op.wgsl_expr();
    match (dtype, op) {
        (d, _) if d.is_float() => format!("{t}({expr})"),
        (_, BinaryOp::Div) => format!("select(a / select(b, {t}(1), b == {t}(0)), {t}(0), b == {t}(0))"),
        (_, BinaryOp::Pow) => match dtype {
            DType::U8 => "f_to_u8(pow(f32(a), f32(b)))".into(),
            DType::U32 => "f_to_u32(pow(f32(a), f32(b)))".into(),
            _ => "f_to_i32(pow(f32(a), f32(b)))".into(),
        },
        (DType::U8, _) => format!("({expr}) & 255u"),
        _ => expr.to_string(),
    }
}

pub(crate) fn binary(a: &WgpuStorage, l: &Layout, b: &WgpuStorage, rl: &Layout, op: BinaryOp) -> Result<WgpuStorage> {
    same_dtype(op.name(), a, b)?;
    let t = a.wgsl_type(op.name())?;
    let store = binary_store(op, a.dtype(), t);
    let c = compute_type(a.dtype(), t);
    let subs = [("T", t), ("C", c), ("store", &store), ("index_a", index_fn(l)), ("index_b", index_fn(rl))];
    let source = kernel_source(wgsl::BINARY, &subs, a.is_f16());
    let n = l.shape().elem_count();
    let out = a.alloc_like(a.dtype(), n)?;
    let buffers = [a.buffer(), b.buffer(), out.buffer()];
    a.ctx().launch(&source, &info(op.name(), &[n], &[l, rl])?, &buffers, Grid::Threads(n))?;
    Ok(out)
}

pub(crate) fn cmp(a: &WgpuStorage, l: &Layout, b: &WgpuStorage, rl: &Layout, op: CmpOp) -> Result<WgpuStorage> {
    same_dtype(op.name(), a, b)?;
    let t = a.wgsl_type(op.name())?;
    let c = compute_type(a.dtype(), t);
    let subs = [("T", t), ("C", c), ("op", op.symbol()), ("index_a", index_fn(l)), ("index_b", index_fn(rl))];
    let source = kernel_source(wgsl::CMP, &subs, a.is_f16());
    let n = l.shape().elem_count();
    let out = a.alloc_like(DType::U8, n)?;
    let buffers = [a.buffer(), b.buffer(), out.buffer()];
    a.ctx().launch(&source, &info(op.name(), &[n], &[l, rl])?, &buffers, Grid::Threads(n))?;
    Ok(out)
}

pub(crate) fn where_cond(
    c: &WgpuStorage,
    l: &Layout,
    t: &WgpuStorage,
    tl: &Layout,
    f: &WgpuStorage,
    fl: &Layout,
) -> Result<WgpuStorage> {
    same_dtype("where_cond", t, f)?;
    if c.dtype().is_float() {
        let hint = ": the condition must be u8, u32 or i64";
        return Err(Error::UnsupportedDType { op: "where_cond", dtype: c.dtype(), hint });
    }
    let (k, v) = (c.wgsl_type("where_cond")?, t.wgsl_type("where_cond")?);
    let indices = [("index_c", index_fn(l)), ("index_t", index_fn(tl)), ("index_f", index_fn(fl))];
    let source = kernel_source(wgsl::WHERE, &[[("K", k), ("T", v)].as_slice(), &indices].concat(), t.is_f16());
    let n = l.shape().elem_count();
    let out = t.alloc_like(t.dtype(), n)?;
    let buffers = [c.buffer(), t.buffer(), f.buffer(), out.buffer()];
    c.ctx().launch(&source, &info("where_cond", &[n], &[l, tl, fl])?, &buffers, Grid::Threads(n))?;
    Ok(out)
}
