//! The op table: every elementwise op is defined here once, with its CPU formula and the
//! CUDA / WGSL expressions the GPU backends generate their kernels from. Adding an
//! elementwise op means adding one line to one of the tables below.
//!
//! Backward formulas live in `grad_fns.rs`, one function per op family. CUDA expressions
//! write float literals as `C(..)` (`C` is the kernel's compute type), so f32 kernels compute
//! in float, not double.

use crate::num::{Elem, Float};
use crate::DType;

/// Calls `visit::<K>()` with the zero-sized kernel type of an op, so that backends write one
/// generic loop and the compiler inlines each op's formula into it.
pub trait UnaryVisitor {
    type Out;
    fn visit<K: UnaryKernel>(self) -> Self::Out;
}
pub trait UnaryKernel {
    const NAME: &'static str;
    fn f<F: Float>(x: F) -> F;
}
pub trait BinaryVisitor {
    type Out;
    fn visit<K: BinaryKernel>(self) -> Self::Out;
}
pub trait BinaryKernel {
    const NAME: &'static str;
    fn f<T: Elem>(a: T, b: T) -> T;
}

macro_rules! unary_table {
    ($($op:ident $name:literal |$x:ident| $cpu:expr, cuda: $cuda:literal, wgsl: $wgsl:literal;)*) => {
        /// Elementwise ops of one float input.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum UnaryOp { $($op),* }

        /// Zero-sized kernel types, one per unary op.
        pub mod unary {
            use super::*;
            $(
                pub struct $op;
                impl UnaryKernel for $op {
                    const NAME: &'static str = $name;
                    #[inline(always)]
                    fn f<F: Float>($x: F) -> F { $cpu }
                }
            )*
        }

        impl UnaryOp {
            pub const ALL: &'static [UnaryOp] = &[$(UnaryOp::$op),*];
            pub fn name(self) -> &'static str { match self { $(UnaryOp::$op => $name),* } }
            /// CUDA C expression of `x` (float or double; half types are widened first).
            pub fn cuda_expr(self) -> &'static str { match self { $(UnaryOp::$op => $cuda),* } }
            /// WGSL expression of `x`.
            pub fn wgsl_expr(self) -> &'static str { match self { $(UnaryOp::$op => $wgsl),* } }
            pub fn visit<V: UnaryVisitor>(self, v: V) -> V::Out {
                match self { $(UnaryOp::$op => v.visit::<unary::$op>()),* }
            }
            /// The CPU formula in f64, for tests and scalars.
            pub fn eval_f64(self, x: f64) -> f64 {
                match self { $(UnaryOp::$op => <unary::$op as UnaryKernel>::f(x)),* }
            }
        }
    };
}

