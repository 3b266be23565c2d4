#!/usr/bin/env python3
"""The llama family in fp64 PyTorch, written from results/TRACE.md alone (the
parameter names and shapes, the model, RoPE's rotate-half convention, the
optimizer; for tiny-mixtral the sparse MLP, its capacity and load-balancing
loss, with docs/strategies/moe-expert-parallel.md): trains a parabench export
for its steps on one device and compares with the export's own trace
(parabench's reference at fp64).

    python scripts/torch/llama.py --export DIR --out trace.safetensors [--export ... --out ...]
                                  [--tol 1e-12] [--expect-drops DIR]

Exit 0 when every step's loss and gradient norm, the step-1 gradients and the
final parameters (a mixture of experts: also every step's tokens per expert
and load-balancing loss) equal parabench's to --tol (absolute), 1 otherwise;
the trace it writes is for `parabench verify`. Exit 2 on an export that is
not the llama family. Several exports train in one process (torch's import
is most of the time).
"""

import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pbtrace  # noqa: E402


def rmsnorm(x, w, eps):
    # x / sqrt(mean(x^2) + norm_eps) * w over the channels
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(u):
    h = u.shape[-1] // 2
    return torch.cat([-u[..., h:], u[..., :h]], dim=-1)


def rope_tables(T, hs, theta):
    """cos, sin (T, hs) of the angles p * inv_freq_i, inv_freq_i = 1 / theta^(2i/hs),
    in fp64, each half repeated (u' = u cos + rotate_half(u) sin)."""
    i = torch.arange(hs // 2, dtype=torch.float64)
    inv_freq = 1.0 / theta ** (2 * i / hs)
    a = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat([a.cos(), a.cos()], -1), torch.cat([a.sin(), a.sin()], -1)


def moe_mlp(P, p, h, moe, counts, auxes, drops):
    """Mixtral's sparse MLP as results/TRACE.md and
    docs/strategies/moe-expert-parallel.md state it, over one capacity scope
    (here the microbatch: one device, so global and local capacity agree).
    Appends the block's (token, choice) counts per expert before capacity to
    `counts`, its load-balancing loss (coefficient included) to `auxes` and
    its dropped choices to `drops`."""
    B, T, C = h.shape
    E, k = moe["experts"], moe["top_k"]
    x = h.reshape(B * T, C)  # the scope's tokens in token order (sequence by sequence)
    N = x.shape[0]
    probs = (x @ P[p + "block_sparse_moe.gate.weight"].T).softmax(-1)  # (N, E), no bias
    # top-k, ties to the lower expert: a stable descending sort keeps equal
    # probabilities in expert order
    chosen = torch.sort(probs.detach(), dim=-1, descending=True, stable=True).indices[:, :k]  # (N, k)
    w = probs.gather(1, chosen)
    w = w / w.sum(-1, keepdim=True)  # the k weights renormalized to sum 1
    # capacity per expert ceil(cf * tokens * k / E), at most the tokens;
    # admission by choice rank first (every token's first choice in token
    # order, then every second choice, ...)
    cap = min(N, math.ceil(moe["capacity_factor"] * N * k / E))
    order = chosen.T.reshape(-1)  # (k*N): choice rank major, token order minor
    onehot = F.one_hot(order, E)
    seen = (onehot.cumsum(0) * onehot).sum(-1)  # 1-based arrival at its expert
    admitted = (seen <= cap).reshape(k, N).T.to(x.dtype)  # (N, k)
    drops.append(int((seen > cap).sum()))
    y = torch.zeros_like(x)
    for e in range(E):
        q = p + f"block_sparse_moe.experts.{e}."
        g = x @ P[q + "w1.weight"].T
        out = (g / (1 + torch.exp(-g)) * (x @ P[q + "w3.weight"].T)) @ P[q + "w2.weight"].T
        # a dropped choice contributes nothing, the others keep their weights
        coef = (w * admitted * (chosen == e).to(x.dtype)).sum(-1, keepdim=True)
        y = y + coef * out
    routed = torch.bincount(order, minlength=E)  # (token, choice) pairs before capacity
    f = routed.to(x.dtype) / (N * k)  # held constant
    counts.append(routed)
    auxes.append(moe["aux_loss_coef"] * E * (f * probs.mean(0)).sum())
    return y.reshape(B, T, C)


def forward(P, tokens, m, moe=None, counts=None, auxes=None, drops=None):
    """Logits; with `moe` (the export's [moe] table, experts > 0) block l's MLP
    is Mixtral's sparse one when l % every == 0."""
    C, NH, KVH, L = m["channels"], m["heads"], m["kv_heads"], m["layers"]
    hs, eps = C // NH, m["norm_eps"]
    B, T = tokens.shape
    cos, sin = rope_tables(T, hs, float(m["rope_theta"]))
    x = P["model.embed_tokens.weight"][tokens]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        p = f"model.layers.{l}."
        h = rmsnorm(x, P[p + "input_layernorm.weight"], eps)
        q = (h @ P[p + "self_attn.q_proj.weight"].T).view(B, T, NH, hs).transpose(1, 2)
        k = (h @ P[p + "self_attn.k_proj.weight"].T).view(B, T, KVH, hs).transpose(1, 2)
        v = (h @ P[p + "self_attn.v_proj.weight"].T).view(B, T, KVH, hs).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(NH // KVH, dim=1)  # query head j uses kv head j // (NH / KVH)
        v = v.repeat_interleave(NH // KVH, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hs)
        att = s.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x = x + att.transpose(1, 2).reshape(B, T, C) @ P[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, P[p + "post_attention_layernorm.weight"], eps)
        if moe and l % moe["every"] == 0:
            x = x + moe_mlp(P, p, h, moe, counts, auxes, drops)
            continue
        g = h @ P[p + "mlp.gate_proj.weight"].T
        u = h @ P[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + torch.exp(-g)) * u) @ P[p + "mlp.down_proj.weight"].T
    return rmsnorm(x, P["model.norm.weight"], eps) @ P["lm_head.weight"].T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--export", required=True, action="append", help="an export directory (repeatable)")
    ap.add_argument("--out", required=True, action="append", help="the trace of the export at the same place")
    ap.add_argument("--tol", type=float, default=1e-12)
    ap.add_argument("--expect-drops", action="append", default=[], metavar="DIR",
                    help="fail unless capacity dropped some choice in export DIR (a test of the capacity rule "
                    "that dropped nothing would compare nothing)")
    args = ap.parse_args()
    if len(args.export) != len(args.out):
        print(f"llama.py: {len(args.export)} --export but {len(args.out)} --out: give one trace per export",
              file=sys.stderr)
        return 2
    for d in args.expect_drops:
        if d not in args.export:
            print(f"llama.py: --expect-drops {d} is not one of the --export directories", file=sys.stderr)
            return 2
    codes = [train(d, o, args.tol, d in args.expect_drops) for d, o in zip(args.export, args.out)]
    return max(codes)


def train(export_dir, out, tol, expect_drops):
    """Trains one export, writes its trace to `out`, compares; 0 equal, 1 not, 2 not an fp64 llama export."""
    print(f"== {export_dir}")
    try:
        ex = pbtrace.Export(export_dir, allow_moe=True)
    except pbtrace.ExportError as e:
        print(f"llama.py: {e}", file=sys.stderr)
        return 2
    m = ex.config["model"]
    if m.get("family") != "llama" or ex.precision != "fp64":
        print(f"llama.py: the export is family {m.get('family', 'gpt2')} at {ex.precision}; "
              "this compares an fp64 llama export", file=sys.stderr)
        return 2
    P = {n: t.to(torch.float64).clone().requires_grad_(True) for n, t in ex.init.items()}
    o = ex.optim
    opt = torch.optim.AdamW(
        [{"params": [p for p in P.values() if p.dim() >= 2], "weight_decay": o["weight_decay"]},
         {"params": [p for p in P.values() if p.dim() < 2], "weight_decay": 0.0}],
        lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"], foreach=False)
    moe = ex.moe if ex.moe.get("experts", 0) else None
    if moe and ex.batch % ex.micro:
        print(f"llama.py: batch {ex.batch} is not a multiple of microbatches {ex.micro}", file=sys.stderr)
        return 2
    losses, norms, lrs, grads1, tokens, aux, drops = [], [], [], None, [], [], []
    for step in range(ex.steps):
        # The step's loss: the mean cross entropy over the batch plus, per MoE
        # block, the load-balancing loss of each capacity scope (a microbatch)
        # weighted by its share of the step's tokens.
        mb = ex.batch // ex.micro if moe else ex.batch
        loss, counts, auxes = 0.0, [], []
        for i in range(0, ex.batch, mb):
            c, a = [], []
            logits = forward(P, ex.inputs[step][i:i + mb], m, moe, c, a, drops)
            part = F.cross_entropy(logits.reshape(-1, ex.V), ex.targets[step][i:i + mb].reshape(-1))
            part = (part + sum(a)) * (mb / ex.batch)
            part.backward()
            loss += float(part.detach())
            counts.append(torch.stack(c) if c else None)
            auxes.append(torch.stack([v.detach() for v in a]) * (mb / ex.batch) if a else None)
        if moe:
            tokens.append(sum(counts).tolist())
            aux.append(sum(auxes).tolist())
        # the norm summed exactly (math.fsum): parabench sums it in order, and
        # verify's fp64 floor holds other orders (results/TRACE.md)
        norm = math.sqrt(math.fsum(torch.cat([p.grad.reshape(-1) for p in P.values()]).pow(2).tolist()))
        if step == 0:
            grads1 = {n: p.grad.detach().clone() for n, p in P.items()}
        factor = 1.0 if o["clip"] <= 0 else min(1.0, o["clip"] / (norm + 1e-6))
        for p in P.values():
            p.grad.mul_(factor)
        lr = ex.lr_at(step + 1)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss)
        norms.append(norm)
        lrs.append(lr)
    params = {n: p.detach().clone() for n, p in P.items()}
    pbtrace.write_trace(out, ex, precision="fp64", framework=f"pytorch-{torch.__version__.split('+')[0]}",
                        strategy="llama-fp64", mesh="dp1", microbatches=ex.micro, losses=losses, grad_norms=norms,
                        lrs=lrs, grads1=grads1, params=params,
                        moe_tokens=tokens if moe else None, moe_aux=aux if moe else None)

    _, ref = pbtrace.read_safetensors(os.path.join(export_dir, "trace.safetensors"))
    worst = {
        "loss": max(abs(a - b) for a, b in zip(losses, ref["loss"].tolist())),
        "grad_norm": max(abs(a - b) for a, b in zip(norms, ref["grad_norm"].tolist())),
        "grads": max(float((grads1[n] - ref["grads." + n]).abs().max()) for n in P),
        "params": max(float((params[n] - ref["params." + n]).abs().max()) for n in P),
    }
    if moe:
        worst["moe_tokens"] = int((torch.tensor(tokens) - ref["moe.tokens_per_expert"]).abs().max())
        worst["aux_loss"] = float((torch.tensor(aux, dtype=torch.float64) - ref["moe.aux_loss"]).abs().max())
    ok = all(v <= tol for v in worst.values())
    for k, v in worst.items():
        print(f"  {k:10s} max |torch - parabench| = {v:.3e} over {ex.steps} steps")
    if moe:
        print(f"  {sum(drops)} (token, choice) pairs dropped by capacity over {ex.steps} steps")
        if expect_drops and not sum(drops):
            print("llama.py: --expect-drops, but capacity dropped nothing (raise the load or lower "
                  "moe.capacity_factor)", file=sys.stderr)
            ok = False
    print(f"llama.py: {'equal' if ok else 'DIFFERENT'} to {tol:g}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
