#!/usr/bin/env python3
"""Generates sequence.json: PyTorch reference values for crates/rnn-nn/tests/sequence_layers.rs.

Regenerate (from anywhere):  python3 crates/rnn-nn/tests/golden/make_sequence_golden.py
Needs torch (any recent 2.x); the Rust test only reads the committed JSON. Deterministic:
fixed seed, float64, CPU, so a rerun with the same torch version writes the same file.

Every case stores its inputs and parameters (multiples of 2^-10), the outputs, the fixed
random weights `w` of the loss `sum(out * w)` (summed over all outputs) and the gradients of
that loss w.r.t. every float input and parameter.

  recurrent  nn.RNN (tanh, relu) / nn.LSTM / nn.GRU, num_layers=2: "x", optional "h0"/"c0",
             "params" by PyTorch name ("param_names": their order), outputs "output", "h_n" (and "c_n"), "w" per output,
             "grads" by input or parameter name.
  attention  nn.MultiheadAttention(batch_first=True), need_weights=False: "q"/"k"/"v" (or
             "x" for self-attention, the same tensor passed three times), optional
             "attn_mask" / "key_padding_mask" (dtype "u8": 1 = masked, or "f": added).
  losses     torch.nn.functional losses: "pred", "target" (dtype "f", "i64"), "options".

Tensors are {"shape": [...], "data": [...flat row-major...]}, with "dtype" where not float.
"""

import json
import os
import sys

import torch
import torch.nn.functional as F

from golden_json import number

SEED = 20240917
STEP = 2.0 ** -10
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sequence.json")
F64 = torch.float64

torch.manual_seed(SEED)
GEN = torch.Generator().manual_seed(SEED)


def grid(t):
    """Rounds to multiples of STEP: exact in f32, f64 and in decimal."""
    return torch.round(t / STEP) * STEP


def rand(shape, lo=-1.0, hi=1.0):
    return grid(lo + (hi - lo) * torch.rand(shape, generator=GEN, dtype=F64))


def enc(t, dtype=None):
    t = t.detach().contiguous()
    if dtype is None:
        return {"shape": list(t.shape), "data": [number(float(x)) for x in t.flatten().tolist()]}
    return {"dtype": dtype, "shape": list(t.shape), "data": [int(x) for x in t.flatten().tolist()]}


def leaf(t):
    return t.detach().clone().requires_grad_(True)


def weighted_sum(outputs):
    """sum(out * w) over all outputs; returns the loss and the encoded weights."""
    loss, ws = 0.0, {}
    for name, out in outputs.items():
        w = rand(out.shape, 0.5, 1.5)
        loss = loss + (out * w).sum()
        ws[name] = enc(w)
    return loss, ws


# ---------------------------------------------------------------- recurrent layers

RECURRENT = []