// d/dx of each op is in grad_fns.rs (`unary_grad`).
unary_table! {
    Neg      "neg"      |x| -x,                   cuda: "(-x)",             wgsl: "(-x)";
    Abs      "abs"      |x| x.abs(),              cuda: "fabs(x)",          wgsl: "abs(x)";
    Exp      "exp"      |x| x.vexp(),             cuda: "exp(x)",           wgsl: "exp(x)";
    Log      "log"      |x| x.ln(),               cuda: "log(x)",           wgsl: "log(x)";
    Sqrt     "sqrt"     |x| x.sqrt(),             cuda: "sqrt(x)",          wgsl: "sqrt(x)";
    Recip    "recip"    |x| x.recip(),            cuda: "(1 / x)",          wgsl: "(1.0 / x)";
    Sqr      "sqr"      |x| x * x,                cuda: "(x * x)",          wgsl: "(x * x)";
    Sin      "sin"      |x| x.sin(),              cuda: "sin(x)",           wgsl: "sin(x)";
    Cos      "cos"      |x| x.cos(),              cuda: "cos(x)",           wgsl: "cos(x)";
    Tanh     "tanh"     |x| x.vtanh(),            cuda: "tanh(x)",          wgsl: "tanh(x)";
    Erf      "erf"      |x| x.erf(),              cuda: "erf(x)",           wgsl: "erf_approx(x)";
    Sigmoid  "sigmoid"  |x| sigmoid(x),           cuda: "(1 / (1 + exp(-x)))", wgsl: "(1.0 / (1.0 + exp(-x)))";
    // `x <= 0` is false for NaN, which stays NaN as in PyTorch (a select, so loops vectorize).
    Relu     "relu"     |x| if x <= F::c(0.0) { F::c(0.0) } else { x }, cuda: "(x <= 0 ? 0 : x)", wgsl: "select(x, 0.0, x <= 0.0 && !is_nan(x))";
    Gelu     "gelu"     |x| gelu_tanh(x),         cuda: "(C(0.5) * x * (1 + tanh(C(0.7978845608028654) * (x + C(0.044715) * x * x * x))))", wgsl: "(0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))))";
    GeluErf  "gelu_erf" |x| F::c(0.5) * x * (F::c(1.0) + (x * F::c(std::f64::consts::FRAC_1_SQRT_2)).erf()), cuda: "(C(0.5) * x * (1 + erf(x * C(0.7071067811865476))))", wgsl: "(0.5 * x * (1.0 + erf_approx(x * 0.7071067811865476)))";
    Silu     "silu"     |x| x * sigmoid(x),       cuda: "(x / (1 + exp(-x)))", wgsl: "(x / (1.0 + exp(-x)))";
    Softplus "softplus" |x| softplus(x),          cuda: "(fmax(x, 0) + log1p(exp(-fabs(x))))", wgsl: "(max(x, 0.0) + log(1.0 + exp(-abs(x))))";
    Step     "step"     |x| if x > F::c(0.0) { F::c(1.0) } else { F::c(0.0) }, cuda: "(x > 0 ? 1 : 0)", wgsl: "select(0.0, 1.0, x > 0.0)";
    // Rounding keeps NaN, the infinities and the sign of zero; `round` sends halves to the
    // even neighbour, as PyTorch (CUDA's rint and WGSL's round do).
    Floor    "floor"    |x| x.floor(),            cuda: "floor(x)",         wgsl: "floor(x)";
    Ceil     "ceil"     |x| x.ceil(),             cuda: "ceil(x)",          wgsl: "ceil(x)";
    Round    "round"    |x| x.round_half_even(),  cuda: "rint(x)",          wgsl: "round(x)";
    Trunc    "trunc"    |x| x.trunc(),            cuda: "trunc(x)",         wgsl: "trunc(x)";
    // 0 at NaN and at either zero, as PyTorch's sign.
    Sign     "sign"     |x| if x > F::c(0.0) { F::c(1.0) } else if x < F::c(0.0) { F::c(-1.0) } else { F::c(0.0) }, cuda: "(x > 0 ? 1 : (x < 0 ? -1 : 0))", wgsl: "select(select(0.0, -1.0, x < 0.0), 1.0, x > 0.0)";
}

#[inline(always)]
fn sigmoid<F: Float>(x: F) -> F {
    F::c(1.0) / (F::c(1.0) + (-x).vexp())
}

#[inline(always)]
fn gelu_tanh<F: Float>(x: F) -> F {
    // 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3), computed as the identical
    // x sigmoid(2u): one exp and one division instead of tanh's polynomial, exp, division and
    // selects, and no cancellation in 1 + tanh(u) for negative x.
    let two_u = F::c(2.0 * 0.7978845608028654) * (x + F::c(0.044715) * x * x * x);
    x / (F::c(1.0) + (-two_u).vexp())
}

#[inline(always)]
fn softplus<F: Float>(x: F) -> F {
    // log(1 + e^x) without overflow for large x.
    num_traits::Float::max(x, F::c(0.0)) + (-x.abs()).vexp().ln_1p()
}

macro_rules! binary_table {
    ($($op:ident $name:literal |$a:ident, $b:ident| $cpu:expr, cuda: $cuda:literal, wgsl: $wgsl:literal;)*) => {
        /// Elementwise ops of two inputs of one shape (broadcasting happens before).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum BinaryOp { $($op),* }

        pub mod binary {
            use super::*;
            $(
                pub struct $op;
                impl BinaryKernel for $op {
                    const NAME: &'static str = $name;
                    #[inline(always)]
                    fn f<T: Elem>($a: T, $b: T) -> T { $cpu }
                }
            )*
        }

        impl BinaryOp {
            pub const ALL: &'static [BinaryOp] = &[$(BinaryOp::$op),*];
            pub fn name(self) -> &'static str { match self { $(BinaryOp::$op => $name),* } }
            pub fn cuda_expr(self) -> &'static str { match self { $(BinaryOp::$op => $cuda),* } }
            pub fn wgsl_expr(self) -> &'static str { match self { $(BinaryOp::$op => $wgsl),* } }
            pub fn visit<V: BinaryVisitor>(self, v: V) -> V::Out {
                match self { $(BinaryOp::$op => v.visit::<binary::$op>()),* }
            }
        }
    };
}

