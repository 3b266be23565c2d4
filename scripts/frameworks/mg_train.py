#!/usr/bin/env python3
"""The Megatron-Core adapter: Megatron-Core 0.16.1 trains parabench's
canonical model from an export on CPU (gloo, through mg_shim.py) with its own
GPTModel, parallel state, DistributedDataParallel, optimizer, lr scheduler and
pipeline schedules, and writes a parabench trace for `parabench verify`.

    python scripts/frameworks/mg_train.py --export DIR --strategy tp \\
        --world 2 --out trace.safetensors

Strategies (world 2): dp (Megatron's DDP, overlapped reduction), distopt (DDP
with the DistributedOptimizer), fsdp (Megatron-FSDP), tp (tensor
parallel), tp-sp (tensor + sequence
parallel), pp (1F1B, forward_backward_pipelining_without_interleaving),
pp-interleaved (two model chunks per rank, forward_backward_pipelining_with_interleaving).
The model: GPTModel with the local layer spec, learned absolute positions,
LayerNorm eps 1e-5, tanh GELU, biases, the output layer tied to the word
embeddings. The export's GPT-2 weights are loaded into it: c_attn's rows
[all q; all k; all v] permuted to linear_qkv's per-head [q, k, v] order, each
tensor cut to this rank's tensor-parallel shard. The optimizer is
get_megatron_optimizer's Adam (decoupled decay; no decay on biases and
norms), clip_grad from the export, and OptimizerParamScheduler stepped so
step s trains at the export's lr of step s. --precision bf16-mixed: Megatron's
Float16Module (bf16 model) and its optimizer's fp32 main parameters, which
the trace records (Megatron-FSDP: its fp32 main weights).
moe-ep (a mixture-of-experts export: Megatron's MoELayer, SequentialMLP
experts, alltoall token dispatcher, expert_model_parallel_size = world over
the data-parallel ranks) also writes the trace's per-step MoE quantities.
Faults (a trace that must fail verify): no-finalize (tp-sp with
config.finalize_model_grads_func unset: the sequence-parallel norm and bias
gradients are never all-reduced over the tensor-parallel group);
expert-grads-ep (moe-ep: the reduced expert gradients multiplied by the ep
size through the DDP's expert gradient buffers' scale_gradients, as if
divided by the expert data-parallel size instead of the data-parallel size).
"""

import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

STRATEGIES = ["dp", "distopt", "fsdp", "tp", "tp-sp", "pp", "pp-interleaved", "moe-ep"]
FAULTS = ["none", "no-finalize", "expert-grads-ep"]
FAULT_STRATEGIES = {"no-finalize": "tp-sp", "expert-grads-ep": "moe-ep"}

# GPTModel's per-layer names -> the export's (results/TRACE.md).
LAYER_NAMES = {
    "input_layernorm": "ln_1", "self_attention.linear_qkv": "attn.c_attn",
    "self_attention.linear_proj": "attn.c_proj", "pre_mlp_layernorm": "ln_2",
    "mlp.linear_fc1": "mlp.c_fc", "mlp.linear_fc2": "mlp.c_proj",
}


def qkv_to_megatron(t, NH):
    """GPT-2's c_attn rows [q heads; k heads; v heads] -> linear_qkv's rows
    [q, k, v of head 0; of head 1; ...] (one query group per head)."""
    rest = t.shape[1:]
    return t.reshape(3, NH, -1, *rest).transpose(0, 1).reshape(-1, *rest)


def qkv_from_megatron(t, NH):
    rest = t.shape[1:]
    return t.reshape(NH, 3, -1, *rest).transpose(0, 1).reshape(-1, *rest)


class ShardedNorm(torch.nn.LayerNorm):
    """The norm of the layer spec: torch's LayerNorm with the
    `sequence_parallel` mark on its parameters. Replaces apex's FusedLayerNorm
    (the local spec's norm with apex installed; without apex Megatron falls
    back to WrappedTorchNorm, which refuses sequence parallel). The mark is
    what FusedLayerNorm sets and what finalize_model_grads reads to
    all-reduce these gradients over the tensor-parallel group."""

    def __init__(self, config, hidden_size, eps=1e-5, **kwargs):
        super().__init__(hidden_size, eps=eps, dtype=config.params_dtype)
        for p in (self.weight, self.bias):
            p.sequence_parallel = config.sequence_parallel


