#!/usr/bin/env python3
"""The torchtitan adapter: torchtitan 0.3.0 trains parabench's llama export
(model.name=tiny-llama) on CPU (gloo) and writes a parabench trace for
`parabench verify`.

    python scripts/frameworks/tt_train.py --export DIR --strategy fsdp2 \\
        --world 2 --out trace.safetensors

--driver trainer (the default): torchtitan's own Trainer
(torchtitan.trainer.Trainer), its config from torchtitan's ConfigManager
with tt_trainer.py as the config registry and the strategy as command-line
overrides; trainer.train() runs the steps, and hooks (wrappers that call
the original) on its gradient clipping and its metrics logging record the
trace (trainer_worker). Strategies: fsdp2 (data_parallel_shard_degree),
ddp (data_parallel_replicate_degree), tp-sp (tensor_parallel_degree with
sequence parallel), pp (pipeline_parallel_degree, 1F1B), pp-interleaved
(Interleaved1F1B, two virtual stages per rank), cp (context_parallel_degree:
fails on CPU, docs/frameworks.md); bf16-mixed is FSDP2's mixed-precision
policy (training.mixed_precision_param).
--driver loop: the Trainer's step written out (forward, the loss as its
Trainer takes it, backward, global grad norm, clip, AdamW) around
torchtitan's model and parallelize functions (worker, pp_worker): fsdp2,
ddp, tp-sp, pp; bf16-mixed under fsdp2 only. It trains exports whose
schedule torchtitan's scheduler cannot follow (a cosine after a warmup).
The model is torchtitan's Llama3Model built from a config matching the
export (dim, heads, kv heads, ffn, vocab, norm eps, RoPE theta without
llama scaling, untied lm_head); the weights are the export's, mapped by
torchtitan's own Llama3StateDictAdapter.from_hf, which renames the Hugging
Face names and reverse-permutes q_proj/k_proj rows per head from Hugging
Face's rotate-half RoPE layout (pairs (i, i + hs/2)) to torchtitan's complex
rotation (pairs (2i, 2i + 1)); the attention scores are unchanged by it.
Optimizer: AdamW, weight decay on matrices only, lr of the export's
schedule; clipping to optim.clip (0: none).
Faults (a trace that must fail verify): clip-default (torchtitan's default
max_norm 1.0 left on while the export says no clipping); local-mean (fsdp2:
each rank's loss the mean over its own tokens, the usual PyTorch habit,
while torchtitan's FSDP sums the gradients: gradients x the dp size).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

STRATEGIES = ["fsdp2", "ddp", "tp-sp", "pp", "pp-interleaved", "cp"]
FAULTS = ["none", "clip-default", "local-mean"]
TORCHTITAN_DEFAULT_MAX_NORM = 1.0  # torchtitan's config default for training.max_norm


def build_model(ex):
    import tt_shim
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    from torchtitan.models.common.config_utils import make_ffn_config, make_gqa_config
    from torchtitan.models.llama3 import Llama3Model
    from torchtitan.models.llama3.model import Llama3TransformerBlock

    m = ex.config["model"]
    dim, nh, kvh, ffn, V, eps = m["channels"], m["heads"], m["kv_heads"], m["ffn"], m["vocab"], m["norm_eps"]
    keep = {"weight": lambda t: None}  # the export's weights are loaded over every init
    layers = [Llama3TransformerBlock.Config(
        attention_norm=RMSNorm.Config(normalized_shape=dim, eps=eps, param_init=keep),
        ffn_norm=RMSNorm.Config(normalized_shape=dim, eps=eps, param_init=keep),
        attention=make_gqa_config(
            dim=dim, n_heads=nh, n_kv_heads=kvh, wqkv_param_init=keep, wo_param_init=keep,
            inner_attention=tt_shim.sdpa_config(), fuse_qkv=False,
            rope=ComplexRoPE.Config(dim=dim // nh, max_seq_len=m["context"], theta=float(m["rope_theta"]),
                                    scaling="none")),
        feed_forward=make_ffn_config(dim=dim, hidden_dim=ffn, w1_param_init=keep, w2w3_param_init=keep),
    ) for _ in range(m["layers"])]
    cfg = Llama3Model.Config(
        dim=dim, vocab_size=V, enable_weight_tying=False,
        tok_embeddings=Embedding.Config(num_embeddings=V, embedding_dim=dim, param_init=keep),
        norm=RMSNorm.Config(normalized_shape=dim, eps=eps, param_init=keep),
        lm_head=Linear.Config(in_features=dim, out_features=V, param_init=keep),
        layers=layers)
    return cfg


def optimizer_and_clip(named, ex, args):
    """The export's AdamW (decay on matrices only, as the export says) over
    `named` parameters, and the clip norm (torchtitan's default under the
    clip-default fault)."""
    import torch
    o = ex.optim
    opt = torch.optim.AdamW(
        [{"params": [p for _, p in named if p.dim() >= 2], "weight_decay": o["weight_decay"]},
         {"params": [p for _, p in named if p.dim() < 2], "weight_decay": 0.0}],
        lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"], foreach=False)
    return opt, TORCHTITAN_DEFAULT_MAX_NORM if args.fault == "clip-default" else o["clip"]


def worker(rank, args):
    import tt_shim
    tt_shim.apply()
    import torch
    from torch.distributed.tensor import DTensor
    from torchtitan.distributed import ParallelDims
    from torchtitan.models.llama3.state_dict_adapter import Llama3StateDictAdapter

    ex = common.pbtrace.Export(args.export)
    world = args.world
    cfg = build_model(ex)
    if args.strategy == "tp-sp":
        from torchtitan.models.llama3.sharding import set_llama3_sharding_config
        set_llama3_sharding_config(cfg, enable_sp=True)
    model = cfg.build()
    adapter = Llama3StateDictAdapter(cfg, None)
    sd = adapter.from_hf({n: t.float().clone() for n, t in ex.init.items()})
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [k for k in missing if "rope" not in k and "freqs" not in k]
    assert not missing and not unexpected, (missing, unexpected)
    to_hf_names = {v: k for k, v in _tt_names(adapter, ex).items()}

    if args.strategy == "pp":
        return pp_worker(rank, args, ex, cfg, model, adapter, to_hf_names)
    dp = 1 if args.strategy == "tp-sp" else world
    dims = ParallelDims(dp_replicate=world if args.strategy == "ddp" else 1,
                        dp_shard=world if args.strategy == "fsdp2" else 1, cp=1,
                        tp=world if args.strategy == "tp-sp" else 1, pp=1, ep=1, world_size=world,
                        spmd_backend="partial_dtensor")
    dims.build_mesh()
    param_dtype = torch.bfloat16 if args.precision == "bf16-mixed" else torch.float32
    if args.strategy == "tp-sp":
        model.parallelize(dims)
    from torchtitan.distributed.fsdp import apply_fsdp_to_decoder
    # parallelize_llama's choice of mesh: ["dp_replicate", "fsdp"] when
    # replicating (fsdp of size 1: FSDP2 then only replicates, torchtitan's
    # DDP), ["fsdp"] otherwise.
    dp_mesh = {"fsdp2": lambda: dims.get_mesh(["fsdp"]),
               "ddp": lambda: dims.get_mesh(["dp_replicate", "fsdp"]),
               "tp-sp": lambda: None}[args.strategy]()
    if dp_mesh is not None:
        apply_fsdp_to_decoder(model, dp_mesh, param_dtype=param_dtype, reduce_dtype=torch.float32,
                              pp_enabled=False)
        tt_shim.sum_reductions(model)
        # torchtitan's Trainer: FSDP's division off, the loss scaled by the
        # global token count instead (below).
        from torchtitan.distributed.fsdp import disable_fsdp_gradient_division
        disable_fsdp_gradient_division(model)

    named = list(model.named_parameters())
    opt, clip = optimizer_and_clip(named, ex, args)

    def full(t):
        return (t.full_tensor() if isinstance(t, DTensor) else t).detach().float().clone()

    rec = common.Recorder()
    per = ex.batch // dp
    lo = (rank if dp > 1 else 0) * per
    for step in range(ex.steps):
        lr = ex.lr_at(step + 1)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = ex.inputs[step, lo:lo + per], ex.targets[step, lo:lo + per]
        logits = model(x)
        if isinstance(logits, DTensor):
            # tp: the lm_head's output stays vocabulary-sharded (torchtitan's
            # Trainer then uses loss_parallel); gathered here, differentiably,
            # so every rank takes the same loss.
            logits = logits.full_tensor()
        # torchtitan's loss convention (its Trainer's forward_backward_step):
        # the local SUM of token losses over the global token count, with
        # FSDP's gradient division off (disable_fsdp_gradient_division), so
        # the gradient reduction is a plain sum.
        tokens = ex.batch * ex.seq if args.fault != "local-mean" else y.numel()
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, ex.V), y.reshape(-1),
                                                 reduction="sum") / tokens
        if isinstance(loss, DTensor):
            loss = loss.full_tensor()
        loss.backward()
        grads = [p.grad for _, p in named]
        # torchtitan's clip_grad_norm_ (its dist_utils) on DTensor grads:
        # the total norm of the full gradients, then torch's clip.
        norm = torch.nn.utils.get_total_norm(grads, 2.0)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        if clip > 0:
            torch.nn.utils.clip_grads_with_norm_([p for _, p in named], clip, norm)
        if step == 0:
            # clipping scaled the grads in place: record them unclipped
            factor = 1.0 if clip <= 0 else min(1.0, clip / (float(norm) + 1e-6))
            rec.grads1 = {to_hf_names[n]: _to_hf(adapter, n, full(p.grad) / factor) for n, p in named}
        opt.step()
        opt.zero_grad(set_to_none=True)
        lsum = loss.detach().double().reshape(())
        torch.distributed.all_reduce(lsum)
        rec.step(lsum.item() / (world if dp == 1 else 1), float(norm), lr)
    rec.params = {to_hf_names[n]: _to_hf(adapter, n, full(p)) for n, p in named}
    import torchtitan
    version = getattr(torchtitan, "__version__", None) or common.importlib.metadata.version("torchtitan")
    common.write(rank, args, ex, rec, framework=f"torchtitan-{version}",
                 mesh=f"dp{world}" if dp > 1 else f"tp{world}",
                 microbatches=ex.micro, script="tt_train.py")


def trainer_worker(rank, args):
    """torchtitan's Trainer, configured by its ConfigManager from this
    directory's tt_trainer registry and the strategy's overrides, trained by
    its own train(); the trace recorded by two hooks (each wraps the
    original, which then runs)."""
    import tempfile

    import tt_shim
    tt_shim.apply()
    import torch
    import torch.distributed as dist
    import tt_trainer
    tt_trainer.define()
    import torchtitan.distributed.utils as dist_utils
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         set_model_state_dict)
    from torch.distributed.tensor import DTensor
    from torchtitan.config import ConfigManager

    ex = common.pbtrace.Export(args.export)
    os.environ[tt_trainer.EXPORT_ENV] = os.path.abspath(args.export)
    os.environ[tt_trainer.FAULT_ENV] = args.fault
    dump = tempfile.mkdtemp(prefix="tt_trainer_")
    os.environ["PARABENCH_TT_DUMP"] = dump
    cli = ["--module", "tt_trainer", "--config", "parabench_export"]
    cli += tt_trainer.overrides(args.strategy, args.world, args.precision, ex)
    if args.fault == "clip-default":  # torchtitan's own default max_norm, the export's "none" left out
        from torchtitan.config import TrainingConfig
        cli += ["--training.max_norm", str(TrainingConfig().max_norm)]
    config = ConfigManager().parse_args(cli)
    if args.strategy == "cp":
        config.dataloader.positions = True  # torchtitan's cp input sharding reads them
    if args.strategy == "pp-interleaved":
        # Every model part (virtual stage) gets layers: torchtitan's optimizer
        # builds each part's parameter groups and refuses a pattern that
        # matches nothing in a part (the norms' no-decay group, in a stage
        # holding only the embedding, as its default split makes). The
        # config's explicit split: L / (2 world) layers per stage, the
        # embedding with the first, the final norm and lm_head with the last.
        n = 2 * args.world
        per = ex.L // n
        parts = [[f"layers.{i}" for i in range(k * per, (k + 1) * per)] for k in range(n)]
        parts[0].insert(0, "tok_embeddings")
        parts[-1] += ["norm", "lm_head"]
        config.parallelism.module_fqns_per_model_part = parts
    trainer = config.build()

    # The export's weights over the Trainer's init, through torchtitan's own
    # state-dict adapter (from_hf: its names, q/k rows permuted per head);
    # set_model_state_dict shards each full tensor as the part holds it
    # (FSDP2 / TP DTensors, or a pipeline stage's subset).
    adapter = config.model_spec.state_dict_adapter(trainer.model_config, None)
    full = adapter.from_hf({n: t.float().clone() for n, t in ex.init.items()})
    names = {}
    for part in trainer.model_parts:
        mine = get_model_state_dict(part).keys()
        sd = {k: v for k, v in full.items() if k in mine}
        assert sd and not [k for k in mine if k not in sd and "freqs" not in k], sorted(mine)
        set_model_state_dict(part, sd, options=StateDictOptions(full_state_dict=True, strict=False))
        names.update({id(p): n for n, p in part.named_parameters()})
    tt_to_hf = {v: k for k, v in _tt_names(adapter, ex).items()}

    def full_tensor(t):
        return (t.full_tensor() if isinstance(t, DTensor) else t).detach().float().clone()

    def gather(pairs):  # {export name: tensor} from every rank's parts, on every rank
        mine = {tt_to_hf[n]: _to_hf(adapter, n, full_tensor(t)) for n, t in pairs}
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, mine)
        return {k: v for d in every for k, v in d.items()}

    rec = common.Recorder()
    lrs, norms = [], []
    clip_grad_norm_ = dist_utils.clip_grad_norm_

    def clip_hook(parameters, max_norm, *a, **kw):
        # Hook on the Trainer's gradient clipping (train_step calls
        # dist_utils.clip_grad_norm_): the step-1 gradients as reduced,
        # before clipping scales them; the norm it returns; the lr the
        # optimizer steps with next (its schedulers step after).
        parameters = list(parameters)
        if rec.grads1 is None:
            rec.grads1 = gather([(names[id(p)], p.grad) for p in parameters])
        norm = clip_grad_norm_(parameters, max_norm, *a, **kw)
        norms.append(float(norm))
        lrs.append(trainer.optimizers.optimizers[0].param_groups[0]["lr"])
        return norm

    dist_utils.clip_grad_norm_ = clip_hook
    log = trainer.metrics_processor.log

    def log_hook(step, global_avg_loss, global_max_loss, grad_norm, *a, **kw):
        # Hook on the Trainer's metrics logging (every step: log_freq 1):
        # its global average loss. Under PP only the last stage has it
        # (the others log -1): summed over the ranks that have it.
        has = not trainer.parallel_dims.pp_enabled or trainer.pp_has_last_stage
        t = torch.tensor([float(global_avg_loss) if has else 0.0, 1.0 if has else 0.0], dtype=torch.float64)
        dist.all_reduce(t)
        rec.losses.append(float(t[0] / t[1]))
        return log(step, global_avg_loss, global_max_loss, grad_norm, *a, **kw)

    trainer.metrics_processor.log = log_hook
    if tt_trainer.prestep_scheduler(ex):
        trainer.lr_schedulers.step()  # see tt_trainer.lr_scheduler_config
    trainer.train()
    trainer.close()
    assert len(rec.losses) == len(norms) == ex.steps, (len(rec.losses), len(norms))
    rec.norms, rec.lrs = norms, lrs
    rec.params = gather([(n, p) for part in trainer.model_parts for n, p in part.named_parameters()])
    import shutil
    shutil.rmtree(dump, ignore_errors=True)
    pd = trainer.parallel_dims
    mesh = (f"pp{pd.pp}" if pd.pp > 1 else f"tp{pd.tp}" if pd.tp > 1 else f"cp{pd.cp}" if pd.cp > 1
            else f"dp{pd.dp_replicate * pd.dp_shard}")
    common.write(rank, args, ex, rec, framework=f"torchtitan-{common.importlib.metadata.version('torchtitan')}",
                 mesh=mesh, microbatches=ex.micro, script="tt_train.py")


def pp_worker(rank, args, ex, cfg, model, adapter, to_hf_names):
    """pp: torchtitan's pipeline_llm (its stage split and 1F1B schedule over a
    "pp" mesh of every rank, 2 microbatches of batch/2), parallelize_fn the
    identity (no data or tensor parallel inside a stage)."""
    import torch
    import torch.distributed as dist
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed.pipeline_parallel import pipeline_llm

    world = args.world
    dims = ParallelDims(dp_replicate=1, dp_shard=1, cp=1, tp=1, pp=world, ep=1, world_size=world,
                        spmd_backend="partial_dtensor")
    dims.build_mesh()
    tokens = ex.batch * ex.seq

    def loss_fn(pred, y):  # torchtitan's loss functions return (loss, extra)
        return torch.nn.functional.cross_entropy(pred.float().reshape(-1, ex.V), y.reshape(-1),
                                                 reduction="sum") / tokens, None

    sched, parts, first, last = pipeline_llm(
        model, parallel_dims=dims, training=TrainingConfig(local_batch_size=ex.batch),
        parallelism=ParallelismConfig(pipeline_parallel_degree=world,
                                      pipeline_parallel_microbatch_size=ex.batch // 2),
        compile_config=CompileConfig(), ac_config=None, dump_folder=os.getcwd(), device=torch.device("cpu"),
        model_config=cfg, parallelize_fn=lambda m, **kw: m, loss_fn=loss_fn)
    named = [(n, p) for part in parts for n, p in part.named_parameters()]
    opt, clip = optimizer_and_clip(named, ex, args)

    def gather(tensors):  # every stage's tensors, the export's names, on rank 0
        mine = {to_hf_names[n]: _to_hf(adapter, n, t.detach().float().clone()) for n, t in tensors}
        every = [None] * world
        dist.all_gather_object(every, mine)
        return {k: v for d in every for k, v in d.items()}

    rec = common.Recorder()
    for step in range(ex.steps):
        lr = ex.lr_at(step + 1)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = ex.inputs[step], ex.targets[step]
        losses = []
        if first:
            sched.step(x, target=y if last else None, losses=losses)
        else:
            sched.step(target=y, losses=losses)
        lsum = torch.tensor(sum(float(v.detach()) for v in losses) if last else 0.0, dtype=torch.float64)
        dist.all_reduce(lsum)
        sq = torch.tensor(sum(float(p.grad.double().pow(2).sum()) for _, p in named), dtype=torch.float64)
        dist.all_reduce(sq)  # the global norm over the stages
        norm = float(sq.sqrt())
        if step == 0:
            rec.grads1 = gather([(n, p.grad) for n, p in named])
        if clip > 0:
            factor = min(1.0, clip / (norm + 1e-6))
            for _, p in named:
                p.grad.mul_(factor)
        opt.step()
        opt.zero_grad(set_to_none=True)
        rec.step(lsum.item(), norm, lr)
    rec.params = gather(named)
    import importlib.metadata
    common.write(rank, args, ex, rec, framework=f"torchtitan-{importlib.metadata.version('torchtitan')}",
                 mesh=f"pp{world}", microbatches=ex.micro, script="tt_train.py")


def _tt_names(adapter, ex):
    """HF name -> torchtitan name, through the adapter's own map."""
    import re
    out = {}
    for n in ex.init:
        abstract = re.sub(r"(\d+)", "{}", n, count=1)
        layer = re.search(r"\d+", n)
        tt = adapter.from_hf_map[abstract]
        out[n] = tt.format(layer.group(0)) if layer else tt
    return out