// d/da and d/db of each op are in grad_fns.rs (`binary_grad`).
binary_table! {
    Add     "add"     |a, b| a.add(b), cuda: "(a + b)",   wgsl: "(a + b)";
    Sub     "sub"     |a, b| a.sub(b), cuda: "(a - b)",   wgsl: "(a - b)";
    Mul     "mul"     |a, b| a.mul(b), cuda: "(a * b)",   wgsl: "(a * b)";
    Div     "div"     |a, b| a.div(b), cuda: "(a / b)",   wgsl: "(a / b)";
    Pow     "pow"     |a, b| a.pow(b), cuda: "pow(a, b)", wgsl: "pow_ieee(a, b)";
    // NaN if either operand is NaN, as `torch.maximum` (fmax / max would drop it); a + b
    // is that NaN.
    Maximum "maximum" |a, b| a.maximum(b), cuda: "((a != a || b != b) ? a + b : fmax(a, b))", wgsl: "select(max(a, b), a + b, is_nan(a) || is_nan(b))";
    Minimum "minimum" |a, b| a.minimum(b), cuda: "((a != a || b != b) ? a + b : fmin(a, b))", wgsl: "select(min(a, b), a + b, is_nan(a) || is_nan(b))";
    // Python's `//` and `%` (the remainder takes the divisor's sign), as PyTorch's
    // floor_divide and remainder: from the exact fmod, so `5.3 % 0.1` is not off by a
    // rounded product. Integer forms in gpu/target.rs.
    FloorDivide "floor_divide" |a, b| a.floor_divide(b), cuda: "floor_divide_float(a, b)", wgsl: "floor_divide_f32(a, b)";
    Remainder "remainder" |a, b| a.remainder(b), cuda: "remainder_float(a, b)", wgsl: "remainder_f32(a, b)";
}

/// Comparisons; the result is a u8 tensor of 0 and 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    pub const ALL: &'static [CmpOp] = &[CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge];
    pub fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }
    /// The operator in C and WGSL syntax alike.
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
    #[inline(always)]
    pub fn eval<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
}

/// Reductions over a set of dims. Arg reductions return i64 positions, and sums of integers
/// are i64 (exact, saturating beyond i64's range), as PyTorch's (see `out_dtype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
    ArgMax,
    ArgMin,
}

impl ReduceOp {
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::ArgMax => "argmax",
            ReduceOp::ArgMin => "argmin",
        }
    }
    pub fn is_arg(self) -> bool {
        matches!(self, ReduceOp::ArgMax | ReduceOp::ArgMin)
    }

    /// The dtype of the result of reducing a tensor of `input`: PyTorch's (`argmax` gives
    /// int64, and `sum` promotes integers, bool-like u8 included, to int64).
    pub fn out_dtype(self, input: DType) -> DType {
        match self {
            ReduceOp::ArgMax | ReduceOp::ArgMin => DType::I64,
            ReduceOp::Sum if input.is_int() => DType::I64,
            _ => input,
        }
    }
}

/// The activation a fused Linear forward (`Tensor::linear`) applies after adding the bias.
/// Backends with fused kernels (cuBLASLt epilogues on CUDA) run it inside the product.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Epilogue {
    /// No activation: `x @ wᵀ + b`.
    #[default]
    None,
    Relu,
    /// GELU, tanh approximation (the same function as `Tensor::gelu`).
    Gelu,
}

impl Epilogue {
    pub const ALL: &'static [Epilogue] = &[Epilogue::None, Epilogue::Relu, Epilogue::Gelu];

    /// The elementwise op it applies, if any.
    pub fn unary(self) -> Option<UnaryOp> {
        match self {
            Epilogue::None => None,
            Epilogue::Relu => Some(UnaryOp::Relu),
            Epilogue::Gelu => Some(UnaryOp::Gelu),
        }
    }
}
