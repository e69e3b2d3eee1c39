//! The gradient of each op family: given the op, its output `y` and the gradient `g` of the
//! loss with respect to `y`, the gradients with respect to its inputs.

use crate::backprop::Op;
use crate::op_table::{BinaryOp, ReduceOp, UnaryOp};
use crate::{Result, Tensor};

/// Only inputs that track gradients get one: computing the rest (say, the gradient of a
/// matmul with respect to the input batch) would be wasted work.
pub(crate) fn input_grads<'a>(op: &'a Op, y: &Tensor, g: &Tensor) -> Result<Vec<(&'a Tensor, Tensor)>> {
    let grads = match op {
        Op::Binary(a, b, bop) => return binary_grad(*bop, a, b, y, g),
        Op::Matmul(a, b) => {
            let ga = a.tracks_grad().then(|| g.matmul(&b.t()?)).transpose()?;
            let gb = b.tracks_grad().then(|| a.t()?.matmul(g)).transpose()?;
            return Ok(pair(a, ga, b, gb));
        }
        Op::Fused(f, inputs, saved) => {
            let grads = f.backward(inputs, saved, y, g)?;
            return Ok(inputs.iter().zip(grads).filter_map(|(t, gt)| gt.map(|gt| (t, gt))).collect());
        }
        _ => other_grads(op, y, g)?,
    };
    Ok(grads.into_iter().filter(|(t, _)| t.tracks_grad()).collect())
}

fn pair<'a>(a: &'a Tensor, ga: Option<Tensor>, b: &'a Tensor, gb: Option<Tensor>) -> Vec<(&'a Tensor, Tensor)> {
    [ga.map(|g| (a, g)), gb.map(|g| (b, g))].into_iter().flatten().collect()
}

fn other_grads<'a>(op: &'a Op, y: &Tensor, g: &Tensor) -> Result<Vec<(&'a Tensor, Tensor)>> {
    Ok(match op {
        Op::Unary(x, u) => vec![(x, unary_grad(*u, x, y, g)?)],
        Op::Binary(..) | Op::Matmul(..) | Op::Fused(..) => unreachable_grad(op)?,
        Op::WhereCond(c, t, f) => {
            let zero = g.zeros_like()?;
            vec![(t, c.where_cond(g, &zero)?), (f, c.where_cond(&zero, g)?)]
        }
        Op::Reduce(x, r) => vec![(x, reduce_grad(*r, x, y, g)?)],
        Op::Reshape(x) => vec![(x, g.reshape(x.shape())?)],
        Op::Permute(x, perm) => {
            let mut inverse = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inverse[p] = i;
            }
            vec![(x, g.permute(&inverse)?)]
        }
        Op::Narrow(x, dim, start) => vec![(x, narrow_grad(x, *dim, *start, g)?)],
        Op::Broadcast(x) => vec![(x, sum_to_shape(g, x)?)],
        Op::Copy(x) => vec![(x, g.to_device(x.device())?)],
        Op::ToDType(x) => vec![(x, g.to_dtype(x.dtype())?)],
        Op::Cat(xs, dim) => {
            let mut start = 0;
            let mut out = Vec::with_capacity(xs.len());
            for x in xs {
                let len = x.dims()[*dim];
                out.push((x, g.narrow(*dim, start, len)?));
                start += len;
            }
            out
        }
        Op::IndexSelect(x, ids, dim) => {
            // Every picked slice sends its gradient back to the row it came from.
            let mut shape = vec![1; g.rank()];
            shape[*dim] = ids.elem_count();
            let ids = ids.reshape(shape)?.broadcast_as(g.shape())?;
            vec![(x, x.zeros_like()?.scatter_add(&ids, g, *dim)?)]
        }
        Op::Gather(x, ids, dim) => vec![(x, x.zeros_like()?.scatter_add(ids, g, *dim)?)],
        Op::ScatterAdd(x, ids, src, dim) => vec![(x, g.clone()), (src, g.gather(ids, *dim)?)],
        // Each op is the other's adjoint: <unfold(x), g> = <x, fold(g)>.
        Op::Unfold2d(x, window) => vec![(x, g.fold2d_window((x.dims()[2], x.dims()[3]), window)?)],
        Op::Fold2d(cols, window) => vec![(cols, g.unfold2d_window(window, 0.0)?)],
    })
}

