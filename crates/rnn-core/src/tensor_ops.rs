//! Compute ops on tensors: elementwise (from the op table), comparisons, reductions,
//! matmul and index ops. Each checks its arguments, then calls the storage once.

use std::sync::Arc;

use crate::autocast::{self, autocast_op, AutocastOp};
use crate::backprop::Op;
use crate::fused::softmax::Softmax;
use crate::op_table::{BinaryOp, CmpOp, Epilogue, ReduceOp, UnaryOp};
use crate::{DType, Dim, Dims, Error, Layout, Result, Shape, Tensor};

macro_rules! unary_methods {
    ($($name:ident => $op:ident),* $(,)?) => {
        impl Tensor {$(
            #[doc = concat!("Elementwise `", stringify!($name), "` (see the op table in `op_table.rs`).")]
            pub fn $name(&self) -> Result<Tensor> {
                self.unary(UnaryOp::$op)
            }
        )*}
    };
}
unary_methods!(
    neg => Neg, abs => Abs, exp => Exp, log => Log, sqrt => Sqrt, recip => Recip, sqr => Sqr,
    sin => Sin, cos => Cos, tanh => Tanh, erf => Erf, sigmoid => Sigmoid, relu => Relu,
    gelu => Gelu, gelu_erf => GeluErf, silu => Silu, softplus => Softplus, step => Step,
    floor => Floor, ceil => Ceil, round => Round, trunc => Trunc, sign => Sign,
);

macro_rules! binary_methods {
    ($($name:ident, $scalar:ident => $op:ident),* $(,)?) => {
        impl Tensor {$(
            #[doc = concat!("Elementwise `", stringify!($name), "` with numpy broadcasting.")]
            pub fn $name(&self, rhs: &Tensor) -> Result<Tensor> {
                self.binary(rhs, BinaryOp::$op)
            }
            #[doc = concat!("`", stringify!($name), "` with a scalar right-hand side.")]
            pub fn $scalar(&self, rhs: f64) -> Result<Tensor> {
                self.binary_scalar(rhs, BinaryOp::$op)
            }
        )*}
    };
}
binary_methods!(
    add, add_scalar => Add, sub, sub_scalar => Sub, mul, mul_scalar => Mul, div, div_scalar => Div,
    pow, pow_scalar => Pow, maximum, maximum_scalar => Maximum, minimum, minimum_scalar => Minimum,
    floor_divide, floor_divide_scalar => FloorDivide, remainder, remainder_scalar => Remainder,
);

macro_rules! cmp_methods {
    ($($name:ident, $scalar:ident => $op:ident),* $(,)?) => {
        impl Tensor {$(
            #[doc = concat!("Elementwise `", stringify!($name), "` with broadcasting: a u8 tensor of 0 and 1.")]
            pub fn $name(&self, rhs: &Tensor) -> Result<Tensor> {
                self.cmp(rhs, CmpOp::$op)
            }
            #[doc = concat!("`", stringify!($name), "` against a scalar.")]
            pub fn $scalar(&self, rhs: f64) -> Result<Tensor> {
                self.cmp(&self.scalar_like(rhs)?, CmpOp::$op)
            }
        )*}
    };
}
cmp_methods!(eq, eq_scalar => Eq, ne, ne_scalar => Ne, lt, lt_scalar => Lt, le, le_scalar => Le, gt, gt_scalar => Gt, ge, ge_scalar => Ge);

