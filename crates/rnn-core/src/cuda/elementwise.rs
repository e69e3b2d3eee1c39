//! Elementwise kernels: fill, strided copy / cast, cat, unary, binary, compare, where. Each
//! one-line op comes from the op table (`op.rs`); the templates are in rnn-kernels/cuda.

use std::sync::Arc;

use rnn_kernels::cuda;

use super::context::CudaDevice;
use super::dtype::{c_type, compute_type, convert_expr};
use super::launch::{index_fn, info, kernel_source, Grid, KernelSource};
use super::storage::CudaStorage;
use crate::cpu::CpuStorage;
use crate::op::{BinaryOp, CmpOp, UnaryOp};
use crate::storage::BackendStorage;
use crate::{DType, Error, Layout, Result};

/// `n` copies of `value` converted to `dtype` exactly as the CPU converts it.
pub(crate) fn fill(dev: &Arc<CudaDevice>, value: f64, n: usize, dtype: DType) -> Result<CudaStorage> {
    let out = CudaStorage::alloc(dev, dtype, n)?;
    let one = CpuStorage::full(value, 1, dtype)?;
    let mut bits = [0u8; 8];
    crate::cpu_each!(&one, v => {
        let bytes: &[u8] = bytemuck::cast_slice(v);
        bits[..bytes.len()].copy_from_slice(bytes);
    });
    let source = fill_source(dtype);
    let words = info("full", &[n, u64::from_le_bytes(bits) as usize], &[])?;
    dev.launch(&source, &words, &[out.slice()], Grid::Threads(n))?;
    Ok(out)
}

fn fill_source(dtype: DType) -> KernelSource {
    let t = c_type(dtype);
    let value_expr = match dtype {
        DType::F16 => "__ushort_as_half((unsigned short)info.w[1])".to_string(),
        DType::BF16 => "__ushort_as_bfloat16((unsigned short)info.w[1])".to_string(),
        DType::F32 => "__int_as_float((int)info.w[1])".to_string(),
        DType::F64 => "__longlong_as_double((long long)info.w[1])".to_string(),
        _ => format!("({t})info.w[1]"),
    };
    kernel_source(cuda::FILL, &[("T", t), ("value", &value_expr)])
}

fn copy_source(from: DType, to: DType, [index_x, index_out]: [&str; 2]) -> KernelSource {
    let convert = convert_expr(from, to);
    let subs = [
        ("T", c_type(from)),
        ("O", c_type(to)),
        ("convert", convert.as_str()),
        ("index_x", index_x),
        ("index_out", index_out),
    ];
    kernel_source(cuda::COPY, &subs)
}

/// Writes `src` (seen through `l`) converted to `out`'s dtype into `out` seen through `ol`.
pub(crate) fn copy_into(src: &CudaStorage, l: &Layout, out: &CudaStorage, ol: &Layout) -> Result<()> {
    let n = l.shape().elem_count();
    let words = info("copy", &[n], &[l, ol])?;
    let source = copy_source(src.dtype(), out.dtype(), [index_fn(l), index_fn(ol)]);
    src.dev().launch(&source, &words, &[src.slice(), out.slice()], Grid::Threads(n))
}

fn unary_source(op: UnaryOp, dtype: DType, index_x: &str) -> KernelSource {
    let subs = [("T", c_type(dtype)), ("C", compute_type(dtype)), ("expr", op.cuda_expr()), ("index_x", index_x)];
    kernel_source(cuda::UNARY, &subs)
}

pub(crate) fn unary(x: &CudaStorage, l: &Layout, op: UnaryOp) -> Result<CudaStorage> {
    if !x.dtype().is_float() {
        let hint = ": elementwise math needs a float tensor";
        return Err(Error::UnsupportedDType { op: op.name(), dtype: x.dtype(), hint });
    }
    let n = l.shape().elem_count();
    let out = x.alloc_like(x.dtype(), n)?;
    let words = info(op.name(), &[n], &[l])?;
    let source = unary_source(op, x.dtype(), index_fn(l));
    x.dev().launch(&source, &words, &[x.slice(), out.slice()], Grid::Threads(n))?;
    Ok(out)
}

fn same_dtype(op: &'static str, a: &CudaStorage, b: &CudaStorage) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(Error::DTypeMismatch { op, lhs: a.dtype(), rhs: b.dtype() });
    }
    Ok(())
}

/// The op table's expression for floats; integers wrap like the CPU's, divide by zero to 0
/// and take `pow` through f64 with saturation.
fn binary_expr(op: BinaryOp, dtype: DType) -> String {
    if dtype.is_float() {
        return op.cuda_expr().to_string();
    }
    let t = c_type(dtype);
    match op {
        BinaryOp::Div => format!("(b == 0 ? ({t})0 : ({t})(a / b))"),
        BinaryOp::Pow => {
            format!("({t}){}", convert_expr(DType::F64, dtype).replace("load(x)", "pow((double)a, (double)b)"))
        }
        BinaryOp::Maximum => "(a > b ? a : b)".into(),
        BinaryOp::Minimum => "(a < b ? a : b)".into(),
        _ => format!("({t}){}", op.cuda_expr()),
    }
}

