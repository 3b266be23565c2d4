#!/usr/bin/env python3
"""The DeepSpeed adapter: DeepSpeed 0.19.8 trains parabench's canonical model
from an export on CPU (gloo; DeepSpeed's CPU accelerator) with its own
engine, and writes a parabench trace for `parabench verify`.

    python scripts/frameworks/ds_train.py --export DIR --strategy zero2 \\
        --world 2 --out trace.safetensors

Strategies: zero0 .. zero3 (deepspeed.initialize with ZeRO stage 0-3 over
every rank; gradient accumulation over the export's microbatches by the
engine's own boundary logic). The model is scripts/torch/train.py's GPT
(a plain torch.nn.Module, which is what DeepSpeed wraps). The optimizer is
built by DeepSpeed from its config ("AdamW", torch_adam: torch's AdamW, since
no DeepSpeed op is built), weight decay on matrices only through parameter
groups; the learning rate follows the export's schedule through a LambdaLR
the engine steps; clipping is `gradient_clipping` set from the export
(DeepSpeed's default is 1.0).
Faults (a trace that must fail verify): clip-default (`gradient_clipping`
left out of the config, so DeepSpeed's default 1.0 clips an export that
says no clipping); no-ga-scale (engine.backward(loss, scale_wrt_gas=False):
the loss is not divided by the accumulation steps).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

STRATEGIES = ["zero0", "zero1", "zero2", "zero3"]
FAULTS = ["none", "clip-default", "no-ga-scale"]


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


def worker(rank, args):
    import deepspeed
    import torch
    from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_grad

    import train as torch_adapter  # scripts/torch/train.py: the canonical GPT

    # Shim: DeepSpeed's torch comm backend compiles its shared-memory
    # all-reduce op (C++, with ninja, at first use) on the CPU accelerator;
    # only inference_all_reduce (AutoTP inference) uses it, training reduces
    # through torch.distributed. None is what build_shm_op returns when the
    # op is not available, and keeps the install free of built ops.
    deepspeed.comm.torch.build_shm_op = lambda: None

    ex = common.pbtrace.Export(args.export)
    world = args.world
    stage = int(args.strategy[-1])
    per = ex.batch // world
    mb = per // ex.micro
    model = torch_adapter.Stage(ex, 0, ex.L, True, True)
    torch_adapter.load_init(model, ex, torch.float32)
    named = list(model.named_parameters())
    groups = [
        {"params": [p for _, p in named if p.dim() >= 2], "weight_decay": ex.optim["weight_decay"]},
        {"params": [p for _, p in named if p.dim() < 2], "weight_decay": 0.0},
    ]
    lr0 = ex.optim["lr"]

    def schedule(opt):  # step s (0-based, the engine's count) trains at the export's lr of step s + 1
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: ex.lr_at(s + 1) / lr0)

    engine, _, _, sched = deepspeed.initialize(model=model, model_parameters=groups, lr_scheduler=schedule,
                                               config=ds_config(ex, args, stage, mb))
    names = [n for n, _ in named]
    params = [p for _, p in named]
    rec = common.Recorder()
    for step in range(ex.steps):
        lr = sched.get_last_lr()[0]
        loss_sum = torch.zeros((), dtype=torch.float64)
        for k in range(ex.micro):
            lo = rank * per + k * mb
            x, y = ex.inputs[step, lo:lo + mb], ex.targets[step, lo:lo + mb]
            loss = torch_adapter.loss_fn(engine(x), y)
            engine.backward(loss, scale_wrt_gas=args.fault != "no-ga-scale")
            loss_sum += loss.detach().double()
            if k < ex.micro - 1:
                engine.step()  # not a boundary: the engine only accumulates
        # At the boundary, before the step: every gradient reduced over the
        # ranks and averaged over the accumulation steps, unclipped.
        grads = [safe_get_full_grad(p) for p in params]
        if step == 0:
            rec.grads1 = {n: g.detach().float().clone() for n, g in zip(names, grads)}
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
    rec.params = {n: (f if f is not None else p).detach().float().clone() for n, p, f in zip(names, params, full)}
    common.write(rank, args, ex, rec, framework=f"deepspeed-{deepspeed.__version__}", mesh=f"dp{world}",
                 microbatches=ex.micro, script="ds_train.py")


def main():
    ap = common.parser(__doc__, STRATEGIES, FAULTS)
    args = ap.parse_args()
    common.check_framework(ap, "deepspeed")
    ex = common.preflight(ap, args)
    if ex.batch % (args.world * ex.micro):
        ap.error(f"{args.world} replicas x {ex.micro} microbatches do not divide the batch of {ex.batch}")
    if args.fault == "no-ga-scale" and ex.micro < 2:
        ap.error("--fault no-ga-scale needs an export with train.microbatches >= 2")
    if args.fault == "clip-default" and ex.optim["clip"] > 0:
        ap.error("--fault clip-default needs an export with optim.clip = 0 (no clipping)")
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    common.spawn(worker, args)


if __name__ == "__main__":
    main()