def export_names(model, ex, ep_rank=0, ep=1):
    """{parameter: export name} of one (unwrapped) GPTModel chunk. A MoE
    layer's router is the export's; local expert j of expert-parallel rank r
    is the export's expert r * E / ep + j."""
    names = {}
    for n, p in model.named_parameters():
        m = re.match(r"decoder\.layers\.(\d+)\.(.+)\.(weight|bias)$", n)
        e = re.match(r"decoder\.layers\.(\d+)\.mlp\.experts\.local_experts\.(\d+)\.(linear_fc1|linear_fc2)\."
                     r"(weight|bias)$", n)
        if e:
            layer = model.decoder.layers[int(e.group(1))]
            x = ep_rank * (ex.moe["experts"] // ep) + int(e.group(2))
            proj = "c_fc" if e.group(3) == "linear_fc1" else "c_proj"
            names[p] = f"h.{layer.layer_number - 1}.mlp.experts.{x}.{proj}.{e.group(4)}"
        elif m and m.group(2) == "mlp.router":
            layer = model.decoder.layers[int(m.group(1))]
            names[p] = f"h.{layer.layer_number - 1}.mlp.router.{m.group(3)}"
        elif m:
            layer = model.decoder.layers[int(m.group(1))]
            names[p] = f"h.{layer.layer_number - 1}.{LAYER_NAMES[m.group(2)]}.{m.group(3)}"
        elif n in ("embedding.word_embeddings.weight", "output_layer.weight"):
            names[p] = "wte"
        elif n == "embedding.position_embeddings.weight":
            names[p] = "wpe"
        elif n.startswith("decoder.final_layernorm."):
            names[p] = "ln_f." + n.rsplit(".", 1)[1]
        else:
            raise RuntimeError(f"Megatron parameter {n} has no export name")
    return names


def moe_config(ex, ep):
    """TransformerConfig's MoE fields for a mixture-of-experts export (none
    for a dense one), matching parabench's MoE (model_config.h MoeConfig):
    softmax router without bias, top-k over the logits then the softmax over
    the k chosen (= the softmax renormalized over the k, moe_router_pre_softmax
    off), the Switch load-balancing loss over each rank's microbatch
    ("aux_loss": parabench's `local` capacity scope) with the export's
    coefficient, no token dropping (no capacity factor: the export's capacity
    must admit every choice), SequentialMLP experts of width 4C with biases,
    the alltoall token dispatcher over the expert-parallel group."""
    m = ex.moe
    if not m.get("experts", 0):
        return {}
    every = m.get("every", 1)
    return dict(num_moe_experts=m["experts"], moe_router_topk=m["top_k"], moe_ffn_hidden_size=4 * ex.C,
                moe_aux_loss_coeff=m["aux_loss_coef"], moe_router_load_balancing_type="aux_loss",
                moe_router_score_function="softmax", moe_router_pre_softmax=False,
                moe_expert_capacity_factor=None, moe_token_dispatcher_type="alltoall", moe_grouped_gemm=False,
                moe_router_fusion=False, moe_permute_fusion=False, moe_router_dtype="fp32",
                moe_layer_freq=[1 if i % every == 0 else 0 for i in range(ex.L)],
                expert_model_parallel_size=ep)


def drop_router_bias(model):
    """add_bias_linear (the export's biases) also gives Megatron's router a
    bias, which parabench's router has not: removed (the gating's bias is then
    None, as with add_bias_linear off)."""
    for mod in model.modules():
        if type(mod).__name__ == "TopKRouter" and getattr(mod, "bias", None) is not None:
            del mod.bias
            mod.register_parameter("bias", None)


def moe_checks(ap, ex, s, w):
    """A MoE export trains under moe-ep only, and only when parabench's
    routing is Megatron's: every choice admitted (capacity_factor >= E / k)
    and the load balancing over each rank's microbatch (capacity `local`)."""
    m = ex.moe
    if not m.get("experts", 0):
        if s == "moe-ep":
            ap.error("--strategy moe-ep needs a mixture-of-experts export (parabench export --set moe.experts=4)")
        return
    if s != "moe-ep":
        ap.error(f"the export's model has experts: --strategy {s} trains dense models; use --strategy moe-ep")
    E, k = m["experts"], m["top_k"]
    if E % w:
        ap.error(f"moe-ep at world {w}: the world must divide the {E} experts")
    if m["capacity_factor"] * k < E:
        ap.error(f"the export's moe.capacity_factor {m['capacity_factor']} drops tokens (below experts / top_k = "
                 f"{E / k:g}); Megatron runs without dropping here: export with moe.capacity_factor={E / k:g}")
    if m.get("capacity", "global") != "local":
        ap.error(f"the export's moe.capacity is {m.get('capacity')!r}: Megatron's aux_loss balances each rank's "
                 f"microbatch, parabench's `local` scope: export with moe.capacity=local")


def shard(full, p, tp_rank, tp):
    """This rank's tensor-parallel shard of a full tensor."""
    if not getattr(p, "tensor_model_parallel", False):
        return full
    return full.chunk(tp, dim=p.partition_dim)[tp_rank]


def to_megatron(name, full, NH):
    return qkv_to_megatron(full, NH) if ".attn.c_attn." in name else full


def worker(rank, args):
    import mg_shim

    mg_shim.install()
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt import gpt_layer_specs
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules, get_num_layers_to_build

    ex = common.pbtrace.Export(args.export, allow_moe=True)
    s, world = args.strategy, args.world
    tp = world if s in ("tp", "tp-sp") else 1
    pp = world if s.startswith("pp") else 1
    vpp = 2 if s == "pp-interleaved" else None  # model chunks per rank
    ep = world if s == "moe-ep" else 1  # experts split over the data-parallel ranks
    dp = world // (tp * pp)
    ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                 virtual_pipeline_model_parallel_size=vpp, expert_model_parallel_size=ep)
    ep_rank = ps.get_expert_model_parallel_rank()
    tensor_parallel.model_parallel_cuda_manual_seed(1234)
    tp_rank = ps.get_tensor_model_parallel_rank()
    dp_rank = ps.get_data_parallel_rank()
    bf16 = args.precision == "bf16-mixed"
    micro = pp_microbatches(ex, s, world)
    mb = ex.batch // (dp * micro)
    config = TransformerConfig(
        num_layers=ex.L, hidden_size=ex.C, num_attention_heads=ex.NH, ffn_hidden_size=4 * ex.C,
        kv_channels=ex.C // ex.NH, hidden_dropout=0.0, attention_dropout=0.0, layernorm_epsilon=1e-5,
        normalization="LayerNorm", add_bias_linear=True,
        activation_func=lambda x: torch.nn.functional.gelu(x, approximate="tanh"), gated_linear_unit=False,
        bias_activation_fusion=False, bias_dropout_fusion=False, masked_softmax_fusion=False,
        apply_rope_fusion=False, gradient_accumulation_fusion=False, persist_layer_norm=False,
        attention_softmax_in_fp32=True, apply_query_key_layer_scaling=False,
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vpp,
        sequence_parallel=s == "tp-sp",
        use_cpu_initialization=True, transformer_impl="local", params_dtype=torch.bfloat16 if bf16 else torch.float32,
        pipeline_dtype=torch.bfloat16 if bf16 else torch.float32, bf16=bf16, init_method_std=0.02,
        **moe_config(ex, ep))
    # The local spec with ShardedNorm as every norm (the layers' two and the
    # block's final one).
    layer = gpt_layer_specs.get_gpt_layer_local_spec()
    layer.submodules.input_layernorm = ShardedNorm
    layer.submodules.pre_mlp_layernorm = ShardedNorm
    moe_layer = None  # a MoE layer: the local spec's MoELayer (SequentialMLP experts), the same norms
    if ex.moe.get("experts", 0):
        moe_layer = gpt_layer_specs.get_gpt_layer_local_spec(num_experts=ex.moe["experts"], moe_grouped_gemm=False)
        moe_layer.submodules.input_layernorm = ShardedNorm
        moe_layer.submodules.pre_mlp_layernorm = ShardedNorm
    fsdp = s == "fsdp"
    fsdp_args = {}
    if fsdp:
        # Megatron-FSDP sharding parameters, gradients and optimizer state;
        # gradient_reduce_div_fusion off: it reduces with NCCL's PREMUL_SUM,
        # which gloo does not have (the division then runs apart).
        fsdp_args = dict(use_megatron_fsdp=True, data_parallel_sharding_strategy="optim_grads_params",
                         gradient_reduce_div_fusion=False)
    ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=s in ("dp", "distopt"),
                                               use_distributed_optimizer=s in ("distopt", "fsdp"), bucket_size=None,
                                               **fsdp_args)
    ddps, names = [], {}
    for vp in range(vpp or 1):  # one GPTModel per model chunk (vp stage) of this rank
        v = vp if vpp else None
        n_build = get_num_layers_to_build(config, vp_stage=v)
        every = ex.moe.get("every", 1)
        specs = [moe_layer if moe_layer is not None and i % every == 0 else layer for i in range(n_build)]
        spec = TransformerBlockSubmodules(layer_specs=specs, layer_norm=ShardedNorm)
        model = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=ex.V,
                         max_sequence_length=ex.init["wpe"].shape[0],
                         pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=v),
                         post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=v),
                         share_embeddings_and_output_weights=True, position_embedding_type="learned_absolute",
                         vp_stage=v)
        drop_router_bias(model)
        chunk_names = export_names(model, ex, ep_rank, ep)
        with torch.no_grad():
            for p, n in chunk_names.items():
                p.copy_(shard(to_megatron(n, ex.init[n].float(), ex.NH), p, tp_rank, tp).to(p.dtype))
        names.update(chunk_names)
        gpt = model  # the GPTModel, inside the wrappers below
        if bf16:  # as Megatron's training loop: bf16 compute, fp32 inputs and loss at the chunk's edges
            model = Float16Module(config, model)
        if fsdp:
            from megatron.core.distributed.fsdp.mcore_fsdp_adapter import FullyShardedDataParallel

            # Shim, for this constructor only: MegatronFSDP.__init__ compares
            # its device with torch.device(f"cuda:{current_device()}"), which
            # the shim's current_device() (the CPU device) makes an invalid
            # device string; 0 makes it a valid one (the comparison only
            # logs). Its buffers are placed on device=cpu.
            current = torch.cuda.current_device
            torch.cuda.current_device = lambda: 0
            try:
                ddps.append(FullyShardedDataParallel(config, ddp_config, module=model, device=torch.device("cpu")))
            finally:
                torch.cuda.current_device = current
            # The wrapper replaced every parameter by a DTensor shard.
            for p in chunk_names:
                names.pop(p)
            names.update(export_names(gpt, ex))
        else:
            ddps.append(DistributedDataParallel(config, ddp_config, module=model, disable_bucketing=vp > 0))
    o = ex.optim
    opt = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=o["lr"], min_lr=o["min_lr"], weight_decay=o["weight_decay"],
                        adam_beta1=o["beta1"], adam_beta2=o["beta2"], adam_eps=o["eps"], clip_grad=o["clip"],
                        bf16=bf16, params_dtype=config.params_dtype, use_distributed_optimizer=s in ("distopt", "fsdp")),
        ddps)
    warm = o["warmup"]
    sched = OptimizerParamScheduler(
        opt, init_lr=0.0, max_lr=o["lr"], min_lr=o["min_lr"] if o["schedule"] == "cosine" else o["lr"],
        lr_warmup_steps=warm, lr_decay_steps=max(ex.steps, warm + 1),
        lr_decay_style="cosine" if o["schedule"] == "cosine" else "constant",
        start_wd=o["weight_decay"], end_wd=o["weight_decay"], wd_incr_steps=ex.steps, wd_incr_style="constant")
    config.no_sync_func = [d.no_sync for d in ddps] if vpp else ddps[0].no_sync
    if args.fault != "no-finalize":
        config.finalize_model_grads_func = finalize_model_grads
    fwd_bwd = get_forward_backward_func()
    T = ex.seq
    positions = torch.arange(T).unsqueeze(0)

    def forward_step(data, chunk):
        x, y = next(data)
        per_token = chunk(x, positions.expand_as(x), None, labels=y)

        def loss_func(out):
            loss = out.float().mean()
            # The schedule divides the returned loss by the microbatches in
            # place: the logged value is a copy.
            return loss, {"loss": loss.detach().clone()}
        return per_token, loss_func

    rec = common.Recorder()
    moe = MoeRecord(ddps, ex) if ex.moe.get("experts", 0) else None
    for step in range(ex.steps):
        lo = dp_rank * mb * micro
        batches = [(ex.inputs[step, lo + k * mb: lo + (k + 1) * mb], ex.targets[step, lo + k * mb: lo + (k + 1) * mb])
                   for k in range(micro)]
        for d in ddps:
            d.zero_grad_buffer()
        opt.zero_grad()
        data = [iter(batches) for _ in ddps] if vpp else iter(batches)
        out = fwd_bwd(forward_step_func=forward_step, data_iterator=data, model=ddps,
                      num_microbatches=micro, seq_length=T, micro_batch_size=mb, forward_only=False)
        if args.fault == "expert-grads-ep":
            # The bug: the reduced expert gradients rescaled by the expert
            # data-parallel size (dp / ep) instead of the data-parallel size
            # Megatron's DDP already divided by, i.e. multiplied by ep, through
            # the gradient buffers' own scale_gradients.
            for d in ddps:
                for buf in d.expert_parallel_buffers:
                    buf.scale_gradients(float(ep))
        # Mean loss over the global batch: the last stage's microbatches,
        # averaged over the data replicas, sent to every rank.
        loss = torch.zeros((), dtype=torch.float64)
        if ps.is_pipeline_last_stage(ignore_virtual=True):
            loss += sum(float(d["loss"]) for d in out) / micro / dp
        torch.distributed.all_reduce(loss)
        loss = loss.item() / tp  # every tensor-parallel rank of a replica holds the same loss
        if moe:  # the step's routing; parabench's loss includes the load-balancing terms
            loss += moe.step(ps, micro, dp)
        if step == 0:
            grads1 = fsdp_full(names, ps, ex.NH, True) if fsdp else full_grads(ddps, names, ps, tp, ex.NH,
                                                                                  s == "distopt")
        sched.step(increment=1)  # num_steps = step + 1: the lr of 1-based step s
        lr = opt.param_groups[0]["lr"]
        _, norm, _ = opt.step()  # (update successful, the unclipped global norm, zeros)
        if step == 0:
            rec.grads1 = grads1
        rec.step(loss, norm, lr)
    if fsdp:  # bf16-mixed too: Megatron-FSDP's DTensor parameters are its fp32 main weights
        rec.params = fsdp_full(names, ps, ex.NH, False)
    else:
        rec.params = full_params(names, ps, tp, ex.NH, opt if bf16 else None)
    if moe:
        rec.moe_tokens, rec.moe_aux = moe.tokens, moe.aux
    import megatron.core

    common.write(rank, args, ex, rec, framework=f"megatron-core-{megatron.core.__version__}",
                 mesh=mesh_text(dp, tp, pp, ep), microbatches=micro, script="mg_train.py")


