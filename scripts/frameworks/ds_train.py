#!/usr/bin/env python3
"""The DeepSpeed adapter: DeepSpeed 0.19.8 trains parabench's canonical model
from an export on CPU (gloo; DeepSpeed's CPU accelerator) with its own
engine, and writes a parabench trace for `parabench verify`.

    python scripts/frameworks/ds_train.py --export DIR --strategy zero2 \\
        --world 2 --out trace.safetensors

Strategies: zero0 .. zero3 (deepspeed.initialize with ZeRO stage 0-3 over
every rank; gradient accumulation over the export's microbatches by the
engine's own boundary logic); pipe (the pipeline engine: a PipelineModule in
--world stages, wte tied by a TiedLayerSpec); ulysses-zero0 .. ulysses-zero3
(DistributedAttention over a sequence group of every rank); autotp (AutoTP
training, tp = --world). docs/frameworks.md describes each. The model is scripts/torch/train.py's GPT
(a plain torch.nn.Module, which is what DeepSpeed wraps). The optimizer is
built by DeepSpeed from its config ("AdamW", torch_adam: torch's AdamW, since
no DeepSpeed op is built), weight decay on matrices only through parameter
groups; the learning rate follows the export's schedule through a LambdaLR
the engine steps; clipping is `gradient_clipping` set from the export
(DeepSpeed's default is 1.0).
Faults (a trace that must fail verify): clip-default (`gradient_clipping`
left out of the config, so DeepSpeed's default 1.0 clips an export that
says no clipping); no-ga-scale (engine.backward(loss, scale_wrt_gas=False):
the loss is not divided by the accumulation steps); ulysses-scale (the
Ulysses loss scaled by the other ZeRO stage's rule).
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

STRATEGIES = ["zero0", "zero1", "zero2", "zero3", "pipe", "ulysses-zero0", "ulysses-zero1", "ulysses-zero2",
              "ulysses-zero3", "autotp", "autotp-zero1"]
FAULTS = ["none", "clip-default", "no-ga-scale", "ulysses-scale"]


def ds_config(ex, args, stage, per_rank_micro):
    o = ex.optim
    cfg = {
        "train_batch_size": ex.batch,
        "train_micro_batch_size_per_gpu": per_rank_micro,
        "gradient_accumulation_steps": ex.micro,
        "optimizer": {"type": "AdamW", "params": {
            "lr": o["lr"], "betas": [o["beta1"], o["beta2"]], "eps": o["eps"], "weight_decay": o["weight_decay"],
            "torch_adam": True}},
        "gradient_clipping": o["clip"],  # 0: none (DeepSpeed's default is 1.0)
        "zero_optimization": {"stage": stage},
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }
    if stage == 3:
        # ZeRO-3 keeps a tensor whole (not partitioned) below this many
        # elements; 0 partitions every one, so the tiny model is sharded.
        cfg["zero_optimization"]["stage3_param_persistence_threshold"] = 0
    if args.precision == "bf16-mixed":
        cfg["bf16"] = {"enabled": True}
    if args.fault == "clip-default":
        del cfg["gradient_clipping"]
    return cfg


def full_shape(ex, name):
    """The export's shape of a parameter named as the canonical model names
    it (q, k, v: one third of c_attn's rows)."""
    for part in "qkv":
        tag = f".attn.{part}."
        if tag in name:
            t = ex.init[name.replace(tag, ".attn.c_attn.")]
            return (t.shape[0] // 3,) + tuple(t.shape[1:])
    return tuple(ex.init[name].shape)


def gather_tp(ex, name, t, group):
    """AutoTP keeps a column-parallel weight's rows and a row-parallel
    weight's columns on each rank: the full tensor, gathered along the one
    dimension that is smaller than the export's."""
    import torch

    want = full_shape(ex, name)
    if tuple(t.shape) == want:
        return t
    dim = next(d for d in range(t.dim()) if t.shape[d] != want[d])
    parts = [torch.empty_like(t) for _ in range(torch.distributed.get_world_size(group))]
    torch.distributed.all_gather(parts, t.contiguous(), group=group)
    return torch.cat(parts, dim=dim)


def ulysses_model(ex, torch_adapter, sp):
    """The canonical GPT with its attention core wrapped in DeepSpeed's
    DistributedAttention (Ulysses): each rank holds T / sp positions of every
    sequence; the all-to-all before the core gives it every position of
    NH / sp heads, the one after gives back the rank's positions."""
    import torch
    import torch.nn.functional as F
    from deepspeed.sequence.layer import DistributedAttention
    from deepspeed.utils import groups

    def core(q, k, v, *_):  # [B, T, heads, hs]: causal attention over the full sequence
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        T, hs = q.shape[2], q.shape[3]
        att = (q @ k.transpose(-2, -1)) * (1.0 / hs ** 0.5)
        att = att.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        att = F.softmax(att.float(), dim=-1).to(q.dtype)
        return (att @ v).transpose(1, 2)

    class UlyssesAttention(torch_adapter.Attention):
        def forward(self, x):
            if not hasattr(self, "dist_attn"):  # the sequence group exists once deepspeed.initialize made the mesh
                self.dist_attn = DistributedAttention(core, groups._get_sequence_parallel_group(),
                                                      scatter_idx=2, gather_idx=1)
            B, T, _ = x.shape
            hs = self.C // self.NH
            q, k, v = (t.reshape(B, T, self.NH, hs) for t in self.c_attn(x).split(self.C, dim=2))
            return self.c_proj(self.dist_attn(q, k, v, 0).reshape(B, T, self.C))

    class UlyssesGPT(torch_adapter.Stage):
        def forward(self, x):  # x: this rank's T / sp positions; wpe from its first position
            lo = torch.distributed.get_rank(groups._get_sequence_parallel_group()) * x.shape[1]
            h = F.embedding(x, self.wte) + self.wpe[lo:lo + x.shape[1]]
            for blk in self.h.values():
                h = blk(h)
            return F.linear(self.ln_f(h), self.wte)

    model = UlyssesGPT(ex, 0, ex.L, True, True)
    for blk in model.h.values():
        attn = UlyssesAttention(ex.C, ex.NH)
        attn.load_state_dict(blk.attn.state_dict())
        blk.attn = attn
    return model


def worker(rank, args):
    import deepspeed
    import torch
    from deepspeed.utils import groups, safe_get_full_fp32_param, safe_get_full_grad

    import train as torch_adapter  # scripts/torch/train.py: the canonical GPT

    # Shim: DeepSpeed's torch comm backend compiles its shared-memory
    # all-reduce op (C++, with ninja, at first use) on the CPU accelerator;
    # only inference_all_reduce (AutoTP inference) uses it, training reduces
    # through torch.distributed. None is what build_shm_op returns when the
    # op is not available, and keeps the install free of built ops.
    deepspeed.comm.torch.build_shm_op = lambda: None

    ex = common.pbtrace.Export(args.export)
    world = args.world
    mode = re.sub(r"[-\d].*", "", args.strategy)  # zero, ulysses, autotp (pipe: pipe_worker)
    stage = int(args.strategy[-1]) if args.strategy[-1].isdigit() else 0
    dp = world if mode == "zero" else 1  # ulysses and autotp use every rank for sp / tp
    per = ex.batch // dp
    mb = per // ex.micro
    if mode == "ulysses":
        model = ulysses_model(ex, torch_adapter, world)
        mesh = f"cp{world}"  # parabench's axis for sequence (context) parallel attention
    elif mode == "autotp":
        model = torch_adapter.Stage(ex, 0, ex.L, True, True, split_qkv=True)  # q, k, v column-parallel apart
        mesh = f"tp{world}"
    else:
        model = torch_adapter.Stage(ex, 0, ex.L, True, True)
        mesh = f"dp{world}"
    torch_adapter.load_init(model, ex, torch.float32)
    cfg = ds_config(ex, args, stage, mb)
    mpu = None
    if mode == "ulysses":
        # DeepSpeed's own sequence-parallel groups (the mpu its Ulysses
        # training uses): ZeRO reduces over its sequence-data-parallel group.
        # (The config's data_parallel_size / sequence_parallel_size mesh
        # instead leaves that group the data-parallel one, of size 1 here,
        # and no gradient is reduced over the sequence.)
        from deepspeed.runtime.sequence_parallel import parallel_state_sp as mpu
        deepspeed.init_distributed(dist_backend="gloo")  # the groups are made before initialize
        mpu.initialize_sequence_parallel(world)
        cfg["sequence_parallel_size"] = world  # the batch check counts world / sp replicas
    if mode == "autotp":
        # AutoTP's own partitioning, told by name patterns which linears are
        # column-parallel (q, k, v, mlp.c_fc) and which row-parallel (the
        # projections); everything else stays replicated.
        # DeepSpeed's batch check counts every rank a data-parallel replica
        # here; without train_batch_size it derives it from the other two.
        del cfg["train_batch_size"]
        cfg["tensor_parallel"] = {"autotp_size": world, "partition_config": {
            "use_default_specs": False, "layer_specs": [
                {"patterns": [r".*\.attn\.[qkv]\.weight$", r".*\.mlp\.c_fc\.weight$"], "partition_type": "column"},
                {"patterns": [r".*\.attn\.c_proj\.weight$", r".*\.mlp\.c_proj\.weight$"], "partition_type": "row"}]}}
    named = list(model.named_parameters())
    groups_ = [
        {"params": [p for _, p in named if p.dim() >= 2], "weight_decay": ex.optim["weight_decay"]},
        {"params": [p for _, p in named if p.dim() < 2], "weight_decay": 0.0},
    ]
    lr0 = ex.optim["lr"]

    def schedule(opt):  # step s (0-based, the engine's count) trains at the export's lr of step s + 1
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: ex.lr_at(s + 1) / lr0)

    engine, _, _, sched = deepspeed.initialize(model=model, model_parameters=groups_, lr_scheduler=schedule,
                                               config=cfg, mpu=mpu)
    named = list(engine.module.named_parameters())  # AutoTP replaced the split linears
    names = [n for n, _ in named]
    params = [p for _, p in named]
    # Under Ulysses each rank's loss is the mean over its T / sp positions.
    # ZeRO 0-2 sum gradients over the sequence group, so the loss is divided
    # by sp there; ZeRO-3 averages them, so it is not.
    sp = world if mode == "ulysses" else 1
    loss_scale = 1.0 / sp if stage < 3 else 1.0
    if args.fault == "ulysses-scale":  # the other stage's rule
        loss_scale = 1.0 if stage < 3 else 1.0 / sp
    T = ex.seq // sp
    tp_group = groups.get_tensor_model_parallel_group() if mode == "autotp" else None
    if tp_group is not None and all(tuple(p.shape) == full_shape(ex, n) for n, p in zip(names, params)):
        raise RuntimeError("AutoTP sharded no parameter: its partition_config matched no linear")
    rec = common.Recorder()
    for step in range(ex.steps):
        lr = sched.get_last_lr()[0]
        loss_sum = torch.zeros((), dtype=torch.float64)
        for k in range(ex.micro):
            lo = (rank if mode == "zero" else 0) * per + k * mb
            x, y = ex.inputs[step, lo:lo + mb], ex.targets[step, lo:lo + mb]
            if sp > 1:
                x, y = x[:, rank * T:(rank + 1) * T], y[:, rank * T:(rank + 1) * T]
            loss = torch_adapter.loss_fn(engine(x), y)
            engine.backward(loss * loss_scale, scale_wrt_gas=args.fault != "no-ga-scale")
            loss_sum += loss.detach().double()
            if k < ex.micro - 1:
                engine.step()  # not a boundary: the engine only accumulates
        # At the boundary, before the step: every gradient reduced over the
        # ranks and averaged over the accumulation steps, unclipped.
        grads = [safe_get_full_grad(p) for p in params]
        if tp_group is not None:
            grads = [gather_tp(ex, n, g, tp_group) for n, g in zip(names, grads)]
        if step == 0:
            rec.grads1 = torch_adapter.full_tensors((n, g.float()) for n, g in zip(names, grads))
        # ZeRO stage 0 returns no global norm: the norm of the full gradients,
        # taken before the step clips them in place.
        own_norm = float(sum(g.double().pow(2).sum() for g in grads)) ** 0.5 if stage == 0 else None
        engine.step()
        norm = engine.get_global_grad_norm()
        if norm is None:
            norm = own_norm
        torch.distributed.all_reduce(loss_sum)
        rec.step(loss_sum.item() / (world * ex.micro), norm, lr)
    full = [safe_get_full_fp32_param(p) for p in params]
    # Without ZeRO (stage 0) bf16-mixed runs DeepSpeed's FP16_UnfusedOptimizer
    # wrapper ("ddp_bf16"), whose fp32 master weights safe_get_full_fp32_param
    # does not know (it answers None): they are its fp32_groups, in the order
    # of its fp16_groups. (The bf16 parameters in their place lose every
    # update below a bf16 ulp: the norms' weights, near 1, looked untrained.)
    master = {id(lp): hp for lg, hg in zip(getattr(engine.optimizer, "fp16_groups", []),
                                           getattr(engine.optimizer, "fp32_groups", [])) for lp, hp in zip(lg, hg)}
    full = [(f if f is not None else master.get(id(p), p)).detach().float() for p, f in zip(params, full)]
    if tp_group is not None:
        full = [gather_tp(ex, n, f, tp_group) for n, f in zip(names, full)]
    rec.params = torch_adapter.full_tensors(zip(names, full))
    common.write(rank, args, ex, rec, framework=f"deepspeed-{deepspeed.__version__}", mesh=mesh,
                 microbatches=ex.micro, script="ds_train.py")


def pipe_worker(rank, args):
    """DeepSpeed's pipeline engine: a PipelineModule of the canonical GPT's
    layers in `world` stages (a stage per rank, blocks split evenly), wte a
    TiedLayerSpec shared by the embedding (first stage) and the LM head (last
    stage), whose gradients the engine all-reduces over the tied ranks; the
    export's microbatches are the engine's, its 1F1B schedule runs them."""
    import deepspeed
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from deepspeed.pipe import LayerSpec, PipelineModule, TiedLayerSpec
    from deepspeed.runtime.pipe import schedule as pipe_schedule
    from deepspeed.runtime.pipe.engine import PipelineEngine

    import train as torch_adapter

    deepspeed.comm.torch.build_shm_op = lambda: None  # as in worker()
    deepspeed.init_distributed(dist_backend="gloo")  # PipelineModule builds its groups before initialize
    ex = common.pbtrace.Export(args.export)
    world, L = args.world, ex.L

    class Wte(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Parameter(torch.empty(ex.V, ex.C))

    class Wpe(nn.Module):
        def __init__(self):
            super().__init__()
            self.wpe = nn.Parameter(torch.empty(ex.init["wpe"].shape[0], ex.C))

        def forward(self, x):
            return x + self.wpe[:x.shape[1]]

    specs = ([TiedLayerSpec("wte", Wte, forward_fn=lambda m, x: F.embedding(x, m.wte), tied_weight_attr=["wte"]),
              LayerSpec(Wpe)]
             + [LayerSpec(torch_adapter.Block, ex.C, ex.NH) for _ in range(L)]
             + [LayerSpec(nn.LayerNorm, ex.C, eps=1e-5),
                TiedLayerSpec("wte", Wte, forward_fn=lambda m, h: F.linear(h, m.wte), tied_weight_attr=["wte"])])
    model = PipelineModule(specs, num_stages=world, loss_fn=torch_adapter.loss_fn, partition_method="type:Block")

    def export_name(name):  # PipelineModule's names: layer index first, the tied module under tied_modules
        if name.startswith("tied_modules.wte."):
            return "wte"
        idx, rest = name.split(".", 1)
        idx = int(idx)
        if idx == 1:
            return "wpe"
        if idx == L + 2:
            return "ln_f." + rest
        return f"h.{idx - 2}.{rest}"

    named = [(export_name(n), p) for n, p in model.named_parameters()]
    with torch.no_grad():
        for n, p in named:
            p.copy_(ex.init[n])
    groups_ = [
        {"params": [p for _, p in named if p.dim() >= 2], "weight_decay": ex.optim["weight_decay"]},
        {"params": [p for _, p in named if p.dim() < 2], "weight_decay": 0.0},
    ]
    lr0 = ex.optim["lr"]

    def schedule(opt):
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: ex.lr_at(s + 1) / lr0)

    # ZeRO-1 (over one data-parallel rank) so that the engine computes the
    # global gradient norm over the stages, the tied wte counted once.
    engine, _, _, sched = deepspeed.initialize(model=model, model_parameters=groups_, lr_scheduler=schedule,
                                               config=ds_config(ex, args, 1, ex.batch // ex.micro))
    names = [n for n, _ in named]
    params = [p for _, p in named]
    captured = {}
    # Hook (not a change of the engine): the schedule's OptimizerStep
    # instruction dispatches through PipelineEngine._INSTRUCTION_MAP; the
    # wrapper copies the reduced gradients (tied ones summed over the stages)
    # before the original step runs.
    original = PipelineEngine._INSTRUCTION_MAP[pipe_schedule.OptimizerStep]

    def step_and_capture(self, **kw):
        if "grads" not in captured:
            from deepspeed.utils import safe_get_full_grad
            captured["grads"] = {n: safe_get_full_grad(p).detach().float().clone() for n, p in zip(names, params)}
        return original(self, **kw)

    PipelineEngine._INSTRUCTION_MAP[pipe_schedule.OptimizerStep] = step_and_capture
    mb = ex.batch // ex.micro
    rec = common.Recorder()
    for step in range(ex.steps):
        lr = sched.get_last_lr()[0]
        batches = iter([(ex.inputs[step, k * mb:(k + 1) * mb], ex.targets[step, k * mb:(k + 1) * mb])
                        for k in range(ex.micro)])
        loss = engine.train_batch(batches)  # the microbatches' mean loss, on every stage
        rec.step(float(loss), engine.get_global_grad_norm(), lr)
    # Full tensors on rank 0: every stage's own, wte from the first stage.
    from deepspeed.utils import safe_get_full_fp32_param
    fp32 = [safe_get_full_fp32_param(p) for p in params]  # bf16-mixed: the optimizer's fp32 weights
    mine = {n: (f if f is not None else p).detach().float().clone() for n, p, f in zip(names, params, fp32)}
    both = [None] * world
    torch.distributed.all_gather_object(both, (mine, captured["grads"]))
    rec.params, rec.grads1 = {}, {}
    for p_stage, g_stage in reversed(both):
        rec.params.update(p_stage)
        rec.grads1.update(g_stage)
    common.write(rank, args, ex, rec, framework=f"deepspeed-{deepspeed.__version__}", mesh=f"pp{world}",
                 microbatches=ex.micro, script="ds_train.py")


def main():
    ap = common.parser(__doc__, STRATEGIES, FAULTS)
    args = ap.parse_args()
    common.check_framework(ap, "deepspeed")
    ex = common.preflight(ap, args)
    dp = args.world if args.strategy.startswith("zero") else 1
    if ex.batch % (dp * ex.micro):
        ap.error(f"{dp} replicas x {ex.micro} microbatches do not divide the batch of {ex.batch}")
    if args.fault == "no-ga-scale" and ex.micro < 2:
        ap.error("--fault no-ga-scale needs an export with train.microbatches >= 2")
    if args.fault == "clip-default" and ex.optim["clip"] > 0:
        ap.error("--fault clip-default needs an export with optim.clip = 0 (no clipping)")
    if args.fault == "ulysses-scale" and not args.strategy.startswith("ulysses"):
        ap.error("--fault ulysses-scale needs a --strategy ulysses-zero0 .. ulysses-zero3")
    if args.strategy.startswith("ulysses") and (ex.seq % args.world or ex.NH % args.world):
        ap.error(f"--strategy {args.strategy} at world {args.world}: the world must divide train.seq ({ex.seq}) "
                 f"and model.heads ({ex.NH})")
    if args.strategy.startswith("autotp") and ex.NH % args.world:
        ap.error(f"--strategy autotp: {args.world} ranks do not divide model.heads {ex.NH}")
    if args.strategy == "pipe" and (ex.L % args.world or ex.micro < 2):
        ap.error(f"--strategy pipe needs model.layers ({ex.L}) divisible by --world {args.world} and "
                 f"train.microbatches >= 2 (the pipeline's microbatches; export has {ex.micro})")
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    common.spawn(pipe_worker if args.strategy == "pipe" else worker, args)


if __name__ == "__main__":
    main()