/// d/dx of each unary op of the op table, times `g`.
pub(crate) fn unary_grad(op: UnaryOp, x: &Tensor, y: &Tensor, g: &Tensor) -> Result<Tensor> {
    use std::f64::consts::{FRAC_2_SQRT_PI, PI};
    match op {
        UnaryOp::Neg => g.neg(),
        UnaryOp::Abs => g.mul(&x.step()?.sub(&x.neg()?.step()?)?),
        UnaryOp::Exp => g.mul(y),
        UnaryOp::Log => g.div(x),
        UnaryOp::Sqrt => g.div(&y.mul_scalar(2.0)?),
        UnaryOp::Recip => g.mul(&y.sqr()?)?.neg(),
        UnaryOp::Sqr => g.mul(&x.mul_scalar(2.0)?),
        UnaryOp::Sin => g.mul(&x.cos()?),
        UnaryOp::Cos => g.mul(&x.sin()?.neg()?),
        UnaryOp::Tanh => g.mul(&y.sqr()?.neg()?.add_scalar(1.0)?),
        UnaryOp::Erf => g.mul(&x.sqr()?.neg()?.exp()?.mul_scalar(FRAC_2_SQRT_PI)?),
        UnaryOp::Sigmoid => g.mul(&y.mul(&y.neg()?.add_scalar(1.0)?)?),
        // PyTorch's threshold backward: zero where x <= 0, so a NaN input passes the gradient.
        UnaryOp::Relu => crate::fused::relu_backward::relu_backward(x, g),
        UnaryOp::Gelu => {
            // y = 0.5 x (1 + tanh(u)), u = c (x + 0.044715 x^3), c = sqrt(2 / pi)
            let c = (2.0 / PI).sqrt();
            let x2 = x.sqr()?;
            let t = x.add(&x.mul(&x2)?.mul_scalar(0.044715)?)?.mul_scalar(c)?.tanh()?;
            let du = x2.mul_scalar(3.0 * 0.044715)?.add_scalar(1.0)?.mul_scalar(c)?;
            let dt = t.sqr()?.neg()?.add_scalar(1.0)?;
            let d = t.add_scalar(1.0)?.mul_scalar(0.5)?.add(&x.mul(&dt)?.mul(&du)?.mul_scalar(0.5)?)?;
            g.mul(&d)
        }
        UnaryOp::GeluErf => {
            // Phi(x) + x phi(x)
            let cdf = x.mul_scalar(std::f64::consts::FRAC_1_SQRT_2)?.erf()?.add_scalar(1.0)?.mul_scalar(0.5)?;
            let pdf = x.sqr()?.mul_scalar(-0.5)?.exp()?.mul_scalar(1.0 / (2.0 * PI).sqrt())?;
            g.mul(&cdf.add(&x.mul(&pdf)?)?)
        }
        UnaryOp::Silu => {
            let s = x.sigmoid()?;
            g.mul(&s.mul(&x.mul(&s.neg()?.add_scalar(1.0)?)?.add_scalar(1.0)?)?)
        }
        UnaryOp::Softplus => g.mul(&x.sigmoid()?),
        // Piecewise constant: zero, as PyTorch's (also at the steps).
        UnaryOp::Step | UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc | UnaryOp::Sign => {
            g.zeros_like()
        }
    }
}

fn unreachable_grad(op: &Op) -> Result<Vec<(&Tensor, Tensor)>> {
    let _ = op;
    Err(crate::Error::Backward {
        msg: "internal: binary, matmul and fused gradients are computed by their own functions".into(),
    })
}

