#!/usr/bin/env python3
"""The PyTorch adapter: trains parabench's canonical model from an export with
PyTorch's own parallel strategies on CPU (gloo) and writes a parabench trace
(results/TRACE.md) for `parabench verify`.

    python scripts/torch/train.py --export DIR --strategy ddp --world 2 \\
        --precision fp32 --out trace.safetensors

Strategies: ddp; fsdp2 (fully_shard, full sharding); hsdp (fully_shard on a
2-D mesh: replicate x shard); pp-gpipe, pp-1f1b, pp-interleaved
(torch.distributed.pipelining, stages built by hand, the tied embedding's
gradient summed between the first and last stage); tp (DTensor
parallelize_module: q, k, v and c_fc column-wise, the projections row-wise).
The llama family (an export of model.name=tiny-llama; Hugging Face's Llama
parameter names) trains with ddp, fsdp2 and tp (q, k, v, gate and up
column-wise, o and down row-wise; k and v split by kv heads, so tp must
divide kv_heads: a tp above kv_heads is refused, not replicated); the other
strategies refuse it by name (exit 2).
Faults (a trace that must fail verify): no-divide (DDP's gradients summed,
not averaged over the world), skip-allreduce (DDP's gradient all-reduce
skipped: each replica steps on its own half), microbatch-order (the last
stage pairs microbatch k's outputs with another microbatch's targets).
"""

import argparse
import math
import os
import resource
import struct
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pbtrace  # noqa: E402

STRATEGIES = ["ddp", "fsdp2", "hsdp", "pp-gpipe", "pp-1f1b", "pp-interleaved", "tp"]
FAULTS = ["none", "no-divide", "skip-allreduce", "microbatch-order"]
FAULT_STRATEGIES = {"no-divide": "ddp", "skip-allreduce": "ddp", "microbatch-order": "pp"}


# ---------------------------------------------------------------- the model
# parabench's canonical GPT (reference/gpt.h): learned positions, pre-LN
# blocks (eps 1e-5), causal attention with q, k, v packed in c_attn (q first;
# heads contiguous), tanh-approximate GELU, final LN, the LM head tied to
# wte, mean cross entropy over the batch's tokens.


