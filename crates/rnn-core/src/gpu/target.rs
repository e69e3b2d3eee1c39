//! What a plan builder knows about the runtime it plans for: the kernel language and the
//! limits that shape launches. Everything language-specific about a kernel's text (element
//! types, conversions, the integer forms of binary ops, constants read from `Info` words)
//! is answered here, so the plan builders are written once for CUDA and WGSL.

use crate::op_table::BinaryOp;
use crate::{DType, Error, Result};

/// The kernel language of a GPU runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Lang {
    /// CUDA C, compiled by NVRTC (or by the host C++ compiler in the emulator).
    Cuda,
    /// WGSL, compiled by wgpu.
    Wgsl,
}

/// The runtime a plan is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    pub lang: Lang,
    /// The most blocks (workgroups) one launch may have along x. Kernels loop over their work
    /// with a grid stride, so a smaller grid only means more iterations per thread.
    pub max_grid: usize,
    /// Whether kernels may store f16 (wgpu: the adapter's `shader-f16`).
    pub f16: bool,
    /// Whether products run through a cuBLASLt-style `Gemm` launch (CUDA) instead of a kernel.
    pub gemm: bool,
    /// Whether the adapter runs kernels on CPU cores (wgpu's `DeviceType::Cpu`: lavapipe,
    /// WARP, SwiftShader), where every memory access is a loop over the SIMD lanes. Plans
    /// then prefer kernels that load little per arithmetic op (`matmul.rs`).
    pub cpu: bool,
    /// Whether 16-bit attention may use `attention_mma.cu`'s instructions (`mma.sync` on
    /// bf16, `cp.async`): a CUDA device of compute capability 8.0 (Ampere) or later. Older
    /// ones (Turing, sm_75) run the scalar kernels, f32 arithmetic on 16-bit storage.
    pub tensor_cores: bool,
}

/// Threads per block (workgroup) of the 1-D kernels (`BLOCK` in common.cuh, `WG` in
/// common.wgsl).
pub(crate) const BLOCK: usize = 256;

/// Elements each thread of CUDA's unary and binary kernels takes per trip (`UNROLL` in
/// common.cuh): all loaded before any is stored, so that one thread keeps several loads in
/// flight (one 4-byte load per thread read half of an H200's copy bandwidth).
pub(crate) const UNROLL: usize = 4;

/// `Info` words of a CUDA kernel (`INFO_WORDS` in common.cuh): passed by value, so bounded.
pub(crate) const CUDA_INFO_WORDS: usize = 96;

impl Target {
    /// The threads of an unary or binary kernel over `n` elements: CUDA's take `UNROLL`
    /// elements each, WGSL's one.
    pub(crate) fn elementwise_threads(&self, n: usize) -> usize {
        match self.lang {
            Lang::Cuda => n.div_ceil(UNROLL),
            Lang::Wgsl => n,
        }
    }

    /// A CUDA device of compute capability 8.0 or later.
    pub fn cuda() -> Target {
        Target::cuda_on((8, 0))
    }

    /// A CUDA device of this compute capability (major, minor).
    pub fn cuda_on(compute_capability: (u32, u32)) -> Target {
        let tensor_cores = compute_capability.0 >= 8;
        Target { lang: Lang::Cuda, max_grid: 65535 * 32, f16: true, gemm: true, cpu: false, tensor_cores }
    }

    /// A wgpu device whose grid dimensions are limited to `max_grid` workgroups.
    #[cfg_attr(not(feature = "wgpu"), allow(dead_code))]
    pub fn wgsl(max_grid: usize, f16: bool) -> Target {
        Target { lang: Lang::Wgsl, max_grid: max_grid.max(1), f16, gemm: false, cpu: false, tensor_cores: false }
    }

    /// This target, on an adapter that runs kernels on CPU cores when `cpu` (see `Target::cpu`).
    #[cfg_attr(not(feature = "wgpu"), allow(dead_code))]
    pub fn on_cpu(self, cpu: bool) -> Target {
        Target { cpu, ..self }
    }

    /// Whether warp shuffles are available (32-lane warps).
    pub fn warps(&self) -> bool {
        self.lang == Lang::Cuda
    }

    /// The largest value one `Info` word holds.
    pub fn word_max(&self) -> u64 {
        match self.lang {
            Lang::Cuda => u64::MAX,
            Lang::Wgsl => u32::MAX as u64,
        }
    }

    /// The type an element of `dtype` is stored as in a kernel, or the error saying the
    /// runtime cannot hold it.
    pub fn elem_type(&self, op: &'static str, dtype: DType) -> Result<&'static str> {
        match self.lang {
            Lang::Cuda => Ok(cuda_type(dtype)),
            Lang::Wgsl => wgsl_type(op, dtype, self.f16),
        }
    }

    /// The type values of `dtype` are computed in: f32 for the half types (and for every
    /// float in WGSL), else the stored type.
    pub fn compute_type(&self, dtype: DType) -> &'static str {
        match (self.lang, dtype) {
            (Lang::Cuda, DType::F16 | DType::BF16) => "float",
            (Lang::Cuda, d) => cuda_type(d),
            (Lang::Wgsl, d) if d.is_float() => "f32",
            (Lang::Wgsl, d) => wgsl_type("compute", d, self.f16).unwrap_or("u32"),
        }
    }