fn binary_source(op: BinaryOp, dtype: DType, [index_a, index_b]: [&str; 2]) -> KernelSource {
    let expr = binary_expr(op, dtype);
    let subs = [
        ("T", c_type(dtype)),
        ("C", compute_type(dtype)),
        ("expr", expr.as_str()),
        ("index_a", index_a),
        ("index_b", index_b),
    ];
    kernel_source(cuda::BINARY, &subs)
}

pub(crate) fn binary(a: &CudaStorage, l: &Layout, b: &CudaStorage, rl: &Layout, op: BinaryOp) -> Result<CudaStorage> {
    same_dtype(op.name(), a, b)?;
    let n = l.shape().elem_count();
    let out = a.alloc_like(a.dtype(), n)?;
    let words = info(op.name(), &[n], &[l, rl])?;
    let buffers = [a.slice(), b.slice(), out.slice()];
    let source = binary_source(op, a.dtype(), [index_fn(l), index_fn(rl)]);
    a.dev().launch(&source, &words, &buffers, Grid::Threads(n))?;
    Ok(out)
}

fn cmp_source(op: CmpOp, dtype: DType, [index_a, index_b]: [&str; 2]) -> KernelSource {
    let subs = [
        ("T", c_type(dtype)),
        ("C", compute_type(dtype)),
        ("op", op.symbol()),
        ("index_a", index_a),
        ("index_b", index_b),
    ];
    kernel_source(cuda::CMP, &subs)
}

pub(crate) fn cmp(a: &CudaStorage, l: &Layout, b: &CudaStorage, rl: &Layout, op: CmpOp) -> Result<CudaStorage> {
    same_dtype(op.name(), a, b)?;
    let n = l.shape().elem_count();
    let out = a.alloc_like(DType::U8, n)?;
    let words = info(op.name(), &[n], &[l, rl])?;
    let buffers = [a.slice(), b.slice(), out.slice()];
    let source = cmp_source(op, a.dtype(), [index_fn(l), index_fn(rl)]);
    a.dev().launch(&source, &words, &buffers, Grid::Threads(n))?;
    Ok(out)
}

fn where_source(cond: DType, dtype: DType, [index_c, index_t, index_f]: [&str; 3]) -> KernelSource {
    let subs =
        [("K", c_type(cond)), ("T", c_type(dtype)), ("index_c", index_c), ("index_t", index_t), ("index_f", index_f)];
    kernel_source(cuda::WHERE, &subs)
}

pub(crate) fn where_cond(
    c: &CudaStorage,
    l: &Layout,
    t: &CudaStorage,
    tl: &Layout,
    f: &CudaStorage,
    fl: &Layout,
) -> Result<CudaStorage> {
    same_dtype("where_cond", t, f)?;
    if c.dtype().is_float() {
        let hint = ": the condition must be u8, u32 or i64";
        return Err(Error::UnsupportedDType { op: "where_cond", dtype: c.dtype(), hint });
    }
    let n = l.shape().elem_count();
    let out = t.alloc_like(t.dtype(), n)?;
    let words = info("where_cond", &[n], &[l, tl, fl])?;
    let buffers = [c.slice(), t.slice(), f.slice(), out.slice()];
    let source = where_source(c.dtype(), t.dtype(), [index_fn(l), index_fn(tl), index_fn(fl)]);
    c.dev().launch(&source, &words, &buffers, Grid::Threads(n))?;
    Ok(out)
}

/// Every kernel source this module can launch, named (strided indexing; one contiguous
/// variant per template), for compile checks.
pub(crate) fn variants() -> Vec<(String, KernelSource)> {
    const S: &str = "strided_offset";
    const C: &str = "contiguous_offset";
    let mut v = Vec::new();
    for &d in &DType::ALL {
        v.push((format!("fill_{d}"), fill_source(d)));
        for &to in &DType::ALL {
            v.push((format!("copy_{d}_{to}"), copy_source(d, to, [S, C])));
        }
        for &op in BinaryOp::ALL {
            v.push((format!("binary_{}_{d}", op.name()), binary_source(op, d, [S, S])));
        }
        for &op in CmpOp::ALL {
            v.push((format!("cmp_{}_{d}", op.name()), cmp_source(op, d, [S, S])));
        }
        for cond in [DType::U8, DType::U32, DType::I64] {
            v.push((format!("where_{cond}_{d}"), where_source(cond, d, [S, S, S])));
        }
    }
    for &d in DType::ALL.iter().filter(|d| d.is_float()) {
        for &op in UnaryOp::ALL {
            v.push((format!("unary_{}_{d}", op.name()), unary_source(op, d, S)));
        }
    }
    v.push(("binary_add_f32_contiguous".into(), binary_source(BinaryOp::Add, DType::F32, [C, C])));
    v
}