class MoeRecord:
    """The trace's per-step MoE quantities, as Megatron computed them: each
    router's routing_map (the choices its token dispatcher sent; a forward
    hook on TopKRouter) summed per expert over the step's microbatches and the
    data-parallel ranks, and the load-balancing loss Megatron's aux-loss
    tracker logged per layer (the loss over the coefficient, summed over the
    microbatches), times the coefficient over the microbatches x replicas:
    the term's weight in the step's loss, as Megatron's gradient has it
    (MoEAuxLossAutoScaler's 1 / microbatches, DDP's 1 / dp)."""

    def __init__(self, ddps, ex):
        self.layers = []  # the MoE layers' layer numbers, in order
        self.coef = ex.moe["aux_loss_coef"]
        self.E = ex.moe["experts"]
        self.counts = {}
        for d in ddps:
            for mod in d.modules():
                if type(mod).__name__ == "TopKRouter":
                    self.layers.append(mod.layer_number)
                    mod.register_forward_hook(self._hook)
        self.layers.sort()
        self.tokens, self.aux = [], []

    def _hook(self, mod, inputs, out):
        _, routing_map = out
        c = routing_map.detach().sum(dim=0).to(torch.float64)
        self.counts[mod.layer_number] = self.counts.get(mod.layer_number, 0) + c

    def step(self, ps, micro, dp):
        """Records the step; returns the load-balancing losses' sum (what
        parabench's loss adds to the cross entropy)."""
        from megatron.core.transformer.moe.moe_utils import clear_aux_losses_tracker, get_moe_layer_wise_logging_tracker

        group = ps.get_data_parallel_group()
        counts = torch.stack([self.counts.get(n, torch.zeros(self.E, dtype=torch.float64)) for n in self.layers])
        torch.distributed.all_reduce(counts, group=group)
        values = get_moe_layer_wise_logging_tracker()["load_balancing_loss"]["values"].detach().to(torch.float64)
        aux = torch.stack([values[n - 1] for n in self.layers])
        torch.distributed.all_reduce(aux, group=group)
        aux = aux * self.coef / (micro * dp)
        clear_aux_losses_tracker()
        self.counts = {}
        self.tokens.append(counts.round().to(torch.int64).tolist())
        self.aux.append(aux.tolist())
        return float(aux.sum())