    /// Whether a kernel touching `dtypes` needs the half types (CUDA: the fp16 / bf16
    /// headers; WGSL: `enable f16;`).
    pub fn needs_half(&self, dtypes: &[DType]) -> bool {
        dtypes.iter().any(|d| matches!(d, DType::F16 | DType::BF16))
    }

    /// The expression converting `x` (dtype `from`) to dtype `to` with the CPU's semantics
    /// (Rust `as` through f64: float to int truncates and saturates, NaN gives 0; int to a
    /// narrower int wraps; every float result is rounded once from the f64 value).
    pub fn convert_expr(&self, from: DType, to: DType) -> Result<String> {
        match self.lang {
            Lang::Cuda => Ok(cuda_convert(from, to)),
            Lang::Wgsl => Ok(wgsl_convert(from, to, wgsl_type("copy", to, self.f16)?)),
        }
    }

    /// The stored result of binary `op` on `a` and `b` (computed in `compute_type`): the op
    /// table's expression for floats; integers wrap like the CPU's, divide by zero to 0
    /// (and `MIN / -1` to 0, as `checked_div`), and take `pow` through a float with
    /// saturation.
    pub fn binary_store(&self, op: BinaryOp, dtype: DType) -> Result<String> {
        let t = self.elem_type(op.name(), dtype)?;
        Ok(match self.lang {
            Lang::Cuda => cuda_binary_store(op, dtype, t),
            Lang::Wgsl => wgsl_binary_store(op, dtype, t),
        })
    }

    /// `value` converted to `dtype` as the CPU converts it, as the bits of one `Info` word,
    /// and the expression of the stored element reading them from word `word`.
    pub fn value_word(&self, op: &'static str, value: f64, dtype: DType, word: usize) -> Result<(u64, String)> {
        match self.lang {
            Lang::Cuda => Ok(cuda_value_word(value, dtype, word)),
            Lang::Wgsl => wgsl_value_word(op, value, dtype, self.f16, word),
        }
    }
}

// ---- CUDA C ----

/// The CUDA C type of a stored element.
pub(crate) fn cuda_type(dtype: DType) -> &'static str {
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

/// The range of an integer dtype, as C double literals.
fn int_range(dtype: DType) -> (&'static str, &'static str) {
    match dtype {
        DType::U8 => ("0.0", "255.0"),
        DType::U32 => ("0.0", "4294967295.0"),
        _ => ("-9223372036854775808.0", "9223372036854775807.0"),
    }
}

fn cuda_convert(from: DType, to: DType) -> String {
    let t = cuda_type(to);
    // Every value of every dtype is exact in f64 but i64 beyond 2^53, which the CPU rounds to
    // f64 first too: going through double rounds each float result once, as the CPU does.
    let wide = "(double)load(x)";
    match (from.is_float(), to) {
        _ if from == to => "x".to_string(),
        (true, DType::U8 | DType::U32 | DType::I64) => {
            let (lo, hi) = int_range(to);
            format!("float_to_int<{t}>({wide}, {lo}, {hi})")
        }
        (false, DType::U8 | DType::U32 | DType::I64) => format!("({t})x"),
        (_, DType::F16) => format!("__double2half({wide})"),
        (_, DType::BF16) => format!("__double2bfloat16({wide})"),
        (_, DType::F32) => format!("(float){wide}"),
        (_, DType::F64) => wide.to_string(),
    }
}

fn cuda_binary_store(op: BinaryOp, dtype: DType, t: &str) -> String {
    if dtype.is_float() {
        return format!("store<{t}, C>({})", op.cuda_expr());
    }
    match op {
        BinaryOp::Div if dtype == DType::I64 => {
            "((b == 0 || (a == (i64)0x8000000000000000ull && b == -1)) ? (i64)0 : (i64)(a / b))".to_string()
        }
        BinaryOp::Div => format!("(b == 0 ? ({t})0 : ({t})(a / b))"),
        BinaryOp::Pow => {
            let (lo, hi) = int_range(dtype);
            format!("float_to_int<{t}>(pow((double)a, (double)b), {lo}, {hi})")
        }
        BinaryOp::Maximum => "(a > b ? a : b)".into(),
        BinaryOp::Minimum => "(a < b ? a : b)".into(),
        BinaryOp::FloorDivide => format!("floor_divide_int<{t}>(a, b)"),
        BinaryOp::Remainder => format!("remainder_int<{t}>(a, b)"),
        // Integer add, sub and mul wrap: computed as unsigned 64-bit, then truncated.
        _ => format!("({t})((u64)a {} (u64)b)", binary_symbol(op)),
    }
}

fn binary_symbol(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "+",
        BinaryOp::Sub => "-",
        _ => "*",
    }
}