class Attention(nn.Module):
    def __init__(self, C, NH, split_qkv=False):
        super().__init__()
        self.C, self.NH, self.split_qkv = C, NH, split_qkv
        if split_qkv:  # tensor parallel: q, k and v split column-wise apart
            self.q, self.k, self.v = nn.Linear(C, C), nn.Linear(C, C), nn.Linear(C, C)
        else:
            self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)

    def forward(self, x):
        B, T, _ = x.shape
        if self.split_qkv:
            q, k, v = self.q(x), self.k(x), self.v(x)
        else:
            q, k, v = self.c_attn(x).split(self.C, dim=2)
        local = q.shape[-1]  # C, or C / tp under tensor parallel
        heads = self.NH * local // self.C
        hs = self.C // self.NH
        q, k, v = (t.view(B, T, heads, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf"))
        att = F.softmax(att.float(), dim=-1).to(q.dtype)
        y = (att @ v).transpose(1, 2).reshape(B, T, local)
        return self.c_proj(y)


class Mlp(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, NH, split_qkv=False):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = Attention(C, NH, split_qkv)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = Mlp(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Stage(nn.Module):
    """Layers [lo, hi) of the model; the first stage embeds, the last has the
    head (its own copy of wte when it is not also the first). The whole model
    is Stage(0, L, first=True, last=True). Parameter names are the export's."""

    def __init__(self, ex, lo, hi, first, last, split_qkv=False):
        super().__init__()
        self.first, self.last = first, last
        if first or last:
            self.wte = nn.Parameter(torch.empty(ex.V, ex.C))
        if first:
            self.wpe = nn.Parameter(torch.empty(ex.init["wpe"].shape[0], ex.C))
        self.h = nn.ModuleDict({str(i): Block(ex.C, ex.NH, split_qkv) for i in range(lo, hi)})
        if last:
            self.ln_f = nn.LayerNorm(ex.C, eps=1e-5)

    def blocks(self):
        return list(self.h.values())

    def forward(self, x):
        if self.first:
            T = x.shape[1]
            x = F.embedding(x, self.wte) + self.wpe[:T]
        for blk in self.h.values():
            x = blk(x)
        if self.last:
            x = F.linear(self.ln_f(x), self.wte)
        return x


# ------------------------------------------------------ the llama family
# tiny-llama as results/TRACE.md states it (scripts/torch/llama.py is the
# fp64 single-process version): RMSNorm, grouped-query attention with RoPE
# in Hugging Face's rotate-half layout, SwiGLU MLP, untied head, no biases.
# Module paths are Hugging Face's Llama names, so named_parameters() are the
# export's names.

LLAMA_STRATEGIES = ["ddp", "fsdp2", "tp"]


def is_llama(ex):
    return ex.config["model"].get("family") == "llama"


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(C)), eps

    def forward(self, x):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(u):
    h = u.shape[-1] // 2
    return torch.cat([-u[..., h:], u[..., :h]], dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, C, NH, KVH, theta):
        super().__init__()
        self.hs, self.group, self.theta = C // NH, NH // KVH, theta
        self.q_proj = nn.Linear(C, C, bias=False)
        self.k_proj = nn.Linear(C, KVH * self.hs, bias=False)
        self.v_proj = nn.Linear(C, KVH * self.hs, bias=False)
        self.o_proj = nn.Linear(C, C, bias=False)

    def forward(self, x):
        B, T, _ = x.shape
        hs = self.hs
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        local = q.shape[-1]  # C, or C / tp under tensor parallel (heads, kv heads split alike)
        q = q.view(B, T, -1, hs).transpose(1, 2)
        k = k.view(B, T, -1, hs).transpose(1, 2)
        v = v.view(B, T, -1, hs).transpose(1, 2)
        # angles p * theta^(-2i/hs) at each token's position, in fp64, each half repeated
        i = torch.arange(hs // 2, dtype=torch.float64)
        a = torch.arange(T, dtype=torch.float64)[:, None] * (1.0 / self.theta ** (2 * i / hs))[None, :]
        cos = torch.cat([a.cos(), a.cos()], -1).to(q.dtype)
        sin = torch.cat([a.sin(), a.sin()], -1).to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(self.group, dim=1)  # query head j uses kv head j // (heads / kv_heads)
        v = v.repeat_interleave(self.group, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf"))
        att = F.softmax(att.float(), dim=-1).to(q.dtype)
        y = (att @ v).transpose(1, 2).reshape(B, T, local)
        return self.o_proj(y)


class LlamaMlp(nn.Module):
    def __init__(self, C, ffn):
        super().__init__()
        self.gate_proj = nn.Linear(C, ffn, bias=False)
        self.up_proj = nn.Linear(C, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self, m):
        super().__init__()
        C, eps = m["channels"], m["norm_eps"]
        self.input_layernorm = RMSNorm(C, eps)
        self.self_attn = LlamaAttention(C, m["heads"], m["kv_heads"], float(m["rope_theta"]))
        self.post_attention_layernorm = RMSNorm(C, eps)
        self.mlp = LlamaMlp(C, m["ffn"])

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBody(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.embed_tokens = nn.Embedding(m["vocab"], m["channels"])
        self.layers = nn.ModuleList(LlamaLayer(m) for _ in range(m["layers"]))
        self.norm = RMSNorm(m["channels"], m["norm_eps"])


class Llama(nn.Module):
    """The whole model; `blocks()` as Stage's, for fully_shard and the TP plan."""

    def __init__(self, ex):
        super().__init__()
        m = ex.config["model"]
        self.model = LlamaBody(m)
        self.lm_head = nn.Linear(m["channels"], m["vocab"], bias=False)

    def blocks(self):
        return list(self.model.layers)

    def forward(self, x):
        x = self.model.embed_tokens(x)
        for layer in self.model.layers:
            x = layer(x)
        return self.lm_head(self.model.norm(x))


def whole_model(ex, split_qkv=False):
    """The export's model on one rank: Llama for the llama family, else GPT-2's Stage."""
    return Llama(ex) if is_llama(ex) else Stage(ex, 0, ex.L, True, True, split_qkv)


def load_init(stage, ex, dtype):
    """Copies the export's init into the stage (q, k, v from c_attn's thirds)."""
    C = ex.C
    with torch.no_grad():
        for name, p in stage.named_parameters():
            if ".attn.q." in name or ".attn.k." in name or ".attn.v." in name:
                part = "qkv".index(name.split(".attn.")[1][0])
                src = ex.init[name.replace(f".attn.{'qkv'[part]}.", ".attn.c_attn.")]
                p.copy_(src[part * C : (part + 1) * C].to(dtype))
            else:
                p.copy_(ex.init[name].to(dtype))


def full_tensors(named):
    """{export name: full tensor} from (name, tensor or DTensor) pairs, q, k, v
    packed back into c_attn."""
    out, qkv = {}, {}
    for name, t in named:
        if hasattr(t, "full_tensor"):
            t = t.full_tensor()
        t = t.detach().clone()
        for part in "qkv":
            tag = f".attn.{part}."
            if tag in name:
                qkv.setdefault(name.replace(tag, ".attn.c_attn."), {})[part] = t
                break
        else:
            out[name] = t
    for name, parts in qkv.items():
        out[name] = torch.cat([parts["q"], parts["k"], parts["v"]], dim=0)
    return out


# ------------------------------------------------------------ the optimizer
# AdamW as parabench's (kernels/cpu/adamw.cc is PyTorch's formula): decoupled
# weight decay on matrices only; global-norm clipping min(1, clip / (norm +
# 1e-6)) as clip_grad_norm_; the lr of parabench's schedule at every step.


def make_adamw(named_params, ex):
    o = ex.optim
    decay = [p for n, p in named_params if p.dim() >= 2]
    keep = [p for n, p in named_params if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": o["weight_decay"]}, {"params": keep, "weight_decay": 0.0}],
        lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"], foreach=False)


def set_lr(opt, lr):
    for g in opt.param_groups:
        g["lr"] = lr


def clip_factor(norm, clip):
    return 1.0 if clip <= 0 else min(1.0, clip / (norm + 1e-6))


def to_masters(named, opt_named):
    """bf16-mixed: the fp32 masters take the bf16 module's (reduced) gradients."""
    for (_, p), (_, q) in zip(named, opt_named):
        q.grad = p.grad.float()


def apply_step(opt, named, opt_named, factor, lr, bf16):
    """Clip by `factor`, step at `lr`, and (bf16-mixed) copy the fp32 masters
    back into the bf16 module."""
    for _, q in opt_named:
        q.grad.mul_(factor)
    set_lr(opt, lr)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if bf16:
        with torch.no_grad():
            for (_, p), (_, q) in zip(named, opt_named):
                p.copy_(q.to(torch.bfloat16))


# ------------------------------------------------------------------- ranks


def batch_of(ex, step, lo, hi):
    return ex.inputs[step, lo:hi], ex.targets[step, lo:hi]


def loss_fn(logits, targets):
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


class Recorder:
    """What rank 0 writes: per-step loss, norm and lr; step-1 gradients; final
    parameters (full tensors, export names)."""

    def __init__(self):
        self.losses, self.norms, self.lrs = [], [], []
        self.grads1, self.params = None, None


def train_replicated(ex, args, rank, world):
    """ddp, fsdp2, hsdp: every rank holds the whole model (or shards of it)
    and trains on its 1/dp of every batch."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    bf16 = args.precision == "bf16-mixed"
    model = whole_model(ex)
    load_init(model, ex, torch.float32)
    micro = ex.micro
    master = None
    if args.strategy == "ddp":
        if bf16:  # bf16 compute copy; an fp32 master the optimizer steps
            master = [p.detach().clone() for p in model.parameters()]
            model = model.to(torch.bfloat16)
        wrapped = DDP(model)
        if args.fault == "no-divide":
            def allreduce_sum(_, bucket):  # the bug: summed, never divided by the world
                fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
                return fut.then(lambda f: f.value()[0])
            wrapped.register_comm_hook(None, allreduce_sum)
        dp = world
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        if args.strategy == "hsdp":
            mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("replicate", "shard"))
        else:
            mesh = init_device_mesh("cpu", (world,))
        mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16) if bf16 else \
            MixedPrecisionPolicy()
        for blk in model.blocks():
            fully_shard(blk, mesh=mesh, mp_policy=mp_policy)
        fully_shard(model, mesh=mesh, mp_policy=mp_policy)
        wrapped = model
        dp = world
    named = list(model.named_parameters())
    opt_params = list(zip([n for n, _ in named], master)) if master else named
    opt = make_adamw(opt_params, ex)
    per = ex.batch // dp
    mb = per // micro
    rec = Recorder()
    for step in range(ex.steps):
        lr = ex.lr_at(step + 1)
        loss_sum = torch.zeros((), dtype=torch.float64)
        for k in range(micro):
            x, y = batch_of(ex, step, rank * per + k * mb, rank * per + (k + 1) * mb)
            sync = k == micro - 1 and args.fault != "skip-allreduce"
            if args.strategy == "ddp" and not sync:
                with wrapped.no_sync():
                    loss = loss_fn(wrapped(x), y) / micro
                    loss.backward()
            else:
                if args.strategy != "ddp":
                    wrapped.set_requires_gradient_sync(k == micro - 1)
                loss = loss_fn(wrapped(x), y) / micro
                loss.backward()
            loss_sum += loss.detach().double()
        dist.all_reduce(loss_sum)
        mean_loss = loss_sum.item() / dp
        if master:  # fp32 gradients on the master, from the bf16 ones
            for p, m in zip(model.parameters(), master):
                m.grad = p.grad.float()
        targets = master if master else [p for _, p in named]
        if step == 0:  # reduced, before clipping
            grads = full_tensors((n, t.grad) for (n, _), t in zip(named, targets))
        norm = torch.nn.utils.clip_grad_norm_(targets, ex.optim["clip"] if ex.optim["clip"] > 0 else float("inf"))
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        set_lr(opt, lr)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if master:
            with torch.no_grad():
                for p, m in zip(model.parameters(), master):
                    p.copy_(m.to(torch.bfloat16))
            model.zero_grad(set_to_none=True)
        if step == 0:
            rec.grads1 = grads
        rec.losses.append(mean_loss)
        rec.norms.append(float(norm))
        rec.lrs.append(lr)
    rec.params = full_tensors(model.named_parameters())
    return rec, f"dp{world}", micro


def stage_layers(ex, stages):
    n = ex.L // stages  # shape_problem checked that stages divide L
    return [(s * n, (s + 1) * n) for s in range(stages)]


def train_pipeline(ex, args, rank, world):
    """pp-gpipe, pp-1f1b, pp-interleaved: torch.distributed.pipelining with
    stages built by hand (one per rank; two per rank, looped, interleaved)."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    bf16 = args.precision == "bf16-mixed"
    interleaved = args.strategy == "pp-interleaved"
    per_rank = 2 if interleaved else 1
    nstages = world * per_rank
    layers = stage_layers(ex, nstages)
    mine = [rank + v * world for v in range(per_rank)]  # looped placement (Narayanan et al. 2021)
    micro = args.microbatches or max(ex.micro, world)
    mods, stages = [], []
    for s in mine:
        lo, hi = layers[s]
        m = Stage(ex, lo, hi, s == 0, s == nstages - 1)
        load_init(m, ex, torch.float32)
        mods.append(m)
    masters = [[p.detach().clone() for p in m.parameters()] for m in mods] if bf16 else None
    if bf16:
        mods = [m.to(torch.bfloat16) for m in mods]
    for s, m in zip(mine, mods):
        stages.append(PipelineStage(m, s, nstages, torch.device("cpu")))
    mb = ex.batch // micro

    def pp_loss(out, tgt):
        return loss_fn(out, tgt)

    cls = {"pp-gpipe": ScheduleGPipe, "pp-1f1b": Schedule1F1B, "pp-interleaved": ScheduleInterleaved1F1B}[args.strategy]
    sched = cls(stages if interleaved else stages[0], n_microbatches=micro, loss_fn=pp_loss)
    named = [(n, p) for m in mods for n, p in m.named_parameters()]
    opt_named = [(n, q) for (n, _), q in zip(named, [q for ms in masters for q in ms])] if bf16 else named
    opt = make_adamw(opt_named, ex)
    first_rank, last_rank = 0, (nstages - 1) % world
    tied = dist.new_group([first_rank, last_rank]) if first_rank != last_rank else None
    rec = Recorder()
    for step in range(ex.steps):
        lr = ex.lr_at(step + 1)
        x, y = ex.inputs[step], ex.targets[step]
        if args.fault == "microbatch-order":  # the bug: targets a microbatch behind
            y = torch.cat([y[mb:], y[:mb]])
        losses = []
        kwargs = {}
        if rank == last_rank:
            kwargs = {"target": y, "losses": losses}
        if rank == 0:
            sched.step(x, **kwargs)
        else:
            sched.step(**kwargs)
        # The tied embedding: wte's gradient is the sum of the embedding's
        # (first stage) and the head's (last stage).
        wtes = [m.wte for m in mods if hasattr(m, "wte")]
        if tied is not None and rank in (first_rank, last_rank):
            g = wtes[0].grad.float()
            dist.all_reduce(g, group=tied)
            for w in wtes:
                w.grad.copy_(g.to(w.grad.dtype))
        loss = torch.tensor(sum(float(l) for l in losses) / micro if losses else 0.0, dtype=torch.float64)
        dist.broadcast(loss, src=last_rank)
        # The global norm: every parameter once (wte on the first stage's rank).
        sq = torch.zeros((), dtype=torch.float64)
        for m in mods:
            for n, p in m.named_parameters():
                if n == "wte" and not m.first:
                    continue
                sq += p.grad.double().pow(2).sum()
        dist.all_reduce(sq)
        norm = math.sqrt(sq.item())
        factor = clip_factor(norm, ex.optim["clip"])
        if bf16:
            to_masters(named, opt_named)
        if step == 0:
            rec.grads1 = gather_named(((n, p.grad) for n, p in named), rank)
        apply_step(opt, named, opt_named, factor, lr, bf16)
        for m in mods:
            m.zero_grad(set_to_none=True)
        rec.losses.append(loss.item())
        rec.norms.append(norm)
        rec.lrs.append(lr)
    rec.params = gather_named(named, rank)
    return rec, f"pp{world}", micro


def gather_named(named, rank):
    """Every rank's (name, tensor) pairs, merged on rank 0 (a tied wte once)."""
    mine = {n: (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().clone() for n, t in named}
    parts = [None] * dist.get_world_size()
    dist.all_gather_object(parts, mine)
    out = {}
    for p in parts:
        for n, t in p.items():
            out.setdefault(n, t)
    return out if rank == 0 else None


def train_tp(ex, args, rank, world):
    """tp: DTensor's parallelize_module on every block (q, k, v and c_fc
    column-wise, both projections row-wise); embeddings, norms and the head
    replicated. The whole batch on every rank."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    bf16 = args.precision == "bf16-mixed"
    mesh = init_device_mesh("cpu", (world,))
    model = whole_model(ex, split_qkv=True)
    load_init(model, ex, torch.float32)
    if is_llama(ex):  # q by heads and k, v by kv heads (shape_problem checked tp divides kv_heads)
        plan = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
                "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
                "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
                "mlp.down_proj": RowwiseParallel()}
    else:
        plan = {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
                "attn.c_proj": RowwiseParallel(), "mlp.c_fc": ColwiseParallel(), "mlp.c_proj": RowwiseParallel()}
    for blk in model.blocks():
        parallelize_module(blk, mesh, plan)
    master = None
    if bf16:
        master = [p.detach().clone() for p in model.parameters()]
        model = model.to(torch.bfloat16)
    named = list(model.named_parameters())
    opt_named = list(zip([n for n, _ in named], master)) if bf16 else named
    opt = make_adamw(opt_named, ex)
    micro = ex.micro
    mb = ex.batch // micro
    rec = Recorder()
    for step in range(ex.steps):
        lr = ex.lr_at(step + 1)
        loss_sum = 0.0
        for k in range(micro):
            x, y = batch_of(ex, step, k * mb, (k + 1) * mb)
            loss = loss_fn(model(x), y) / micro
            loss.backward()
            loss_sum += float(loss)
        if bf16:
            to_masters(named, opt_named)
        sq = 0.0
        for _, q in opt_named:
            g = q.grad.full_tensor() if hasattr(q.grad, "full_tensor") else q.grad
            sq += float(g.double().pow(2).sum())
        norm = math.sqrt(sq)
        if step == 0:
            rec.grads1 = full_tensors((n, p.grad) for n, p in named)
        apply_step(opt, named, opt_named, clip_factor(norm, ex.optim["clip"]), lr, bf16)
        if bf16:
            model.zero_grad(set_to_none=True)
        rec.losses.append(loss_sum)
        rec.norms.append(norm)
        rec.lrs.append(lr)
    rec.params = full_tensors(model.named_parameters())
    return rec, f"tp{world}", micro


def shape_problem(ex, args):
    """Why the strategy cannot train this export at this world, or None."""
    w, s = args.world, args.strategy
    if args.microbatches < 0:
        return "--microbatches must be positive"
    if is_llama(ex):
        m = ex.config["model"]
        if s not in LLAMA_STRATEGIES:
            return (f"{s} on {m.get('name', 'the llama family')}: the adapter trains the llama family with "
                    f"{', '.join(LLAMA_STRATEGIES)} only (GPT-2 exports take every strategy)")
        if s == "tp":
            if m["kv_heads"] < w:
                return (f"tp at world {w} on {m.get('name', 'llama')}: kv_heads {m['kv_heads']} < tp {w}; "
                        "DTensor's column split cannot split K/V by kv heads and the adapter does not replicate them")
            for what, n in (("heads", m["heads"]), ("kv_heads", m["kv_heads"]), ("ffn", m["ffn"])):
                if n % w:
                    return f"tp at world {w} on {m.get('name', 'llama')}: the world must divide {what} {n}"
    if s in ("ddp", "fsdp2", "hsdp") and ex.batch % (w * ex.micro):
        return f"{s} at world {w}: {w} replicas x {ex.micro} microbatches do not divide the batch of {ex.batch}"
    if s == "hsdp" and (w < 4 or w % 2):
        return "hsdp needs an even world of at least 4 (replicate 2 x shard world/2)"
    if s.startswith("pp-"):
        stages = w * (2 if s == "pp-interleaved" else 1)
        if w < 2 or ex.L % stages:
            return f"{s} at world {w}: {stages} stages must divide the model's {ex.L} layers (and world >= 2)"
        micro = args.microbatches or max(ex.micro, w)
        if ex.batch % micro:
            return f"{micro} microbatches do not divide the batch of {ex.batch}"
        if s == "pp-interleaved" and micro % w:
            return f"interleaved 1F1B needs microbatches ({micro}) divisible by the world ({w})"
    if s == "tp" and ex.NH % w:
        return f"tp at world {w}: the world must divide the model's {ex.NH} heads"
    if args.microbatches and not s.startswith("pp-"):
        return "--microbatches applies to the pipeline strategies (the others use the export's)"
    return None


def worker(rank, args, init_file):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=args.world)
    try:
        ex = pbtrace.Export(args.export)
        if args.strategy.startswith("pp-"):
            rec, mesh, micro = train_pipeline(ex, args, rank, args.world)
        elif args.strategy == "tp":
            rec, mesh, micro = train_tp(ex, args, rank, args.world)
        else:
            rec, mesh, micro = train_replicated(ex, args, rank, args.world)
        # Each rank's peak resident memory (its whole process: the reading
        # a CPU run has), reported in the trace, not judged.
        rss = [None] * args.world
        dist.all_gather_object(rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        if rank == 0:
            strategy = args.strategy + ("" if args.fault == "none" else "." + args.fault)
            if args.precision == "bf16-mixed":
                strategy += ".bf16"
            pbtrace.write_trace(
                args.out, ex, precision=args.precision, framework=f"pytorch-{torch.__version__.split('+')[0]}",
                strategy=strategy, mesh=mesh, microbatches=micro, losses=rec.losses, grad_norms=rec.norms,
                lrs=rec.lrs, grads1=rec.grads1, params=rec.params, peak_memory=rss,
                note=f"scripts/torch/train.py --strategy {args.strategy} --world {args.world} "
                     f"--precision {args.precision} --fault {args.fault}; rank.peak_memory_bytes: peak RSS per process")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # Done, the trace written and the group destroyed: leave without the
    # interpreter's teardown, where gloo's worker threads can still be joined
    # or destroyed in the wrong order and abort the process ("terminate called
    # without an active exception", SIGABRT; seen in 2 of 4 runs of the DDP
    # world-2 fault case on torch 2.x): the work succeeded, the exit says so.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--export", required=True, help="the directory parabench export wrote")
    ap.add_argument("--strategy", required=True, choices=STRATEGIES)
    ap.add_argument("--world", type=int, default=2, help="processes (2 to 4)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16-mixed"])
    ap.add_argument("--microbatches", type=int, default=0, help="pipeline microbatches (default: max(export's, world))")
    ap.add_argument("--fault", default="none", choices=FAULTS, help="a deliberate bug (the trace must fail verify)")
    ap.add_argument("--out", required=True, help="the trace file to write")
    args = ap.parse_args()
    if not 1 <= args.world <= 8:
        ap.error("--world must be 1 to 8")
    need = FAULT_STRATEGIES.get(args.fault)
    if need and not args.strategy.startswith(need):
        ap.error(f"--fault {args.fault} applies to {need} strategies")
    try:  # every check before a process starts
        ex = pbtrace.Export(args.export)
    except (pbtrace.ExportError, OSError, KeyError, ValueError, struct.error) as e:
        ap.error(f"--export {args.export}: {e}")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK) or os.path.isdir(args.out):
        ap.error(f"--out {args.out}: cannot write a file there")
    problem = shape_problem(ex, args)
    if problem:
        ap.error(problem)
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(worker, args=(args, os.path.join(d, "init")), nprocs=args.world, join=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