def pp_microbatches(ex, s, world):
    """The export's microbatches; at least one per stage under a pipeline,
    and (interleaved) a multiple of the pipeline size."""
    if not s.startswith("pp"):
        return ex.micro
    m = max(ex.micro, world)
    return m if s == "pp" else -(-m // world) * world


def mesh_text(dp, tp, pp, ep=1):
    return ".".join(f"{a}{n}" for a, n in (("dp", dp), ("pp", pp), ("tp", tp), ("ep", ep)) if n > 1) or "dp1"


def gather_full(local, names, ps, tp, NH):
    """{export name: full tensor} on every rank from {param: local tensor}:
    tensor-parallel shards concatenated along their partition dim, linear_qkv
    permuted back to GPT-2's order, pipeline stages merged."""
    import torch
    import torch.distributed as dist

    mine = {}
    for p, t in local.items():
        n = names[p]
        t = t.detach().float().clone()
        if getattr(p, "tensor_model_parallel", False) and tp > 1:
            parts = [torch.empty_like(t) for _ in range(tp)]
            dist.all_gather(parts, t, group=ps.get_tensor_model_parallel_group())
            t = torch.cat(parts, dim=p.partition_dim)
        if ".attn.c_attn." in n:
            t = qkv_from_megatron(t, NH)
        mine.setdefault(n, t)
    parts = [None] * dist.get_world_size()
    dist.all_gather_object(parts, mine)
    out = {}
    for part in parts:
        for n, t in part.items():
            out.setdefault(n, t)
    return out


def full_grads(ddps, names, ps, tp, NH, distopt):
    """The step-1 gradients, reduced (and, across pipeline stages, the tied
    wte's the first stage holds after finalize_model_grads). Under the
    DistributedOptimizer each data-parallel rank holds only its shard of every
    reduced bucket: the shards are summed into whole buckets first."""
    import torch.distributed as dist

    local = {p: p.main_grad for p in names}
    if distopt:
        dp = ps.get_data_parallel_world_size()
        r = ps.get_data_parallel_rank()
        for buf in [b for d in ddps for b in d.buffers]:
            for bucket in buf.buckets:
                g = bucket.grad_data.clone()
                n = g.numel() // dp
                g[: r * n] = 0
                g[(r + 1) * n:] = 0
                dist.all_reduce(g, group=ps.get_data_parallel_group())
                for p in bucket.params:
                    start, end, _ = buf.param_index_map[p]
                    local[p] = g[start - bucket.offset: end - bucket.offset].view(p.shape)
    return gather_full(local, names, ps, tp, NH)


def fsdp_full(names, ps, NH, grads):
    """Megatron-FSDP: every parameter is a DTensor holding an uneven piece of
    the flat buffers (maybe none of a tensor, then its grad is None). The full
    gradient or parameter on every rank: each rank's piece and its offset
    (Megatron-FSDP's own chunk metadata) gathered as objects, because gloo's
    all-gather (and so Megatron-FSDP's gather_uneven_dtensor_to_full_tensor)
    refuses pieces of different sizes."""
    import torch
    import torch.distributed as dist
    from megatron.core.distributed.fsdp.src.megatron_fsdp.uneven_dtensor import gather_and_compute_chunk_metadata

    local = {}
    for p in names:
        t = p.grad if grads else p
        if t is None:
            t = torch.zeros_like(p)
        meta = gather_and_compute_chunk_metadata(t)
        pieces = [None] * dist.get_world_size()
        dist.all_gather_object(pieces, (list(meta.offsets), t.to_local().detach().float().clone()))
        full = torch.zeros(tuple(p.shape))
        for offsets, piece in pieces:
            if piece.numel():
                full[tuple(slice(o, o + n) for o, n in zip(offsets, piece.shape))] = piece
        local[p] = full
    return gather_full(local, names, ps, 1, NH)


def full_params(names, ps, tp, NH, opt=None):
    """The trained parameters. Under bf16-mixed (opt given) the optimizer's
    fp32 main parameters, which it updates, not the model's bf16 weights
    (copies rounded from them): Float16OptimizerWithFloat16Params pairs each
    model parameter with its fp32 copy (float16_groups, fp32_from_float16_groups);
    the DistributedOptimizer holds only this data-parallel rank's range of
    the parameters it has a piece of (shard_fp32_from_float16_groups beside
    model_float16_groups), so every parameter's ranges, disjoint, are summed
    over the data-parallel group, with a count that must cover each element once."""
    import torch
    import torch.distributed as dist

    local = {p: p for p in names}
    if opt is not None:
        whole, ranges = {}, {}
        for o in getattr(opt, "chained_optimizers", [opt]):
            if hasattr(o, "shard_fp32_from_float16_groups"):
                for model_group, main_group in zip(o.model_float16_groups, o.shard_fp32_from_float16_groups):
                    for p, main in zip(model_group, main_group):
                        ranges[p] = (o._get_model_param_range_map(p)["param"], main)
            else:
                for model_group, main_group in zip(o.float16_groups, o.fp32_from_float16_groups):
                    for p, main in zip(model_group, main_group):
                        whole[p] = main
        for p in names:  # the same order on every rank
            if p in whole:
                local[p] = whole[p]
            else:  # the DistributedOptimizer's ranges (an error if none covers p)
                both = torch.zeros(2, p.numel())  # the values, and how many ranks gave each element
                if p in ranges:
                    r, main = ranges[p]
                    both[0, r.start:r.end] = main.detach().float()
                    both[1, r.start:r.end] = 1
                dist.all_reduce(both, group=ps.get_data_parallel_group())
                if not torch.equal(both[1], torch.ones(p.numel())):
                    raise RuntimeError(f"bf16-mixed: the optimizer's fp32 main parameters do not cover {names[p]} once")
                local[p] = both[0].view(p.shape)
    return gather_full(local, names, ps, tp, NH)


def main():
    ap = common.parser(__doc__, STRATEGIES, FAULTS)
    args = ap.parse_args()
    common.check_framework(ap, "megatron-core")
    ex = common.preflight(ap, args, allow_moe=True)
    s, w = args.strategy, args.world
    moe_checks(ap, ex, s, w)
    need = FAULT_STRATEGIES.get(args.fault)
    if need and s != need:
        ap.error(f"--fault {args.fault} applies to --strategy {need}")
    if s in ("tp", "tp-sp") and (ex.NH % w or ex.V % w or (4 * ex.C) % w):
        ap.error(f"{s} at world {w}: the world must divide the heads ({ex.NH}), vocab and MLP width")
    if s == "tp-sp" and ex.seq % w:
        ap.error(f"tp-sp at world {w}: the world must divide the sequence ({ex.seq})")
    stages = w * (2 if s == "pp-interleaved" else 1)
    if s.startswith("pp") and ex.L % stages:
        ap.error(f"{s} at world {w}: {stages} stages must divide the model's {ex.L} layers")
    dp = w if s in ("dp", "distopt", "fsdp", "moe-ep") else 1
    micro = pp_microbatches(ex, s, w)
    if ex.batch % (dp * micro):
        ap.error(f"{dp} replicas x {micro} microbatches do not divide the batch of {ex.batch}")
    common.spawn(worker, args)


if __name__ == "__main__":
    main()
