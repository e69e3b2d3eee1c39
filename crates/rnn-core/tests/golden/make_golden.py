#!/usr/bin/env python3
"""Generates golden.json: PyTorch reference values for crates/rnn-core/tests/golden.rs.

Run from anywhere:  python3 crates/rnn-core/tests/golden/make_golden.py
Needs torch (any recent version); the Rust test only reads the committed JSON.

Every case is computed in float64 on the CPU. Float inputs and the loss weights `w` are
multiples of 2^-10 (so they are exact in f32, f64 and in decimal, and the f32 run of the Rust
test sees exactly the same inputs); outputs and gradients are written with full precision.

Case format (see README.md):
  name     unique case name
  op       {"op": <name>, ...parameters}; the Rust side matches on "op"
  inputs   [{"dtype": "f"|"i64"|"u32"|"u8", "shape": [..], "data": [..],
             "transpose": [d0, d1] (optional: the op sees input.transpose(d0, d1))}]
  out      {"dtype": "f"|"int", "shape": [..], "data": [..]}
  w        {"shape", "data"}: weights of the loss sum(out * w) (float outputs only)
  grads    per input: {"shape", "data"} of d loss / d input (w.r.t. the stored,
           untransposed input), or null for integer inputs; absent for forward-only cases.
"""

import json
import math
import os
import sys

import torch

SEED = 20240611
STEP = 2.0 ** -10  # grid of every generated float
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden.json")

torch.manual_seed(SEED)
GEN = torch.Generator().manual_seed(SEED)
F64 = torch.float64


def grid(t):
    """Rounds to multiples of STEP (exact in f32 and in decimal)."""
    return torch.round(t / STEP) * STEP


def rand(shape, lo=-1.5, hi=1.5):
    return grid(lo + (hi - lo) * torch.rand(shape, generator=GEN, dtype=F64))


def rand_pos(shape, lo=0.5, hi=2.0):
    return rand(shape, lo, hi)


def rand_away(shape, lo=0.2, hi=1.5):
    """|x| in (lo, hi), random sign: away from kinks at 0 and from dividing by ~0."""
    mag = rand(shape, lo, hi)
    sign = torch.where(torch.rand(shape, generator=GEN) < 0.5, -1.0, 1.0).to(F64)
    return mag * sign


def distinct(shape, lo=-1.5, hi=1.5, gap=0.02):
    """Random values whose pairwise gaps are all >= gap (no ties for max/min/argmax)."""
    n = 1
    for s in shape:
        n *= s
    while True:
        t = rand(shape, lo, hi)
        v = torch.sort(t.flatten()).values
        if n < 2 or (v[1:] - v[:-1]).min() >= gap:
            return t


def rand_ids(shape, n):
    return torch.randint(0, n, shape, generator=GEN)