def recurrent_case(name, kind, batch_first=True, bias=True, with_state=True):
    batch, steps, features, hidden, layers = 2, 3, 3, 4, 2
    cls = {"rnn_tanh": torch.nn.RNN, "rnn_relu": torch.nn.RNN, "lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[kind]
    extra = {"nonlinearity": "relu" if kind == "rnn_relu" else "tanh"} if kind.startswith("rnn") else {}
    module = cls(features, hidden, num_layers=layers, bias=bias, batch_first=batch_first, **extra).to(F64)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(grid(p))
    x_shape = (batch, steps, features) if batch_first else (steps, batch, features)
    x = leaf(rand(x_shape))
    h0 = leaf(rand((layers, batch, hidden))) if with_state else None
    c0 = leaf(rand((layers, batch, hidden))) if with_state and kind == "lstm" else None
    if kind == "lstm":
        output, (h_n, c_n) = module(x, (h0, c0)) if with_state else module(x)
        outputs = {"output": output, "h_n": h_n, "c_n": c_n}
    else:
        output, h_n = module(x, h0) if with_state else module(x)
        outputs = {"output": output, "h_n": h_n}
    loss, ws = weighted_sum(outputs)
    loss.backward()
    inputs = {"x": x, "h0": h0, "c0": c0}
    inputs = {k: v for k, v in inputs.items() if v is not None}
    grads = {k: enc(v.grad) for k, v in inputs.items()}
    grads.update({k: enc(p.grad) for k, p in module.named_parameters()})
    RECURRENT.append({
        "name": name, "kind": kind, "batch_first": batch_first, "input_size": features,
        "hidden_size": hidden, "num_layers": layers,
        "inputs": {k: enc(v) for k, v in inputs.items()},
        "param_names": [k for k, _ in module.named_parameters()],
        "params": {k: enc(p) for k, p in module.named_parameters()},
        "outputs": {k: enc(v) for k, v in outputs.items()},
        "w": ws, "grads": grads,
    })


recurrent_case("rnn_tanh", "rnn_tanh")
recurrent_case("rnn_relu", "rnn_relu")
recurrent_case("lstm", "lstm")
recurrent_case("gru", "gru")
recurrent_case("lstm_zero_state_time_major", "lstm", batch_first=False, with_state=False)
recurrent_case("gru_no_bias_zero_state", "gru", bias=False, with_state=False)
recurrent_case("rnn_tanh_time_major", "rnn_tanh", batch_first=False)

# ---------------------------------------------------------------- multi-head attention

ATTENTION = []


def causal(n):
    return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)


def attention_case(name, len_q, len_k, self_attention=False, bias=True, attn_mask=None, padding=None):
    batch, embed, heads = 2, 4, 2
    module = torch.nn.MultiheadAttention(embed, heads, bias=bias, batch_first=True).to(F64)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(rand(p.shape, -0.8, 0.8))
    if self_attention:
        x = leaf(rand((batch, len_q, embed)))
        inputs = {"x": x}
        q = k = v = x
    else:
        inputs = {n: leaf(rand((batch, ln, embed))) for n, ln in (("q", len_q), ("k", len_k), ("v", len_k))}
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
    out, _ = module(q, k, v, attn_mask=attn_mask, key_padding_mask=padding, need_weights=False)
    loss, ws = weighted_sum({"out": out})
    loss.backward()
    case = {
        "name": name, "embed_dim": embed, "num_heads": heads, "bias": bias,
        "inputs": {n: enc(t) for n, t in inputs.items()},
        "param_names": [n for n, _ in module.named_parameters()],
        "params": {n: enc(p) for n, p in module.named_parameters()},
        "out": enc(out), "w": ws["out"],
        "grads": {**{n: enc(t.grad) for n, t in inputs.items()},
                  **{n: enc(p.grad) for n, p in module.named_parameters()}},
    }
    for key, mask in (("attn_mask", attn_mask), ("key_padding_mask", padding)):
        if mask is not None:
            case[key] = enc(mask.to(torch.uint8), "u8") if mask.dtype == torch.bool else enc(mask)
    ATTENTION.append(case)


padding_last = torch.tensor([[False, False, False, False], [False, False, True, True]])
attention_case("self_no_mask", 3, 3, self_attention=True)
attention_case("self_causal_padding", 4, 4, self_attention=True, attn_mask=causal(4), padding=padding_last)
attention_case("cross_float_masks", 3, 4, attn_mask=rand((3, 4), -2.0, 0.0), padding=rand((2, 4), -1.0, 0.0))
mask_3d = torch.rand((4, 3, 4), generator=GEN) < 0.3
mask_3d[:, :, 0] = False  # every query keeps key 0
attention_case("cross_bool_mask_per_head", 3, 4, attn_mask=mask_3d)
attention_case("cross_no_bias_padding", 2, 4, bias=False, padding=padding_last)

# ---------------------------------------------------------------- losses

LOSSES = []


def loss_case(name, loss, fn, pred, target, options=None, target_dtype=None):
    p = leaf(pred)
    out = fn(p, target)
    total, ws = weighted_sum({"out": out})
    total.backward()
    LOSSES.append({
        "name": name, "loss": loss, "options": options or {},
        "pred": enc(pred), "target": enc(target, target_dtype),
        "out": enc(out), "w": ws["out"], "grad": enc(p.grad),
    })