/// d/da and d/db of each binary op, times `g`, for the inputs that track gradients;
/// inputs already share the output's shape.
fn binary_grad<'a>(
    op: BinaryOp,
    a: &'a Tensor,
    b: &'a Tensor,
    y: &Tensor,
    g: &Tensor,
) -> Result<Vec<(&'a Tensor, Tensor)>> {
    let (need_a, need_b) = (a.tracks_grad(), b.tracks_grad());
    let (ga, gb) = match op {
        BinaryOp::Add => (need_a.then(|| Ok(g.clone())), need_b.then(|| Ok(g.clone()))),
        BinaryOp::Sub => (need_a.then(|| Ok(g.clone())), need_b.then(|| g.neg())),
        BinaryOp::Mul => (need_a.then(|| g.mul(b)), need_b.then(|| g.mul(a))),
        BinaryOp::Div => (need_a.then(|| g.div(b)), need_b.then(|| g.mul(a)?.div(&b.sqr()?)?.neg())),
        BinaryOp::Pow => {
            // As PyTorch: no gradient to `a` where b == 0 (a^-1 may be NaN or inf there), nor
            // to `b` where a == 0 and b >= 0 (where 0 * log(0) would be NaN).
            let zero = g.zeros_like()?;
            let da = || b.eq_scalar(0.0)?.where_cond(&zero, &g.mul(b)?.mul(&a.pow(&b.add_scalar(-1.0)?)?)?);
            let flat = || a.eq_scalar(0.0)?.mul(&b.ge_scalar(0.0)?);
            let db = || flat()?.where_cond(&zero, &g.mul(y)?.mul(&a.log()?)?);
            (need_a.then(da), need_b.then(db))
        }
        BinaryOp::Maximum | BinaryOp::Minimum => {
            // PyTorch's rule: an operand gets nothing where it loses the comparison, half at
            // a tie, all of `g` otherwise; with a NaN neither loses, so both get `g`.
            let (a_loses, b_loses) = if op == BinaryOp::Maximum { (a.lt(b)?, a.gt(b)?) } else { (a.gt(b)?, a.lt(b)?) };
            let shared = a.eq(b)?.where_cond(&g.mul_scalar(0.5)?, g)?;
            let zero = g.zeros_like()?;
            (need_a.then(|| a_loses.where_cond(&zero, &shared)), need_b.then(|| b_loses.where_cond(&zero, &shared)))
        }
        // Piecewise constant: zero, as PyTorch's (also at the steps).
        BinaryOp::FloorDivide => (need_a.then(|| g.zeros_like()), need_b.then(|| g.zeros_like())),
        // a - b * (a // b): as PyTorch's, g for a and -g * (a // b) for b.
        BinaryOp::Remainder => (need_a.then(|| Ok(g.clone())), need_b.then(|| g.mul(&a.floor_divide(b)?)?.neg())),
    };
    Ok(pair(a, ga.transpose()?, b, gb.transpose()?))
}

fn reduce_grad(op: ReduceOp, x: &Tensor, y: &Tensor, g: &Tensor) -> Result<Tensor> {
    let g = g.broadcast_as(x.shape())?;
    match op {
        ReduceOp::Sum => Ok(g),
        ReduceOp::Max | ReduceOp::Min => {
            // As torch.max(x)'s gradient: shared evenly by the elements equal to the extreme
            // (ties split it, they do not each get all of it); a NaN extreme is the NaN
            // elements' (NaN == NaN is false). Every slice has at least one such element.
            let yb = y.broadcast_as(x.shape())?;
            let both_nan = x.ne(x)?.mul(&yb.ne(&yb)?)?;
            let hit = x.eq(&yb)?.add(&both_nan)?.to_dtype(g.dtype())?;
            let reduced: Vec<usize> = (0..x.rank()).filter(|&d| y.dims()[d] == 1 && x.dims()[d] != 1).collect();
            let count = if reduced.is_empty() { hit.clone() } else { hit.sum_keepdim(reduced)? };
            hit.mul(&g.div(&count)?)
        }
        ReduceOp::ArgMax | ReduceOp::ArgMin => g.zeros_like(),
    }
}

/// Zero-padded gradient of a narrow.
fn narrow_grad(x: &Tensor, dim: usize, start: usize, g: &Tensor) -> Result<Tensor> {
    let total = x.dims()[dim];
    let len = g.dims()[dim];
    let mut parts = Vec::with_capacity(3);
    let zeros = |n: usize| {
        let mut shape = g.dims().to_vec();
        shape[dim] = n;
        Tensor::zeros(shape, g.dtype(), g.device())
    };
    if start > 0 {
        parts.push(zeros(start)?);
    }
    parts.push(g.clone());
    if start + len < total {
        parts.push(zeros(total - start - len)?);
    }
    Tensor::cat(&parts, dim)
}

/// Sums `g` down to `x`'s shape, undoing a broadcast.
fn sum_to_shape(g: &Tensor, x: &Tensor) -> Result<Tensor> {
    let extra = g.rank() - x.rank();
    let mut dims: Vec<usize> = (0..extra).collect();
    dims.extend((0..x.rank()).filter(|&i| x.dims()[i] == 1 && g.dims()[i + extra] != 1).map(|i| i + extra));
    if dims.is_empty() {
        return Ok(g.clone());
    }
    g.sum_keepdim(dims)?.reshape(x.shape())
}