def number(x):
    """A float for JSON, which has no NaN or infinities: those are the strings "nan", "inf"
    and "-inf"."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def flat_float(t):
    return [number(float(x)) for x in t.detach().contiguous().flatten().tolist()]


def enc_tensor(t):
    return {"shape": list(t.shape), "data": flat_float(t)}


CASES = []
NAMES = set()


def case(name, op, inputs, fn, forward_only=False):
    """inputs: list of (tensor, spec) where spec is {"dtype": ..., optional "transpose"}.

    fn receives the op's view of each input (transposed where asked) and returns the output.
    """
    assert name not in NAMES, f"duplicate case {name}"
    NAMES.add(name)
    leaves, views, enc = [], [], []
    for t, spec in inputs:
        dtype = spec["dtype"]
        if dtype == "f":
            leaf = t.detach().clone().to(F64).requires_grad_(not forward_only)
            e = {"dtype": "f", "shape": list(t.shape), "data": flat_float(t)}
        else:
            leaf = t.detach().clone()
            e = {"dtype": dtype, "shape": list(t.shape), "data": [int(x) for x in t.flatten().tolist()]}
        view = leaf
        if "transpose" in spec:
            d0, d1 = spec["transpose"]
            view = leaf.transpose(d0, d1)
            assert not view.is_contiguous() or view.numel() <= 1, name
            e["transpose"] = [d0, d1]
        leaves.append(leaf)
        views.append(view)
        enc.append(e)
    out = fn(*views)
    c = {"name": name, "op": op, "inputs": enc}
    if out.dtype.is_floating_point:
        c["out"] = {"dtype": "f", **enc_tensor(out)}
    else:
        c["out"] = {"dtype": "int", "shape": list(out.shape), "data": [int(x) for x in out.flatten().tolist()]}
    if not forward_only:
        assert out.dtype.is_floating_point, name
        w = rand(out.shape, -1.0, 1.0)
        (out * w).sum().backward()
        c["w"] = enc_tensor(w)
        grads = []
        for leaf, (t, spec) in zip(leaves, inputs):
            if spec["dtype"] != "f":
                grads.append(None)
            else:
                g = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
                grads.append(enc_tensor(g))
        c["grads"] = grads
    CASES.append(c)


def f(t, **kw):
    return (t, {"dtype": "f", **kw})


def ids(t, dtype="i64"):
    return (t, {"dtype": dtype})


# ---------------------------------------------------------------- unary ops
# name in our op table -> (torch function, input generator)
UNARY = {
    "neg": (torch.neg, rand),
    "abs": (torch.abs, rand_away),
    "exp": (torch.exp, rand),
    "log": (torch.log, rand_pos),
    "sqrt": (torch.sqrt, rand_pos),
    "recip": (torch.reciprocal, rand_away),
    "sqr": (torch.square, rand),
    "sin": (torch.sin, lambda s: rand(s, -3.0, 3.0)),
    "cos": (torch.cos, lambda s: rand(s, -3.0, 3.0)),
    "tanh": (torch.tanh, lambda s: rand(s, -2.5, 2.5)),
    "erf": (torch.erf, lambda s: rand(s, -2.5, 2.5)),
    "sigmoid": (torch.sigmoid, lambda s: rand(s, -4.0, 4.0)),
    "relu": (torch.relu, rand_away),
    "gelu": (lambda x: torch.nn.functional.gelu(x, approximate="tanh"), lambda s: rand(s, -3.0, 3.0)),
    "gelu_erf": (lambda x: torch.nn.functional.gelu(x, approximate="none"), lambda s: rand(s, -3.0, 3.0)),
    "silu": (torch.nn.functional.silu, lambda s: rand(s, -4.0, 4.0)),
    "softplus": (torch.nn.functional.softplus, lambda s: rand(s, -4.0, 4.0)),
}
for name, (fn, gen) in UNARY.items():
    case(f"unary_{name}", {"op": "unary", "fn": name}, [f(gen((3, 4)))], fn)
# Unary ops on a non-contiguous (transposed) input.
case("unary_exp_transposed", {"op": "unary", "fn": "exp"}, [f(rand((4, 3)), transpose=[0, 1])], torch.exp)
case("unary_tanh_transposed_3d", {"op": "unary", "fn": "tanh"}, [f(rand((2, 3, 4)), transpose=[0, 2])], torch.tanh)
case("unary_log_large", {"op": "unary", "fn": "log"}, [f(rand_pos((40,), 0.01, 50.0))], torch.log)
# torch's softplus returns x (and gradient 1) above its threshold (default 20); ours is exact
# there, off by up to e^-20 ~ 2e-9. A threshold above the input range makes torch exact too.
case("unary_softplus_wide", {"op": "unary", "fn": "softplus"}, [f(rand((24,), -30.0, 30.0))],
     lambda x: torch.nn.functional.softplus(x, threshold=40.0))

# ---------------------------------------------------------------- binary ops
BIN_SHAPES = [
    ("same", (3, 4), (3, 4)),
    ("row", (3, 4), (4,)),
    ("col", (3, 1), (1, 4)),
    ("batch", (2, 1, 4), (3, 1)),
]


def maxmin_pair(sa, sb):
    """Operands whose broadcast pairs differ by >= 0.05 (away from the kink of max/min)."""
    while True:
        a, b = rand(sa), rand(sb)
        if (a - b).abs().min() >= 0.05:
            return a, b


BINARY = {
    "add": (torch.add, rand, rand),
    "sub": (torch.sub, rand, rand),
    "mul": (torch.mul, rand, rand),
    "div": (torch.div, rand, rand_away),
    "pow": (torch.pow, rand_pos, lambda s: rand(s, -2.0, 2.0)),
    "maximum": (torch.maximum, None, None),
    "minimum": (torch.minimum, None, None),
}
for name, (fn, ga, gb) in BINARY.items():
    for tag, sa, sb in BIN_SHAPES:
        a, b = maxmin_pair(sa, sb) if ga is None else (ga(sa), gb(sb))
        case(f"binary_{name}_{tag}", {"op": "binary", "fn": name}, [f(a), f(b)], fn)
# Broadcast the other way round and with a transposed operand.
case("binary_sub_row_lhs", {"op": "binary", "fn": "sub"}, [f(rand((4,))), f(rand((3, 4)))], torch.sub)
case("binary_div_col_lhs", {"op": "binary", "fn": "div"}, [f(rand((3, 1))), f(rand_away((3, 4)))], torch.div)
case("binary_mul_transposed", {"op": "binary", "fn": "mul"}, [f(rand((4, 3)), transpose=[0, 1]), f(rand((3, 4)))],
     torch.mul)
case("binary_add_transposed_bcast", {"op": "binary", "fn": "add"},
     [f(rand((4, 2)), transpose=[0, 1]), f(rand((3, 1, 1)))], torch.add)
case("binary_pow_transposed", {"op": "binary", "fn": "pow"},
     [f(rand_pos((4, 3)), transpose=[0, 1]), f(rand((1, 4), -2.0, 2.0))], torch.pow)

# ---------------------------------------------------------------- where / clamp / masked_fill
mask = (torch.rand((3, 4), generator=GEN) < 0.5).to(torch.uint8)
case("where_cond_same", {"op": "where_cond"}, [ids(mask, "u8"), f(rand((3, 4))), f(rand((3, 4)))],
     lambda c, t, e: torch.where(c.bool(), t, e))
mask_col = torch.tensor([[1], [0], [1]], dtype=torch.uint8)
case("where_cond_bcast", {"op": "where_cond"}, [ids(mask_col, "u8"), f(rand((4,))), f(rand((3, 4)))],
     lambda c, t, e: torch.where(c.bool(), t, e))
case("where_cond_bcast_mask", {"op": "where_cond"},
     [ids((torch.rand((2, 1, 4), generator=GEN) < 0.5).to(torch.uint8), "u8"), f(rand((3, 1))), f(rand((1,)))],
     lambda c, t, e: torch.where(c.bool(), t, e))


def away_from(shape, points, gap=0.05):
    while True:
        t = rand(shape, -2.0, 2.0)
        if all((t - p).abs().min() >= gap for p in points):
            return t


case("clamp", {"op": "clamp", "min": -0.5, "max": 0.75}, [f(away_from((3, 4), [-0.5, 0.75]))],
     lambda x: torch.clamp(x, -0.5, 0.75))
case("clamp_transposed", {"op": "clamp", "min": -1.0, "max": 0.25},
     [f(away_from((4, 3), [-1.0, 0.25]), transpose=[0, 1])], lambda x: torch.clamp(x, -1.0, 0.25))
case("masked_fill", {"op": "masked_fill", "value": -2.5},
     [f(rand((3, 4))), ids((torch.rand((3, 4), generator=GEN) < 0.4).to(torch.uint8), "u8")],
     lambda x, m: x.masked_fill(m.bool(), -2.5))
case("masked_fill_bcast", {"op": "masked_fill", "value": 0.125},
     [f(rand((2, 3, 4))), ids(torch.tensor([[1, 0, 0, 1]], dtype=torch.uint8), "u8")],
     lambda x, m: x.masked_fill(m.bool(), 0.125))

# ---------------------------------------------------------------- reductions
RED = {
    "sum": lambda x, d, k: torch.sum(x, d, keepdim=k),
    "mean": lambda x, d, k: torch.mean(x, d, keepdim=k),
    "max": lambda x, d, k: torch.amax(x, d, keepdim=k),
    "min": lambda x, d, k: torch.amin(x, d, keepdim=k),
    "var": lambda x, d, k: torch.var(x, d, unbiased=True, keepdim=k),
}
RED_DIMS = [([1], False), ([0], True), ([-1], True), ([0, 2], False), ([1, 2], True), ([0, 1, 2], False)]


def reduction_cases(name, fn):
    """The reduction over each of RED_DIMS, over a transposed input, and over all dims."""
    for dims, keep in RED_DIMS:
        tag = "_".join(str(d).replace("-", "m") for d in dims) + ("_keep" if keep else "")
        case(f"reduce_{name}_{tag}", {"op": name, "dims": dims, "keepdim": keep}, [f(distinct((2, 3, 4)))],
             lambda x, dims=dims, keep=keep, fn=fn: fn(x, dims, keep))
    case(f"reduce_{name}_transposed", {"op": name, "dims": [1], "keepdim": False},
         [f(distinct((4, 3)), transpose=[0, 1])], lambda x, fn=fn: fn(x, [1], False))
    case(f"reduce_{name}_all", {"op": name + "_all"}, [f(distinct((3, 4)))], lambda x, fn=fn: fn(x, [0, 1], False))


for name, fn in RED.items():
    reduction_cases(name, fn)

for name, fn in (("argmax", torch.argmax), ("argmin", torch.argmin)):
    for dim, keep in ((1, False), (0, True), (-1, False), (2, True)):
        case(f"{name}_{str(dim).replace('-', 'm')}" + ("_keep" if keep else ""),
             {"op": name, "dim": dim, "keepdim": keep}, [f(distinct((2, 3, 4)))],
             lambda x, dim=dim, keep=keep, fn=fn: fn(x, dim, keepdim=keep), forward_only=True)
    case(f"{name}_transposed", {"op": name, "dim": 0, "keepdim": False},
         [f(distinct((4, 3)), transpose=[0, 1])], lambda x, fn=fn: fn(x, 0), forward_only=True)

# ---------------------------------------------------------------- softmax
for name, fn in (("softmax", torch.softmax), ("log_softmax", torch.log_softmax)):
    for dim in (1, 0, -1):
        case(f"{name}_{str(dim).replace('-', 'm')}", {"op": name, "dim": dim}, [f(rand((2, 3, 4), -3.0, 3.0))],
             lambda x, dim=dim, fn=fn: fn(x, dim))
    case(f"{name}_transposed", {"op": name, "dim": 1}, [f(rand((5, 3), -3.0, 3.0), transpose=[0, 1])],
         lambda x, fn=fn: fn(x, 1))
    case(f"{name}_large", {"op": name, "dim": -1}, [f(rand((2, 6), -40.0, 40.0) + 500.0)],
         lambda x, fn=fn: fn(x, -1))

# ---------------------------------------------------------------- matmul
MM = [
    ("2d", (3, 4), {}, (4, 5), {}),
    ("batched", (2, 3, 4), {}, (2, 4, 2), {}),
    ("bcast_batch", (2, 1, 3, 4), {}, (3, 4, 2), {}),
    ("bcast_2d_rhs", (2, 3, 4), {}, (4, 2), {}),
    ("bcast_2d_lhs", (3, 4), {}, (2, 4, 2), {}),
    ("vec_mat", (4,), {}, (4, 3), {}),
    ("mat_vec", (3, 4), {}, (4,), {}),
    ("vec_vec", (5,), {}, (5,), {}),
    ("vec_batched", (4,), {}, (2, 4, 3), {}),
    ("batched_vec", (2, 3, 4), {}, (4,), {}),
    # transpose + matmul: non-contiguous operands
    ("at_b", (4, 3), {"transpose": [0, 1]}, (4, 5), {}),
    ("a_bt", (3, 4), {}, (5, 4), {"transpose": [0, 1]}),
    ("at_bt", (4, 3), {"transpose": [0, 1]}, (5, 4), {"transpose": [0, 1]}),
    ("batched_bt", (2, 3, 4), {}, (2, 5, 4), {"transpose": [1, 2]}),
    ("batched_at_bcast", (2, 4, 3), {"transpose": [1, 2]}, (4, 2), {}),
    ("batch_transposed", (3, 2, 4), {"transpose": [0, 1]}, (2, 1, 4, 2), {}),
]
for tag, sa, ka, sb, kb in MM:
    case(f"matmul_{tag}", {"op": "matmul"}, [f(rand(sa), **ka), f(rand(sb), **kb)], torch.matmul)

# ---------------------------------------------------------------- index ops
case("index_select_0", {"op": "index_select", "dim": 0}, [f(rand((4, 3))), ids(torch.tensor([2, 0, 2, 3, 1]))],
     lambda x, i: torch.index_select(x, 0, i))
case("index_select_1_u32", {"op": "index_select", "dim": 1},
     [f(rand((2, 5, 3))), ids(torch.tensor([4, 4, 1]), "u32")], lambda x, i: torch.index_select(x, 1, i.long()))
case("index_select_m1_transposed", {"op": "index_select", "dim": -1},
     [f(rand((4, 3)), transpose=[0, 1]), ids(torch.tensor([3, 1, 1, 0, 2, 3]))],
     lambda x, i: torch.index_select(x, -1, i))

case("gather_1", {"op": "gather", "dim": 1}, [f(rand((3, 4))), ids(rand_ids((3, 5), 4))],
     lambda x, i: torch.gather(x, 1, i))
case("gather_0_u32", {"op": "gather", "dim": 0}, [f(rand((4, 3))), ids(rand_ids((2, 3), 4), "u32")],
     lambda x, i: torch.gather(x, 0, i.long()))
case("gather_3d_m1", {"op": "gather", "dim": -1}, [f(rand((2, 3, 4))), ids(rand_ids((2, 3, 2), 4))],
     lambda x, i: torch.gather(x, -1, i))
case("gather_transposed", {"op": "gather", "dim": 1}, [f(rand((4, 3)), transpose=[0, 1]), ids(rand_ids((3, 6), 4))],
     lambda x, i: torch.gather(x, 1, i))

case("scatter_add_0", {"op": "scatter_add", "dim": 0},
     [f(rand((4, 3))), ids(rand_ids((5, 3), 4)), f(rand((5, 3)))], lambda x, i, s: torch.scatter_add(x, 0, i, s))
case("scatter_add_1_u32", {"op": "scatter_add", "dim": 1},
     [f(rand((3, 4))), ids(rand_ids((3, 6), 4), "u32"), f(rand((3, 6)))],
     lambda x, i, s: torch.scatter_add(x, 1, i.long(), s))
case("scatter_add_3d_m1", {"op": "scatter_add", "dim": -1},
     [f(rand((2, 3, 4))), ids(rand_ids((2, 3, 3), 4)), f(rand((2, 3, 3)))],
     lambda x, i, s: torch.scatter_add(x, -1, i, s))

# "dtype": the dtype our one_hot is asked for (torch always returns int64; values compared).
for tag, shape, n, dt, out_dt in (("1d", (5,), 4, "i64", "i64"), ("2d_u32", (2, 3), 5, "u32", "u8"),
                                  ("u8", (4,), 3, "u8", "u32")):
    case(f"one_hot_{tag}", {"op": "one_hot", "num_classes": n, "dtype": out_dt}, [ids(rand_ids(shape, n), dt)],
         lambda i, n=n: torch.nn.functional.one_hot(i.long(), n), forward_only=True)

# ---------------------------------------------------------------- movement ops
case("cat_0", {"op": "cat", "dim": 0}, [f(rand((2, 3))), f(rand((1, 3))), f(rand((3, 3)))],
     lambda *xs: torch.cat(xs, 0))
case("cat_1", {"op": "cat", "dim": 1}, [f(rand((2, 3, 2))), f(rand((2, 1, 2)))], lambda *xs: torch.cat(xs, 1))
case("cat_m1_transposed", {"op": "cat", "dim": -1}, [f(rand((2, 3))), f(rand((4, 2)), transpose=[0, 1])],
     lambda *xs: torch.cat(xs, -1))
case("stack_0", {"op": "stack", "dim": 0}, [f(rand((2, 3))), f(rand((2, 3)))], lambda *xs: torch.stack(xs, 0))
case("stack_1", {"op": "stack", "dim": 1}, [f(rand((2, 3))), f(rand((2, 3))), f(rand((2, 3)))],
     lambda *xs: torch.stack(xs, 1))
case("stack_m1_transposed", {"op": "stack", "dim": -1}, [f(rand((3, 2)), transpose=[0, 1]), f(rand((2, 3)))],
     lambda *xs: torch.stack(xs, -1))
case("narrow_1", {"op": "narrow", "dim": 1, "start": 1, "len": 2}, [f(rand((3, 4)))],
     lambda x: torch.narrow(x, 1, 1, 2))
case("narrow_0_3d", {"op": "narrow", "dim": 0, "start": 2, "len": 1}, [f(rand((3, 2, 4)))],
     lambda x: torch.narrow(x, 0, 2, 1))
case("narrow_m1_transposed", {"op": "narrow", "dim": -1, "start": 1, "len": 2}, [f(rand((4, 3)), transpose=[0, 1])],
     lambda x: torch.narrow(x, -1, 1, 2))
case("permute_3d", {"op": "permute", "perm": [2, 0, 1]}, [f(rand((2, 3, 4)))], lambda x: x.permute(2, 0, 1))
case("permute_4d", {"op": "permute", "perm": [1, 3, 0, 2]}, [f(rand((2, 3, 1, 2)))], lambda x: x.permute(1, 3, 0, 2))
case("permute_transposed", {"op": "permute", "perm": [1, 2, 0]}, [f(rand((4, 3, 2)), transpose=[0, 2])],
     lambda x: x.permute(1, 2, 0))
case("transpose_2d", {"op": "transpose", "d0": 0, "d1": 1}, [f(rand((3, 4)))], lambda x: x.transpose(0, 1))
case("reshape_transposed", {"op": "reshape", "shape": [2, 6]}, [f(rand((4, 3)), transpose=[0, 1])],
     lambda x: x.reshape(2, 6))

# ---------------------------------------------------------------- NaN and infinities
# PyTorch's semantics with non-finite inputs: NaN propagates through every op (relu, max,
# maximum, clamp, softmax ...), comparisons with NaN are false (but !=), argmax / argmin
# point at the first NaN. Gradients are checked where torch defines them.
NAN, INF = float("nan"), float("inf")


def special(*rows):
    return torch.tensor(rows, dtype=F64)


UNARY_SPECIAL = special([NAN, INF, -INF, 0.0], [0.5, -1.25, 3.0, -3.0])
for name, (fn, _) in UNARY.items():
    case(f"nonfinite_unary_{name}", {"op": "unary", "fn": name}, [f(UNARY_SPECIAL)], fn)

# Pairs: NaN on either side and both, infinities of both signs, 0 / 0, x / 0, and pow's
# special cases (pow(NaN, 0) = pow(1, NaN) = 1, negative bases with integer exponents).
BIN_A = special([NAN, 1.0, NAN, INF, INF, -INF, 0.0, 1.0, -1.0, INF, 2.0, 0.5])
BIN_B = special([1.0, NAN, NAN, INF, -INF, -INF, 0.0, 0.0, 0.0, 2.0, INF, -INF])
POW_A = special([NAN, 1.0, INF, 0.0, -2.0, -2.0, 0.5, 2.0, -INF, -INF, 0.0, INF])
POW_B = special([0.0, NAN, 0.0, -1.0, 2.0, 0.5, INF, -INF, 3.0, 2.0, 2.0, -0.5])
for name, (fn, _, _) in BINARY.items():
    a, b = (POW_A, POW_B) if name == "pow" else (BIN_A, BIN_B)
    case(f"nonfinite_binary_{name}", {"op": "binary", "fn": name}, [f(a), f(b)], fn)
for name in ("eq", "ne", "lt", "le", "gt", "ge"):
    case(f"nonfinite_cmp_{name}", {"op": "cmp", "fn": name}, [f(BIN_A), f(BIN_B)],
         lambda a, b, name=name: getattr(torch, name)(a, b).to(torch.uint8), forward_only=True)

case("nonfinite_clamp", {"op": "clamp", "min": -0.5, "max": 0.75}, [f(UNARY_SPECIAL)],
     lambda x: torch.clamp(x, -0.5, 0.75))
case("nonfinite_where_cond", {"op": "where_cond"},
     [ids(torch.tensor([[1, 0, 1, 0], [0, 1, 0, 1]], dtype=torch.uint8), "u8"), f(UNARY_SPECIAL),
      f(UNARY_SPECIAL.flip(1))], lambda c, t, e: torch.where(c.bool(), t, e))

# Rows: one NaN; +inf and -inf (their sum is NaN); +inf alone; finite (no ties anywhere but
# between the two NaNs of the argmax case).
RED_SPECIAL = special([1.0, NAN, -0.5, 2.0], [INF, -INF, 0.25, 1.5], [-1.0, INF, 0.75, -2.0])
for name in ("sum", "mean", "var"):
    fn = RED[name]
    case(f"nonfinite_reduce_{name}_1", {"op": name, "dims": [1], "keepdim": False}, [f(RED_SPECIAL)],
         lambda x, fn=fn: fn(x, [1], False))
    case(f"nonfinite_reduce_{name}_0", {"op": name, "dims": [0], "keepdim": True}, [f(RED_SPECIAL)],
         lambda x, fn=fn: fn(x, [0], True))
# max / min: torch.max(x, dim) and torch.max(x), whose gradient goes to the NaN (amax's
# gradient is NaN over the whole slice instead; ours is max's).
for name, fn in (("max", torch.max), ("min", torch.min)):
    case(f"nonfinite_reduce_{name}_1", {"op": name, "dims": [1], "keepdim": False}, [f(RED_SPECIAL)],
         lambda x, fn=fn: fn(x, 1).values)
    case(f"nonfinite_reduce_{name}_0", {"op": name, "dims": [0], "keepdim": True}, [f(RED_SPECIAL)],
         lambda x, fn=fn: fn(x, 0, keepdim=True).values)
    case(f"nonfinite_reduce_{name}_all", {"op": name + "_all"}, [f(RED_SPECIAL)], lambda x, fn=fn: fn(x))
ARG_SPECIAL = special([1.0, NAN, -0.5, NAN], [INF, -INF, 0.25, 1.5], [-1.0, 2.0, 0.75, -INF])
for name, fn in (("argmax", torch.argmax), ("argmin", torch.argmin)):
    for dim in (0, 1):
        case(f"nonfinite_{name}_{dim}", {"op": name, "dim": dim, "keepdim": False}, [f(ARG_SPECIAL)],
             lambda x, dim=dim, fn=fn: fn(x, dim), forward_only=True)

# Rows: a NaN; +inf; -inf (probability 0); all -inf (NaN); two +inf.
SOFTMAX_SPECIAL = special([NAN, 1.0, 2.0, -0.5], [INF, 1.0, 2.0, -0.5], [-INF, 1.0, 2.0, -0.5],
                          [-INF, -INF, -INF, -INF], [INF, INF, 1.0, -0.5], [0.5, -1.0, 2.0, 0.25])
for name, fn in (("softmax", torch.softmax), ("log_softmax", torch.log_softmax)):
    case(f"nonfinite_{name}", {"op": name, "dim": -1}, [f(SOFTMAX_SPECIAL)], lambda x, fn=fn: fn(x, -1))

# A NaN and an infinity times zero (NaN) in products.
MM_A = special([1.0, NAN, 0.5], [INF, 0.0, 1.0], [0.25, -1.0, 2.0])
MM_B = special([0.0, 1.0], [1.0, 0.5], [-1.0, 2.0])
case("nonfinite_matmul", {"op": "matmul"}, [f(MM_A), f(MM_B)], torch.matmul)

# Ties: the gradient of a max / min is shared evenly by the tied elements (amax / amin over
# dims, torch.max(x) over all), not given whole to each.
TIES = torch.tensor([[[3.0, 1.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [0.0, 1.0, 1.0, 0.0]],
                     [[1.0, 3.0, 0.0, 3.0], [0.0, 0.0, 1.0, 1.0], [2.0, 2.0, 1.0, 0.0]]], dtype=torch.float64)
for name in ("max", "min"):
    fn = RED[name]
    for dims, keep in (([2], False), ([0, 2], True)):
        tag = "_".join(map(str, dims)) + ("_keep" if keep else "")
        case(f"ties_reduce_{name}_{tag}", {"op": name, "dims": dims, "keepdim": keep}, [f(TIES)],
             lambda x, dims=dims, keep=keep, fn=fn: fn(x, dims, keep))
    case(f"ties_reduce_{name}_all", {"op": name + "_all"}, [f(TIES)],
         lambda x, name=name: getattr(torch, name)(x))

# ---------------------------------------------------------------- added later
# Drawn after every case above, so those keep their inputs when this file is regenerated.
LATER = {
    "std": lambda x, d, k: torch.std(x, d, keepdim=k),
    "logsumexp": lambda x, d, k: torch.logsumexp(x, d, keepdim=k),
}
for name, fn in LATER.items():
    reduction_cases(name, fn)
    case(f"nonfinite_reduce_{name}_1", {"op": name, "dims": [1], "keepdim": False}, [f(RED_SPECIAL)],
         lambda x, fn=fn: fn(x, [1], False))
    case(f"nonfinite_reduce_{name}_0", {"op": name, "dims": [0], "keepdim": True}, [f(RED_SPECIAL)],
         lambda x, fn=fn: fn(x, [0], True))
# The population variance and deviation (correction=0).
for name in ("var", "std"):
    for dims, keep in (([1], False), ([0, 2], True)):
        tag = "_".join(map(str, dims)) + ("_keep" if keep else "")
        case(f"reduce_{name}_{tag}_correction0", {"op": name, "dims": dims, "keepdim": keep, "correction": 0},
             [f(distinct((2, 3, 4)))],
             lambda x, name=name, dims=dims, keep=keep: getattr(torch, name)(x, dims, correction=0, keepdim=keep))
# Rows with a NaN, +inf, -inf, all -inf (-inf), two +inf (+inf).
case("nonfinite_logsumexp_rows", {"op": "logsumexp", "dims": [-1], "keepdim": False}, [f(SOFTMAX_SPECIAL)],
     lambda x: torch.logsumexp(x, -1))

# Rounding and sign: gradient zero, NaN / infinities / signed zeros kept (sign: 0 at NaN).
ROUNDING = {"floor": torch.floor, "ceil": torch.ceil, "round": torch.round, "trunc": torch.trunc, "sign": torch.sign}
for name, fn in ROUNDING.items():
    case(f"unary_{name}", {"op": "unary", "fn": name}, [f(rand((3, 4), -3.0, 3.0))], fn)
    case(f"nonfinite_unary_{name}", {"op": "unary", "fn": name}, [f(UNARY_SPECIAL)], fn)
# Halves go to the even neighbour.
case("unary_round_halves", {"op": "unary", "fn": "round"}, [f(torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5], dtype=F64))],
     torch.round)

# Python's // and % (floor_divide, remainder): the divisor's sign, exact fmod. Operands whose
# quotients are >= 0.02 from an integer, so f32 inputs round to the same floor. PyTorch has no
# derivative for floor_divide: forward only (ours is zero, as floor's).


def quotient_pair(sa, sb):
    while True:
        a, b = rand(sa, -3.0, 3.0), rand_away(sb)
        q = a / b
        frac = q - torch.floor(q)
        if torch.minimum(frac, 1 - frac).min() >= 0.02:
            return a, b


FLOOR_OPS = {"floor_divide": torch.floor_divide, "remainder": torch.remainder}
for name, fn in FLOOR_OPS.items():
    for tag, sa, sb in BIN_SHAPES:
        a, b = quotient_pair(sa, sb)
        case(f"binary_{name}_{tag}", {"op": "binary", "fn": name}, [f(a), f(b)], fn,
             forward_only=name == "floor_divide")
# Signs, signed zeros, NaN, the infinities (-1 % inf is inf), a zero divisor, exact multiples.
FLOOR_A = torch.tensor([5.0, -5.0, 5.0, -5.0, 0.0, -0.0, NAN, INF, 1.0, -1.0, 7.5, -INF, 3.0, 2.5, -7.5, -4.0],
                       dtype=F64)
FLOOR_B = torch.tensor([3.0, 3.0, -3.0, -3.0, 2.0, 2.0, 1.0, 1.0, INF, INF, 0.0, 2.0, -INF, NAN, 2.0, 2.0],
                       dtype=F64)
for name, fn in FLOOR_OPS.items():
    case(f"nonfinite_binary_{name}", {"op": "binary", "fn": name}, [f(FLOOR_A), f(FLOOR_B)], fn,
         forward_only=name == "floor_divide")

doc = {
    "format": 1,
    "generator": "crates/rnn-core/tests/golden/make_golden.py",
    "torch_version": torch.__version__,
    "python_version": sys.version.split()[0],
    "seed": SEED,
    "cases": CASES,
}
with open(OUT, "w") as fh:
    # One case per line: small diffs when regenerated, and still easy to read.
    fh.write("{\n")
    for k in ("format", "generator", "torch_version", "python_version", "seed"):
        fh.write(f"  {json.dumps(k)}: {json.dumps(doc[k])},\n")
    fh.write('  "cases": [\n')
    fh.write(",\n".join("    " + json.dumps(c, separators=(",", ":")) for c in CASES))
    fh.write("\n  ]\n}\n")
print(f"wrote {len(CASES)} cases, {os.path.getsize(OUT)} bytes, torch {torch.__version__} -> {OUT}")
