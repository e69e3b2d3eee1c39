#!/usr/bin/env python3
"""PyTorch twin of `rnn train --model gpt`: the same character-level GPT, started from the
same weights (the init.safetensors that `rnn train --model gpt --save-init` writes), trained on
the same batches with the same optimizer, evaluated on the same validation windows.

- model: token + learned position embeddings, pre-norm blocks (LayerNorm, causal multi-head
  self-attention with packed in_proj, residual; LayerNorm, Linear(4d), GELU tanh, Linear,
  residual), final LayerNorm, head tied to the token embedding. Dropout 0.
- data: the text's sorted characters are the vocabulary (checked against the checkpoint's),
  the first int(0.9 n) ids train, the rest validate; each batch's window starts are
  splitmix64(seed) outputs modulo (len(train) - context), drawn in batch order, as
  rnn_train::data::text::WindowSampler does.
- optimizer: AdamW(lr, betas (0.9, 0.99), eps 1e-8, weight decay 0.1) on every parameter,
  gradient norm clipped to 1.0 (GptTrainConfig::default).
- validation: up to 256 non-overlapping windows from the start of the validation text.

Prints the validation loss at every evaluation point and the mean step time; --json writes
them. Needs only torch and numpy (the safetensors file is parsed here)."""
import argparse
import gzip
import json
import math
import os
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MASK64 = (1 << 64) - 1
DTYPES = {"F32": np.float32, "F64": np.float64}


def read_safetensors(path):
    """(tensors by name, metadata) of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + header_len])
    metadata = header.pop("__metadata__", {})
    body = raw[8 + header_len:]
    tensors = {}
    for name, info in header.items():
        start, end = info["data_offsets"]
        array = np.frombuffer(body[start:end], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
        tensors[name] = torch.from_numpy(array.copy())
    return tensors, metadata


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.attn = nn.Module()
        self.attn.in_proj_weight = nn.Parameter(torch.empty(3 * d, d))
        self.attn.in_proj_bias = nn.Parameter(torch.empty(3 * d))
        self.attn.out_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Module()
        self.mlp.fc = nn.Linear(d, 4 * d)
        self.mlp.proj = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        h = self.ln_1(x)
        q, k, v = F.linear(h, self.attn.in_proj_weight, self.attn.in_proj_bias).split(d, dim=2)
        split = lambda z: z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(split(q), split(k), split(v), is_causal=True)
        x = x + self.attn.out_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp.proj(F.gelu(self.mlp.fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, config):
        super().__init__()
        d = config["d_model"]
        self.tok_emb = nn.Embedding(config["vocab_size"], d)
        self.pos_emb = nn.Embedding(config["context_length"], d)
        self.blocks = nn.ModuleList(Block(d, config["num_heads"]) for _ in range(config["num_layers"]))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, ids):
        x = self.tok_emb(ids) + self.pos_emb(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.tok_emb.weight)  # tied head

    def loss(self, x, y):
        logits = self.forward(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def load_text(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return raw.decode("utf-8")


def windows(ids, starts, context):
    x = torch.stack([ids[s:s + context] for s in starts])
    y = torch.stack([ids[s + 1:s + 1 + context] for s in starts])
    return x, y


def val_loss(model, val, context, batch, max_windows):
    fit = (len(val) - 1) // context
    starts = [i * context for i in range(min(fit, max_windows))]
    total = 0.0
    with torch.no_grad():
        for i in range(0, len(starts), batch):
            chunk = starts[i:i + batch]
            total += float(model.loss(*windows(val, chunk, context))) * len(chunk)
    return total / len(starts)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--init", required=True, help="init.safetensors from rnn train --model gpt --save-init")
    p.add_argument("--data", required=True, help="the text file (raw or .gz) rnn trained on")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--val-windows", type=int, default=256)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    tensors, metadata = read_safetensors(args.init)
    config = json.loads(metadata["rnn.gpt.config"])
    assert config["dropout"] == 0.0, "the twin compares dropout-free runs"
    text = load_text(args.data)
    vocab = "".join(sorted(set(text)))
    assert vocab == metadata["rnn.vocab"], "the text's vocabulary differs from the checkpoint's"
    index = {c: i for i, c in enumerate(vocab)}
    ids = torch.tensor([index[c] for c in text], dtype=torch.long)
    n_train = int(len(ids) * 0.9)
    train, val = ids[:n_train], ids[n_train:]
    context = config["context_length"]

    model = Gpt(config)
    missing = set(model.state_dict()) ^ set(tensors)
    assert not missing, f"parameter names differ: {sorted(missing)}"
    model.load_state_dict(tensors)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
    sampler = SplitMix64(args.seed)
    positions = len(train) - context
    history = {"step": [], "train_loss": [], "val_loss": [], "step_seconds": []}
    loss_sum, since, last = 0.0, time.perf_counter(), 0
    for step in range(1, args.steps + 1):
        starts = [sampler.next() % positions for _ in range(args.batch_size)]
        loss = model.loss(*windows(train, starts, context))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_sum += loss.item()
        if step % args.eval_every == 0 or step == args.steps:
            seconds = (time.perf_counter() - since) / (step - last)
            vl = val_loss(model, val, context, args.batch_size, args.val_windows)
            history["step"].append(step)
            history["train_loss"].append(loss_sum / (step - last))
            history["val_loss"].append(vl)
            history["step_seconds"].append(seconds)
            print(f"step {step:>6}/{args.steps}  train loss {loss_sum / (step - last):.4f}  val loss {vl:.4f}  "
                  f"({seconds * 1e3:.0f} ms/step)", flush=True)
            loss_sum, since, last = 0.0, time.perf_counter(), step
    if args.json:
        with open(args.json, "w") as f:
            json.dump(history, f, indent=2)
    assert math.isfinite(history["val_loss"][-1])


if __name__ == "__main__":
    main()