impl Tensor {
    pub fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        let storage = self.storage().unary(self.layout(), op)?;
        Ok(Tensor::from_parts(storage, Layout::contiguous(self.shape().clone()), Some(Op::Unary(self.clone(), op))))
    }

    /// A rank-0 tensor of this tensor's dtype and device.
    pub(crate) fn scalar_like(&self, value: f64) -> Result<Tensor> {
        Tensor::full(value, (), self.dtype(), self.device())
    }

    /// Both operands broadcast to their common shape (views, no copies).
    fn broadcast_pair(&self, rhs: &Tensor, op: &'static str) -> Result<(Tensor, Tensor)> {
        if self.dtype() != rhs.dtype() {
            return Err(Error::DTypeMismatch { op, lhs: self.dtype(), rhs: rhs.dtype() });
        }
        if self.device() != rhs.device() {
            return Err(Error::DeviceMismatch { op, lhs: self.device(), rhs: rhs.device() });
        }
        let shape = self.shape().broadcast_with(rhs.shape(), op)?;
        Ok((self.broadcast_as(shape.clone())?, rhs.broadcast_as(shape)?))
    }

    /// Elementwise `op`. Dividing integers is PyTorch's true division: both operands become
    /// f32 (its default float dtype), so `7 / 2` is 3.5 and a zero divisor gives ±inf or NaN
    /// instead of an integer that no rule would produce.
    pub fn binary(&self, rhs: &Tensor, op: BinaryOp) -> Result<Tensor> {
        if op == BinaryOp::Div && self.dtype().is_int() && rhs.dtype() == self.dtype() {
            return self.to_dtype(DType::F32)?.binary(&rhs.to_dtype(DType::F32)?, op);
        }
        if self.dtype() != rhs.dtype() && autocast::is_active() {
            return autocast_op(AutocastOp::Elementwise, &[self, rhs], |t| t[0].binary(&t[1], op));
        }
        let (a, b) = self.broadcast_pair(rhs, op.name())?;
        if matches!(op, BinaryOp::FloorDivide | BinaryOp::Remainder) && b.dtype().is_int() {
            // PyTorch raises ZeroDivisionError here; the kernels would give 0.
            if b.eq_scalar(0.0)?.sum_all()?.to_scalar::<i64>()? > 0 {
                return Err(Error::DivisionByZero { op: op.name() });
            }
        }
        let storage = a.storage().binary(a.layout(), &b.storage(), b.layout(), op)?;
        Ok(Tensor::from_parts(storage, Layout::contiguous(a.shape().clone()), Some(Op::Binary(a, b, op))))
    }

    /// `op` with a scalar right-hand side. An integer tensor becomes f32 first when divided
    /// (as in `binary`) or when the scalar is not an integer, so the scalar is not truncated
    /// (PyTorch's promotion: `7 // 2.5` is 2.0).
    fn binary_scalar(&self, rhs: f64, op: BinaryOp) -> Result<Tensor> {
        let divided_int = op == BinaryOp::Div && self.dtype().is_int();
        let dtype = if divided_int { DType::F32 } else { self.dtype().with_scalar(rhs) };
        if dtype != self.dtype() {
            return self.to_dtype(dtype)?.binary_scalar(rhs, op);
        }
        self.binary(&self.scalar_like(rhs)?, op)
    }

    pub fn cmp(&self, rhs: &Tensor, op: CmpOp) -> Result<Tensor> {
        let (a, b) = self.broadcast_pair(rhs, op.name())?;
        let storage = a.storage().cmp(a.layout(), &b.storage(), b.layout(), op)?;
        Ok(Tensor::from_parts(storage, Layout::contiguous(a.shape().clone()), None))
    }

    /// `self != 0 ? on_true : on_false`, all three broadcast together. `self` is an integer mask.
    pub fn where_cond(&self, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        let (t, f) = on_true.broadcast_pair(on_false, "where_cond")?;
        let shape = self.shape().broadcast_with(t.shape(), "where_cond")?;
        let (c, t, f) =
            (self.broadcast_as(shape.clone())?, t.broadcast_as(shape.clone())?, f.broadcast_as(shape.clone())?);
        let storage = c.storage().where_cond(c.layout(), &t.storage(), t.layout(), &f.storage(), f.layout())?;
        Ok(Tensor::from_parts(storage, Layout::contiguous(shape), Some(Op::WhereCond(c, t, f))))
    }

    /// Limits every element to `[min, max]`; NaN stays NaN. As in PyTorch, the gradient
    /// passes where `min <= x <= max` (bounds included) and is zero elsewhere, NaN included.
    pub fn clamp(&self, min: f64, max: f64) -> Result<Tensor> {
        if min > max || min.is_nan() || max.is_nan() {
            return Err(Error::invalid("clamp", format!("needs min <= max, got min {min} and max {max}")));
        }
        let (mut min, mut max) = (min, max);
        if self.dtype().is_int() {
            // A finite bound that is not an integer makes an integer tensor f32, as in
            // PyTorch; an infinite one is the widest integer, which each dtype saturates.
            let fractional = |v: f64| v.is_finite() && v.fract() != 0.0;
            if fractional(min) || fractional(max) {
                return self.to_dtype(DType::F32)?.clamp(min, max);
            }
            (min, max) = (min.max(i64::MIN as f64), max.min(i64::MAX as f64));
        }
        let inside = self.ge_scalar(min)?.mul(&self.le_scalar(max)?)?;
        let clamped = self.detach().maximum_scalar(min)?.minimum_scalar(max)?;
        inside.where_cond(self, &clamped)
    }

    /// `value` where `mask` is non-zero, `self` elsewhere.
    pub fn masked_fill(&self, mask: &Tensor, value: f64) -> Result<Tensor> {
        mask.where_cond(&self.scalar_like(value)?, self)
    }

    // ---- reductions ----

    /// Reduces over `dims`, keeping them with size 1.
    fn reduce_keepdim(&self, dims: &[usize], op: ReduceOp) -> Result<Tensor> {
        let reduces_empty = dims.iter().any(|&d| self.dims()[d] == 0);
        if op != ReduceOp::Sum && reduces_empty {
            return Err(Error::EmptyTensor { op: op.name(), shape: self.shape().clone() });
        }
        let storage = self.storage().reduce(self.layout(), op, dims)?;
        let mut out = self.dims().to_vec();
        dims.iter().for_each(|&d| out[d] = 1);
        let grad_op = (!op.is_arg()).then(|| Op::Reduce(self.clone(), op));
        Ok(Tensor::from_parts(storage, Layout::contiguous(out), grad_op))
    }

    fn reduce(&self, dims: impl Dims, op: ReduceOp, keepdim: bool) -> Result<Tensor> {
        let dims = dims.to_indexes(self.shape(), op.name())?;
        if op == ReduceOp::Sum && autocast::is_active() {
            return autocast_op(AutocastOp::Sum, &[self], |t| t[0].reduce(dims, op, keepdim));
        }
        let out = self.reduce_keepdim(&dims, op)?;
        if keepdim {
            return Ok(out);
        }
        let kept: Vec<usize> = (0..self.rank()).filter(|d| !dims.contains(d)).map(|d| self.dims()[d]).collect();
        out.reshape(kept)
    }

    /// The sum over `dims`; integer tensors (u8 included) sum exactly into i64, as in
    /// PyTorch, saturating beyond i64's range (i32's on wgpu, which stores i64 as i32).
    pub fn sum(&self, dims: impl Dims) -> Result<Tensor> {
        self.reduce(dims, ReduceOp::Sum, false)
    }
    pub fn sum_keepdim(&self, dims: impl Dims) -> Result<Tensor> {
        self.reduce(dims, ReduceOp::Sum, true)
    }
    pub fn max(&self, dims: impl Dims) -> Result<Tensor> {
        self.reduce(dims, ReduceOp::Max, false)
    }
    pub fn max_keepdim(&self, dims: impl Dims) -> Result<Tensor> {
        self.reduce(dims, ReduceOp::Max, true)
    }
    pub fn min(&self, dims: impl Dims) -> Result<Tensor> {
        self.reduce(dims, ReduceOp::Min, false)
    }
    pub fn min_keepdim(&self, dims: impl Dims) -> Result<Tensor> {
        self.reduce(dims, ReduceOp::Min, true)
    }
    /// Position (i64, as in PyTorch) of the largest element along `dims` (flattened when
    /// several); the first of tied elements.
    pub fn argmax(&self, dims: impl Dims) -> Result<Tensor> {
        self.reduce(dims, ReduceOp::ArgMax, false)
    }
    pub fn argmax_keepdim(&self, dims: impl Dims) -> Result<Tensor> {
        self.reduce(dims, ReduceOp::ArgMax, true)
    }
    pub fn argmin(&self, dims: impl Dims) -> Result<Tensor> {
        self.reduce(dims, ReduceOp::ArgMin, false)
    }
    pub fn argmin_keepdim(&self, dims: impl Dims) -> Result<Tensor> {
        self.reduce(dims, ReduceOp::ArgMin, true)
    }

    pub fn mean(&self, dims: impl Dims) -> Result<Tensor> {
        self.mean_impl(dims, false)
    }
    pub fn mean_keepdim(&self, dims: impl Dims) -> Result<Tensor> {
        self.mean_impl(dims, true)
    }
    fn mean_impl(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        self.expect_float("mean")?;
        let dims = dims.to_indexes(self.shape(), "mean")?;
        if autocast::is_active() {
            return autocast_op(AutocastOp::Mean, &[self], |t| t[0].mean_impl(dims, keepdim));
        }
        let n: usize = dims.iter().map(|&d| self.dims()[d]).product();
        self.reduce(dims, ReduceOp::Sum, keepdim)?.div_scalar(n as f64)
    }

    /// Unbiased variance (divides by n - 1, as PyTorch's default).
    pub fn var(&self, dims: impl Dims) -> Result<Tensor> {
        self.var_with(dims, 1.0, false)
    }
    pub fn var_keepdim(&self, dims: impl Dims) -> Result<Tensor> {
        self.var_with(dims, 1.0, true)
    }
    /// The variance over `dims` divided by `n - correction` (PyTorch's `var(dim, correction=,
    /// keepdim=)`: 1 is the unbiased estimate, 0 the population variance). With
    /// `n <= correction` the division is by zero or less, as in PyTorch (inf or NaN).
    pub fn var_with(&self, dims: impl Dims, correction: f64, keepdim: bool) -> Result<Tensor> {
        self.expect_float("var")?;
        let dims = dims.to_indexes(self.shape(), "var")?;
        let n: usize = dims.iter().map(|&d| self.dims()[d]).product();
        // The mean is detached: its gradient term, sum(x - mean) = 0, vanishes exactly, and
        // PyTorch's formula 2 (x - mean) / (n - correction) leaves it out (with an infinite x
        // the term would be NaN and spread over the whole slice).
        let centered = self.sub(&self.mean_keepdim(dims.clone())?.detach())?;
        centered.sqr()?.reduce(dims, ReduceOp::Sum, keepdim)?.div_scalar(n as f64 - correction)
    }

    /// Unbiased standard deviation: the square root of `var`. Its gradient is NaN where the
    /// slice is constant (0 / 0), as PyTorch's.
    pub fn std(&self, dims: impl Dims) -> Result<Tensor> {
        self.std_with(dims, 1.0, false)
    }
    pub fn std_keepdim(&self, dims: impl Dims) -> Result<Tensor> {
        self.std_with(dims, 1.0, true)
    }
    /// The square root of `var_with`.
    pub fn std_with(&self, dims: impl Dims, correction: f64, keepdim: bool) -> Result<Tensor> {
        self.var_with(dims, correction, keepdim)?.sqrt()
    }

    /// `log(sum(exp(x)))` over `dims`, computed stably: shifted by the slice's largest value
    /// (by 0 where that is infinite or NaN, as PyTorch: a slice of -inf gives -inf, one with
    /// +inf gives +inf, one with NaN NaN; an empty slice gives -inf). Its gradient is
    /// `softmax(x)` over the slice.
    pub fn logsumexp(&self, dims: impl Dims) -> Result<Tensor> {
        self.logsumexp_impl(dims, false)
    }
    pub fn logsumexp_keepdim(&self, dims: impl Dims) -> Result<Tensor> {
        self.logsumexp_impl(dims, true)
    }
    fn logsumexp_impl(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        self.expect_float("logsumexp")?;
        let dims = dims.to_indexes(self.shape(), "logsumexp")?;
        // The shift is detached: the result does not depend on it, so its gradient terms
        // cancel exactly. `m - m == 0` holds where m is finite only. Empty slices have no
        // max: their shift is 0 and their sum 0, so the result is log(0) = -inf.
        let shift = if dims.iter().any(|&d| self.dims()[d] == 0) {
            let mut kept = self.dims().to_vec();
            dims.iter().for_each(|&d| kept[d] = 1);
            Tensor::zeros(kept, self.dtype(), self.device())?
        } else {
            let m = self.max_keepdim(dims.clone())?.detach();
            let zero = m.zeros_like()?;
            m.sub(&m)?.eq(&zero)?.where_cond(&m, &zero)?
        };
        let sum = self.sub(&shift)?.exp()?.reduce(dims, ReduceOp::Sum, keepdim)?;
        let shift = if keepdim { shift } else { shift.reshape(sum.dims().to_vec())? };
        sum.log()?.add(&shift)
    }

    /// PyTorch's `mean` and `var` refuse integer tensors (they could not infer the result's
    /// dtype): so do ours, rather than rounding the result to an integer.
    fn expect_float(&self, op: &'static str) -> Result<()> {
        if self.dtype().is_int() {
            let hint = ": it needs a float tensor (convert with to_dtype first)";
            return Err(Error::UnsupportedDType { op, dtype: self.dtype(), hint });
        }
        Ok(())
    }

    pub fn sum_all(&self) -> Result<Tensor> {
        self.sum(crate::AllDims)
    }
    pub fn mean_all(&self) -> Result<Tensor> {
        self.mean(crate::AllDims)
    }
    pub fn max_all(&self) -> Result<Tensor> {
        self.max(crate::AllDims)
    }
    pub fn min_all(&self) -> Result<Tensor> {
        self.min(crate::AllDims)
    }

    /// `exp(x) / sum(exp(x))` along `dim`, shifted by the row max so large inputs do not
    /// overflow. One fused pass per row (a composition of primitives took five).
    pub fn softmax(&self, dim: impl Dim) -> Result<Tensor> {
        self.softmax_impl(dim, false, "softmax")
    }

    /// `log(softmax(x))` along `dim`, computed as `x - max - log(sum(exp(x - max)))`.
    pub fn log_softmax(&self, dim: impl Dim) -> Result<Tensor> {
        self.softmax_impl(dim, true, "log_softmax")
    }

    fn softmax_impl(&self, dim: impl Dim, log: bool, op: &'static str) -> Result<Tensor> {
        if self.rank() == 0 {
            // Like PyTorch, a 0-d tensor accepts dim 0 or -1.
            dim.to_index_plus_one(self.shape(), op)?;
            return self.reshape(1)?.softmax_impl(0, log, op)?.reshape(());
        }
        let d = dim.to_index(self.shape(), op)?;
        let last = self.rank() - 1;
        if d != last {
            return self.transpose(d, last)?.softmax_impl(last, log, op)?.transpose(d, last);
        }
        Tensor::fused(Arc::new(Softmax { log }), &[self])
    }

    // ---- matmul ----

    /// Matrix product with PyTorch's rules: 1-D operands are promoted, batch dims broadcast.
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        if self.rank() == 0 || rhs.rank() == 0 {
            return Err(Error::invalid(
                "matmul",
                format!("needs at least 1-D operands, got {:?} and {:?}", self.shape(), rhs.shape()),
            ));
        }
        if self.rank() == 1 {
            // The promoted dim of size 1 is last when `rhs` is 1-D too (the result is [1]).
            let m_dim = if rhs.rank() == 1 { -1 } else { -2 };
            return self.unsqueeze(0)?.matmul(rhs)?.squeeze(m_dim);
        }
        if rhs.rank() == 1 {
            return self.matmul(&rhs.unsqueeze(1)?)?.squeeze(-1);
        }
        if autocast::is_active() {
            return autocast_op(AutocastOp::Matmul, &[self, rhs], |t| t[0].matmul(&t[1]));
        }
        if self.dtype() != rhs.dtype() {
            return Err(Error::DTypeMismatch { op: "matmul", lhs: self.dtype(), rhs: rhs.dtype() });
        }
        let (ad, bd) = (self.dims(), rhs.dims());
        let (m, k, k2, n) = (ad[ad.len() - 2], ad[ad.len() - 1], bd[bd.len() - 2], bd[bd.len() - 1]);
        if k != k2 {
            return Err(Error::ShapeMismatch { op: "matmul", lhs: self.shape().clone(), rhs: rhs.shape().clone() });
        }
        if self.device().is_cpu() && crate::cpu::prefers_transposed_product(self.layout(), rhs.layout()) {
            return rhs.t()?.matmul(&self.t()?)?.t();
        }
        let batch_a = Shape::from(&ad[..ad.len() - 2]);
        let batch = batch_a.broadcast_with(&Shape::from(&bd[..bd.len() - 2]), "matmul")?;
        let with = |x, y| batch.dims().iter().copied().chain([x, y]).collect::<Vec<_>>();
        let a = self.broadcast_as(with(m, k))?;
        let b = rhs.broadcast_as(with(k, n))?;
        let storage = a.storage().matmul(a.layout(), &b.storage(), b.layout())?;
        Ok(Tensor::from_parts(storage, Layout::contiguous(with(m, n)), Some(Op::Matmul(a, b))))
    }

    /// `act(self @ weightᵀ + bias)`, a Linear layer's forward as one op: `self` is `[m, k]`,
    /// `weight` `[n, k]` (PyTorch's `[out, in]`) and `bias` `[n]`; the result is `[m, n]`.
    /// On CUDA the bias and activation run inside the cuBLASLt product (epilogues);
    /// elsewhere it is a matmul, an add and the activation. Differentiable in all three
    /// (with GELU under autograd: the product, then the fused `bias_gelu`, see
    /// `fused::linear::linear`).
    pub fn linear(&self, weight: &Tensor, bias: Option<&Tensor>, act: Epilogue) -> Result<Tensor> {
        crate::fused::linear::linear(self, weight, bias, act)
    }

    // ---- index ops ----

    /// The slices `ids` (1-D integer tensor) along `dim`.
    pub fn index_select(&self, ids: &Tensor, dim: impl Dim) -> Result<Tensor> {
        let d = dim.to_index(self.shape(), "index_select")?;
        ids.expect_rank("index_select", 1)?;
        let storage = self.storage().index_select(self.layout(), &ids.storage(), ids.layout(), d)?;
        let mut dims = self.dims().to_vec();
        dims[d] = ids.elem_count();
        Ok(Tensor::from_parts(storage, Layout::contiguous(dims), Some(Op::IndexSelect(self.clone(), ids.clone(), d))))
    }

    /// `out[.., j, ..] = self[.., ids[.., j, ..], ..]` along `dim`; `ids` matches `self`'s
    /// shape except at `dim`, and the output has `ids`'s shape.
    pub fn gather(&self, ids: &Tensor, dim: impl Dim) -> Result<Tensor> {
        let d = dim.to_index(self.shape(), "gather")?;
        check_index_shape("gather", self, ids, d)?;
        let storage = self.storage().gather(self.layout(), &ids.storage(), ids.layout(), d)?;
        Ok(Tensor::from_parts(
            storage,
            Layout::contiguous(ids.shape().clone()),
            Some(Op::Gather(self.clone(), ids.clone(), d)),
        ))
    }

    /// A copy of `self` with `src[.., j, ..]` added at `self[.., ids[.., j, ..], ..]`.
    pub fn scatter_add(&self, ids: &Tensor, src: &Tensor, dim: impl Dim) -> Result<Tensor> {
        let d = dim.to_index(self.shape(), "scatter_add")?;
        check_index_shape("scatter_add", self, ids, d)?;
        if ids.shape() != src.shape() {
            return Err(Error::ShapeMismatch { op: "scatter_add", lhs: ids.shape().clone(), rhs: src.shape().clone() });
        }
        let storage =
            self.storage().scatter_add(self.layout(), &ids.storage(), ids.layout(), &src.storage(), src.layout(), d)?;
        let op = Op::ScatterAdd(self.clone(), ids.clone(), src.clone(), d);
        Ok(Tensor::from_parts(storage, Layout::contiguous(self.shape().clone()), Some(op)))
    }

    /// One-hot rows: `self` holds class ids; the result has one more dim of `num_classes`.
    pub fn one_hot(&self, num_classes: usize, dtype: DType) -> Result<Tensor> {
        if self.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op: "one_hot",
                dtype: self.dtype(),
                hint: ": class ids must be an integer tensor",
            });
        }
        let mut out_dims = self.dims().to_vec();
        out_dims.push(num_classes);
        Shape::from(out_dims).checked_elem_count("one_hot")?;
        let n = i64::try_from(num_classes)
            .map_err(|_| Error::invalid("one_hot", format!("{num_classes} classes do not fit in an i64")))?;
        // Compared as i64: u8 ids cannot name the classes above 255 (they would wrap).
        let ids = self.to_dtype(DType::I64)?;
        if self.elem_count() > 0 {
            let (lo, hi) = (ids.min_all()?.to_scalar::<i64>()?, ids.max_all()?.to_scalar::<i64>()?);
            if let Some(bad) = [lo, hi].into_iter().find(|&i| i < 0 || i as usize >= num_classes) {
                return Err(Error::IndexOutOfRange {
                    op: "one_hot",
                    index: bad,
                    size: num_classes,
                    shape: self.shape().clone(),
                });
            }
        }
        let classes = Tensor::arange(0i64, n, self.device())?;
        ids.unsqueeze(self.rank())?.eq(&classes)?.to_dtype(dtype)
    }
}

/// Index tensors of gather / scatter_add have the source's rank and sizes except at `dim`.
fn check_index_shape(op: &'static str, x: &Tensor, ids: &Tensor, dim: usize) -> Result<()> {
    let same_rank = ids.rank() == x.rank();
    if !same_rank || ids.dims().iter().zip(x.dims()).enumerate().any(|(i, (a, b))| i != dim && a != b) {
        return Err(Error::ShapeMismatch { op, lhs: x.shape().clone(), rhs: ids.shape().clone() });
    }
    if ids.dtype().is_float() {
        return Err(Error::UnsupportedDType { op, dtype: ids.dtype(), hint: ": indices must be u8, u32 or i64" });
    }
    Ok(())
}