fn cuda_value_word(value: f64, dtype: DType, word: usize) -> (u64, String) {
    let expr = match dtype {
        DType::F16 => format!("__ushort_as_half((unsigned short)info.w[{word}])"),
        DType::BF16 => format!("__ushort_as_bfloat16((unsigned short)info.w[{word}])"),
        DType::F32 => format!("__int_as_float((int)info.w[{word}])"),
        DType::F64 => format!("__longlong_as_double((long long)info.w[{word}])"),
        _ => format!("({})info.w[{word}]", cuda_type(dtype)),
    };
    (value_bits(value, dtype), expr)
}

/// The bits of `value` converted to `dtype` exactly as the CPU converts it, zero-extended.
pub(crate) fn value_bits(value: f64, dtype: DType) -> u64 {
    use crate::WithDType;
    use half::{bf16, f16};
    match dtype {
        DType::U8 => u64::from(u8::from_f64(value)),
        DType::U32 => u64::from(u32::from_f64(value)),
        DType::I64 => i64::from_f64(value) as u64,
        DType::F16 => u64::from(f16::from_f64(value).to_bits()),
        DType::BF16 => u64::from(bf16::from_f64(value).to_bits()),
        DType::F32 => u64::from((value as f32).to_bits()),
        DType::F64 => value.to_bits(),
    }
}

// ---- WGSL ----

const WGSL_HINT: &str = ": the wgpu backend stores f32, f16 (with shader-f16), u32, u8 and i64 (in i32 range)";

/// The WGSL type of a stored element: "f32", "f16", "u32" or "i32".
pub(crate) fn wgsl_type(op: &'static str, dtype: DType, shader_f16: bool) -> Result<&'static str> {
    match dtype {
        DType::F32 => Ok("f32"),
        DType::F16 if shader_f16 => Ok("f16"),
        DType::F16 => Err(Error::UnsupportedDType { op, dtype, hint: ": this adapter has no shader-f16 feature" }),
        DType::U32 | DType::U8 => Ok("u32"),
        DType::I64 => Ok("i32"),
        DType::F64 | DType::BF16 => Err(Error::UnsupportedDType { op, dtype, hint: WGSL_HINT }),
    }
}

fn wgsl_convert(from: DType, to: DType, to_t: &str) -> String {
    let x = if from.is_float() { "f32(x)" } else { "x" };
    match (from.is_float(), to) {
        (true, DType::U8) => format!("f_to_u8({x})"),
        (true, DType::U32) => format!("f_to_u32({x})"),
        (true, DType::I64) => format!("f_to_i32({x})"),
        (false, DType::U8) => format!("u32({x}) & 255u"),
        _ => format!("{to_t}({x})"),
    }
}

fn wgsl_binary_store(op: BinaryOp, dtype: DType, t: &str) -> String {
    let expr = op.wgsl_expr();
    match (dtype, op) {
        (d, _) if d.is_float() => format!("{t}({expr})"),
        (_, BinaryOp::Div) => {
            // i64 is stored as i32: MIN / -1 overflows there and gives 0, as the CPU's
            // checked division does.
            let overflow = if dtype == DType::I64 { " || (a == i32(-2147483647 - 1) && b == -1)" } else { "" };
            format!("select(a / select(b, {t}(1), b == {t}(0)), {t}(0), b == {t}(0){overflow})")
        }
        (_, BinaryOp::Pow) => match dtype {
            DType::U8 => "f_to_u8(pow_ieee(f32(a), f32(b)))".into(),
            DType::U32 => "f_to_u32(pow_ieee(f32(a), f32(b)))".into(),
            _ => "f_to_i32(pow_ieee(f32(a), f32(b)))".into(),
        },
        (_, BinaryOp::Maximum) => "select(b, a, a > b)".into(),
        (_, BinaryOp::Minimum) => "select(b, a, a < b)".into(),
        (DType::I64, BinaryOp::FloorDivide) => "floor_divide_i32(a, b)".into(),
        (DType::I64, BinaryOp::Remainder) => "remainder_i32(a, b)".into(),
        (_, BinaryOp::FloorDivide) => "floor_divide_u32(a, b)".into(),
        (_, BinaryOp::Remainder) => "remainder_u32(a, b)".into(),
        (DType::U8, _) => format!("({expr}) & 255u"),
        _ => expr.to_string(),
    }
}

fn wgsl_value_word(op: &'static str, value: f64, dtype: DType, f16: bool, word: usize) -> Result<(u64, String)> {
    let t = wgsl_type(op, dtype, f16)?;
    let float = |bits: u32| (u64::from(bits), format!("{t}(bitcast<f32>(info[{word}]))"));
    Ok(match dtype {
        DType::F32 => float((value as f32).to_bits()),
        // The f16 value is exact in f32, so the kernel's conversion does not round again.
        DType::F16 => float(half::f16::from_f64(value).to_f32().to_bits()),
        DType::U8 | DType::U32 => (value_bits(value, dtype), format!("info[{word}]")),
        _ => {
            let wide = <i64 as crate::WithDType>::from_f64(value);
            let v = i32::try_from(wide)
                .map_err(|_| Error::invalid(op, format!("{value} does not fit the wgpu backend's 32-bit integers")))?;
            (u64::from(v as u32), format!("bitcast<i32>(info[{word}])"))
        }
    })
}