def soft_targets(shape):
    return grid(torch.softmax(rand(shape, -2.0, 2.0), dim=1))


def ce(smoothing=0.0, reduction="mean", ignore=None):
    kw = {"label_smoothing": smoothing, "reduction": reduction}
    if ignore is not None:
        kw["ignore_index"] = ignore
    return lambda p, t: F.cross_entropy(p, t, **kw), {**kw, "ignore_index": ignore}


ids45 = torch.randint(0, 5, (4,), generator=GEN)
for name, (fn, opts) in {
    "ce": ce(),
    "ce_smoothing": ce(0.1),
    "ce_smoothing_sum": ce(0.25, "sum"),
    "ce_none": ce(0.0, "none"),
}.items():
    loss_case(name, "cross_entropy", fn, rand((4, 5), -2.0, 2.0), ids45, opts, "i64")
ignored = torch.tensor([1, -100, 4, 0])
fn, opts = ce(0.2, ignore=-100)
loss_case("ce_ignore_smoothing", "cross_entropy", fn, rand((4, 5), -2.0, 2.0), ignored, opts, "i64")
fn, opts = ce(0.1)
loss_case("ce_probs_smoothing", "cross_entropy", fn, rand((4, 5), -2.0, 2.0), soft_targets((4, 5)), opts)
plain_fn, plain_opts = ce()
loss_case("ce_probs", "cross_entropy", plain_fn, rand((3, 4), -2.0, 2.0), soft_targets((3, 4)), plain_opts)
loss_case("ce_kdim_smoothing", "cross_entropy", fn, rand((2, 3, 4), -2.0, 2.0),
          torch.randint(0, 3, (2, 4), generator=GEN), opts, "i64")
loss_case("ce_unbatched", "cross_entropy", fn, rand((5,), -2.0, 2.0), torch.tensor(3), opts, "i64")

nll = {"reduction": "mean", "ignore_index": None}
loss_case("nll", "nll", lambda p, t: F.nll_loss(p, t), torch.log_softmax(rand((4, 5), -2.0, 2.0), 1),
          ids45, nll, "i64")
loss_case("nll_ignore_sum", "nll", lambda p, t: F.nll_loss(p, t, ignore_index=-100, reduction="sum"),
          rand((4, 5), -3.0, 0.0), ignored, {"reduction": "sum", "ignore_index": -100}, "i64")

mean = {"reduction": "mean"}
loss_case("bce", "bce", F.binary_cross_entropy, rand((3, 4), 0.05, 0.95), rand((3, 4), 0.0, 1.0), mean)
loss_case("bce_sum", "bce", lambda p, t: F.binary_cross_entropy(p, t, reduction="sum"),
          rand((5,), 0.05, 0.95), grid(torch.rand(5, generator=GEN).round().to(F64)), {"reduction": "sum"})
logits = torch.cat([rand((6,), -3.0, 3.0), torch.tensor([0.0, 30.0, -30.0], dtype=F64)])
loss_case("bce_with_logits", "bce_with_logits", F.binary_cross_entropy_with_logits, logits,
          rand((9,), 0.0, 1.0), mean)
loss_case("bce_with_logits_none", "bce_with_logits",
          lambda p, t: F.binary_cross_entropy_with_logits(p, t, reduction="none"),
          rand((2, 3), -3.0, 3.0), rand((2, 3), 0.0, 1.0), {"reduction": "none"})


def spread(n, lo, hi, avoid):
    """Prediction - target differences in [lo, hi] that stay 0.05 away from each of `avoid`."""
    while True:
        d = rand((n,), lo, hi)
        if all((d.abs() - a).abs().min() > 0.05 for a in avoid):
            return d


