//! The CUDA C types of the dtypes (all stored natively) and the conversions between them.

use crate::DType;

/// The CUDA C type of a stored element.
pub(crate) fn c_type(dtype: DType) -> &'static str {
    match dtype {
        DType::U8 => "u8",
        DType::U32 => "u32",
        DType::I64 => "i64",
        DType::F16 => "__half",
        DType::BF16 => "__nv_bfloat16",
        DType::F32 => "float",
        DType::F64 => "double",
    }
}

/// The type values are computed in: float for the half types, else the stored type.
pub(crate) fn compute_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 | DType::BF16 => "float",
        d => c_type(d),
    }
}

/// The range of an integer dtype, as C double literals.
fn int_range(dtype: DType) -> (&'static str, &'static str) {
    match dtype {
        DType::U8 => ("0.0", "255.0"),
        DType::U32 => ("0.0", "4294967295.0"),
        _ => ("-9223372036854775808.0", "9223372036854775807.0"),
    }
}

/// The CUDA C expression converting `x` (dtype `from`) to dtype `to` with the CPU's
/// semantics (Rust `as`: float to int truncates and saturates, NaN gives 0; int to narrower
/// int wraps).
pub(crate) fn convert_expr(from: DType, to: DType) -> String {
    let (t, c) = (c_type(to), compute_type(to));
    match (from.is_float(), to.is_float()) {
        _ if from == to => "x".to_string(),
        (true, false) => {
            let (lo, hi) = int_range(to);
            format!("float_to_int<{t}>((double)load(x), {lo}, {hi})")
        }
        (false, false) => format!("({t})x"),
        _ => format!("store<{t}, {c}>(({c})load(x))"),
    }
}