def _to_hf(adapter, tt_name, t):
    """A torchtitan tensor back in the export's layout (q/k rows permuted back
    to rotate-half order by the adapter's own to_hf)."""
    return next(iter(adapter.to_hf({tt_name: t}).values()))


def main():
    ap = common.parser(__doc__, STRATEGIES, FAULTS)
    ap.add_argument("--driver", default="trainer", choices=["trainer", "loop"],
                    help="trainer: torchtitan's Trainer (default); loop: the step written out around "
                         "torchtitan's model and parallelize functions")
    args = ap.parse_args()
    common.check_framework(ap, "torchtitan")
    ex = common.preflight(ap, args)
    m = ex.config["model"]
    if m.get("family") != "llama":
        ap.error(f"--export {args.export}: model family {m.get('family', 'gpt2')}; torchtitan builds only "
                 "Llama (export with --set model.name=tiny-llama)")
    if ex.micro != 1:
        ap.error("the torchtitan adapter trains exports with train.microbatches = 1")
    if args.strategy != "tp-sp" and ex.batch % args.world:
        ap.error(f"{args.world} replicas do not divide the batch of {ex.batch}")
    if args.strategy == "pp" and (m["layers"] % args.world or ex.batch % 2):
        ap.error(f"{args.world} stages must divide the model's {m['layers']} layers (and 2 microbatches the batch)")
    if args.strategy == "pp-interleaved" and (m["layers"] % (2 * args.world) or ex.batch % 2):
        ap.error(f"--strategy pp-interleaved: {2 * args.world} virtual stages (two per rank) must divide "
                 f"model.layers {m['layers']}, and 2 microbatches the batch")
    if args.strategy in ("tp-sp", "cp") and (m["heads"] % args.world or m["kv_heads"] % args.world
                                             or ex.seq % (2 * args.world)):
        ap.error(f"{args.strategy} {args.world} must divide heads {m['heads']} and kv heads {m['kv_heads']}, "
                 f"and {2 * args.world} the seq {ex.seq}")
    if args.driver == "loop":
        if args.strategy in ("pp-interleaved", "cp"):
            ap.error(f"--strategy {args.strategy} runs with --driver trainer only")
        if args.precision == "bf16-mixed" and args.strategy != "fsdp2":
            ap.error("--driver loop: --precision bf16-mixed runs with --strategy fsdp2 (FSDP2's "
                     "MixedPrecisionPolicy) only")
    elif ex.optim["schedule"] != "constant" and ex.optim["warmup"] > 0:
        ap.error("--driver trainer: torchtitan's scheduler holds one step at full lr after its warmup, so the "
                 "export's cosine after a warmup (optim.warmup > 0) has no torchtitan config; export with "
                 "optim.warmup=0 or optim.schedule=\"constant\", or use --driver loop")
    if args.fault == "local-mean" and args.strategy != "fsdp2":
        ap.error("--fault local-mean applies to --strategy fsdp2")
    if args.fault == "clip-default" and ex.optim["clip"] > 0:
        ap.error("--fault clip-default needs an export with optim.clip = 0 (no clipping)")
    common.spawn(trainer_worker if args.driver == "trainer" else worker, args)


if __name__ == "__main__":
    main()