target = rand((8,), -1.0, 1.0)
for delta in (1.0, 0.5):
    loss_case(f"huber_{delta}", "huber", lambda p, t, d=delta: F.huber_loss(p, t, delta=d),
              target + spread(8, -2.0, 2.0, [0.0, delta]), target, {"reduction": "mean", "delta": delta})
loss_case("mse", "mse", F.mse_loss, rand((3, 4)), rand((3, 4)), mean)
loss_case("mse_sum", "mse", lambda p, t: F.mse_loss(p, t, reduction="sum"), rand((5,)), rand((5,)),
          {"reduction": "sum"})
loss_case("l1", "l1", F.l1_loss, target + spread(8, -2.0, 2.0, [0.0]), target, mean)

# NaN and infinities propagate as in PyTorch, element by element (reduction "none") and
# through the mean. BCE on probabilities is left out: PyTorch rejects a NaN probability, as
# ours does.
NAN, INF = float("nan"), float("inf")
none = {"reduction": "none"}
pred_special = torch.tensor([NAN, INF, -INF, 0.5, 1.0, -1.0, 0.25], dtype=F64)
target_special = torch.tensor([0.5, 0.0, 0.0, NAN, INF, 0.5, -INF], dtype=F64)
for name, fn in (("mse", F.mse_loss), ("l1", F.l1_loss), ("huber", F.huber_loss)):
    opts = {"reduction": "none", "delta": 1.0} if name == "huber" else none
    loss_case(f"{name}_nonfinite", name, lambda p, t, fn=fn: fn(p, t, reduction="none"), pred_special,
              target_special, opts)
loss_case("mse_nonfinite_mean", "mse", F.mse_loss, pred_special, target_special.nan_to_num(0.0, 1.0, -1.0), mean)
loss_case("bce_with_logits_nonfinite", "bce_with_logits",
          lambda p, t: F.binary_cross_entropy_with_logits(p, t, reduction="none"), pred_special,
          torch.tensor([1.0, 1.0, 0.0, 0.5, 0.0, 1.0, 0.25], dtype=F64), none)
# Rows: a NaN logit; +inf on the target (inf - inf: NaN); +inf on another class; -inf on
# another class (probability 0, finite loss); finite.
ce_special = torch.tensor([[NAN, 1.0, 0.5], [INF, 1.0, 0.5], [0.5, INF, 1.0], [1.0, -INF, 0.5],
                           [0.25, -0.5, 1.0]], dtype=F64)
ce_ids = torch.tensor([1, 0, 0, 2, 1])
for smoothing in (0.0, 0.1):
    fn, opts = ce(smoothing, "none")
    loss_case(f"ce_nonfinite_{smoothing}", "cross_entropy", fn, ce_special, ce_ids, opts, "i64")
loss_case("nll_nonfinite", "nll", lambda p, t: F.nll_loss(p, t, reduction="none"), ce_special, ce_ids,
          {"reduction": "none", "ignore_index": None}, "i64")

# ---------------------------------------------------------------- output

doc = {
    "format": 1,
    "generator": "crates/rnn-nn/tests/golden/make_sequence_golden.py",
    "torch_version": torch.__version__,
    "python_version": sys.version.split()[0],
    "seed": SEED,
}
with open(OUT, "w") as fh:
    fh.write("{\n")
    for key, value in doc.items():
        fh.write(f"  {json.dumps(key)}: {json.dumps(value)},\n")
    sections = [("recurrent", RECURRENT), ("attention", ATTENTION), ("losses", LOSSES)]
    for i, (key, cases) in enumerate(sections):
        fh.write(f"  {json.dumps(key)}: [\n")
        fh.write(",\n".join("    " + json.dumps(c, separators=(",", ":")) for c in cases))
        fh.write("\n  ]" + ("," if i + 1 < len(sections) else "") + "\n")
    fh.write("}\n")
total = len(RECURRENT) + len(ATTENTION) + len(LOSSES)
print(f"wrote {total} cases, {os.path.getsize(OUT)} bytes, torch {torch.__version__} -> {OUT}")
