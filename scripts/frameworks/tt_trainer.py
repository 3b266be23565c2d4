"""torchtitan's own Trainer (torchtitan.trainer.Trainer) driven on parabench's
llama export: the pieces tt_train.py hands it. docs/frameworks.md describes
the adapter.

The Trainer's config comes from torchtitan's ConfigManager: this module is
the config registry it imports (`--module tt_trainer --config
parabench_export`), and the strategy is given as its command-line overrides
(`--parallelism.data_parallel_shard_degree 2`, ...). `parabench_export()`
writes the export's model, optimizer, schedule, clipping and batch into
torchtitan's own config classes; the components torchtitan lets a user swap
(dataloader, tokenizer, loss) are ours where the export needs it: a
dataloader that yields the export's fixed batches and a tokenizer that
passes token ids through (the export is token ids already). The trace is
recorded by hooks (wrappers that call the original) around the Trainer's
gradient clipping and its metrics logging; no torchtitan code is copied.
"""

import dataclasses
import os

EXPORT_ENV = "PARABENCH_TT_EXPORT"  # the export directory parabench_export() reads
FAULT_ENV = "PARABENCH_TT_FAULT"  # the adapter's --fault (local-mean: the loss component below)


def _export():
    import common
    return common.pbtrace.Export(os.environ[EXPORT_ENV])


def parabench_export():
    """The config registry function ConfigManager calls: a Trainer.Config
    whose every number comes from the export."""
    from torchtitan.components.loss import CrossEntropyLoss
    from torchtitan.components.metrics import MetricsProcessor
    from torchtitan.components.optimizer import LRSchedulersContainer, OptimizersContainer, ParamGroupConfig
    from torchtitan.config import CommConfig, CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.trainer import Trainer

    ex = _export()
    o = ex.optim
    adamw = {"lr": o["lr"], "betas": (o["beta1"], o["beta2"]), "eps": o["eps"]}
    return Trainer.Config(
        model_spec=model_spec(ex),
        hf_assets_path="",
        dump_folder=os.environ.get("PARABENCH_TT_DUMP", "./outputs"),
        tokenizer=PassThroughTokenizer.Config(vocab=ex.V),
        dataloader=ExportBatches.Config(dataset_path=os.environ[EXPORT_ENV]),
        loss=(LocalMeanLoss.Config() if os.environ.get(FAULT_ENV) == "local-mean"
              else CrossEntropyLoss.Config(global_vocab_size=ex.V)),
        # The export's AdamW: weight decay on matrices, none on the norms'
        # weights (the model's only vectors), first match wins.
        optimizer=OptimizersContainer.Config(implementation="for-loop", param_groups=[
            ParamGroupConfig(pattern=r"norm\.weight$", optimizer_name="AdamW",
                             optimizer_kwargs={**adamw, "weight_decay": 0.0}),
            ParamGroupConfig(pattern=r".*", optimizer_name="AdamW",
                             optimizer_kwargs={**adamw, "weight_decay": o["weight_decay"]}),
        ]),
        lr_scheduler=lr_scheduler_config(ex, LRSchedulersContainer),
        training=TrainingConfig(
            local_batch_size=ex.batch, seq_len=ex.seq, steps=ex.steps,
            # The export's clip; 0 (none) is an infinite max_norm for
            # torchtitan (a max_norm of 0 would zero every gradient).
            max_norm=o["clip"] if o["clip"] > 0 else float("inf"),
            dtype="float32", mixed_precision_param="float32",
            # CUDA graphs: no CPU backend, and the config refuses them under PP.
            disable_cuda_graphs=True),
        # The DTensor backend the model-parallel axes use on CPU (the default
        # spmd_types backend is not needed for these strategies).
        parallelism=ParallelismConfig(spmd_backend="partial_dtensor", data_parallel_shard_degree=1),
        compile=CompileConfig(enable=False),
        # After step 1 the Trainer lowers every group's timeout to 100 s; on a
        # loaded 2-core machine a step can take longer.
        comm=CommConfig(train_timeout_seconds=1800),
        activation_checkpoint=None,  # the export's model recomputes nothing
        metrics=MetricsProcessor.Config(log_freq=1),  # every step's loss and norm reach the hook
    )


def lr_scheduler_config(ex, LRSchedulersContainer):
    """torchtitan's warmup-stable-decay schedule set to the export's.

    The export (pbtrace.Export.lr_at): a linear warmup over optim.warmup
    steps, then cosine from lr to min_lr, or constant. torchtitan's
    scheduler holds one step at full lr after the warmup (its "virtual
    step") before decaying, so the export's cosine, which decays from the
    first step after the warmup, is torchtitan's schedule one step ahead:
    with no warmup the adapter steps torchtitan's scheduler once before
    training (see prestep_scheduler). A cosine after a warmup has no
    torchtitan equivalent: tt_train.py refuses it."""
    o = ex.optim
    if o["schedule"] == "constant":
        return LRSchedulersContainer.Config(warmup_steps=o["warmup"], decay_type="linear", min_lr_factor=1.0)
    assert o["warmup"] == 0, "refused by tt_train.py"
    return LRSchedulersContainer.Config(warmup_steps=0, decay_type="cosine", min_lr_factor=o["min_lr"] / o["lr"])


def prestep_scheduler(ex):
    return ex.optim["schedule"] != "constant"


def model_spec(ex):
    """torchtitan's llama3 ModelSpec with the export's model config (instead
    of a named flavor) and its parallelize function followed by the gloo
    reduction switch (tt_shim.sum_reductions)."""
    import tt_shim
    import tt_train
    from torchtitan.distributed.pipeline_parallel import pipeline_llm
    from torchtitan.models.llama3.parallelize import parallelize_llama
    from torchtitan.models.llama3.state_dict_adapter import Llama3StateDictAdapter
    from torchtitan.protocols.model_spec import ModelSpec

    def parallelize(model, **kw):
        model = parallelize_llama(model, **kw)
        tt_shim.sum_reductions(model)
        return model

    return ModelSpec(name="llama3", flavor="parabench-export", model=tt_train.build_model(ex),
                     parallelize_fn=parallelize, pipelining_fn=pipeline_llm, post_optimizer_build_fn=None,
                     state_dict_adapter=Llama3StateDictAdapter)


def _classes():
    """The swappable components, defined once torchtitan is importable."""
    import torch
    from torchtitan.components.dataloader import BaseDataLoader
    from torchtitan.components.loss import BaseLoss, cross_entropy_loss
    from torchtitan.components.tokenizer import BaseTokenizer

    class PassThroughTokenizer(BaseTokenizer):
        """The export's batches are token ids: nothing to encode."""

        @dataclasses.dataclass(kw_only=True, slots=True)
        class Config(BaseTokenizer.Config):
            vocab: int = 0

        def __init__(self, config, *, tokenizer_path=None):
            super().__init__()
            self.vocab = config.vocab

        def encode(self, ids, *args, **kwargs):
            return list(ids)

        def decode(self, ids, *args, **kwargs):
            return " ".join(str(i) for i in ids)

        def get_vocab_size(self):
            return self.vocab

    class ExportBatches(BaseDataLoader):
        """Every step's global batch of the export, this data-parallel rank's
        rows, in pieces of the local (or pipeline micro-) batch size the
        Trainer asks for; exhausted after the export's steps."""

        @dataclasses.dataclass(kw_only=True, slots=True)
        class Config(BaseDataLoader.Config):
            positions: bool = False
            """Also yield each token's position (0 .. seq-1: every sequence
            one document), which torchtitan's context-parallel input
            sharding requires."""

        def __init__(self, config, *, dp_world_size, dp_rank, tokenizer, seq_len, local_batch_size,
                     snapshot_every_n_steps=None):
            import common
            ex = common.pbtrace.Export(config.dataset_path)
            per = ex.batch // dp_world_size
            assert per % local_batch_size == 0, (per, local_batch_size)
            self.pieces = []
            for step in range(ex.steps):
                lo = dp_rank * per
                for a in range(lo, lo + per, local_batch_size):
                    x = ex.inputs[step, a:a + local_batch_size].clone()
                    inputs = {"input": x}
                    if config.positions:
                        inputs["positions"] = torch.arange(x.shape[1]).expand(x.shape[0], -1).clone()
                    self.pieces.append((inputs, ex.targets[step, a:a + local_batch_size].clone()))
            self.taken = 0

        def __iter__(self):
            while self.taken < len(self.pieces):
                self.taken += 1
                yield self.pieces[self.taken - 1]

        def state_dict(self):
            return {"taken": self.taken}

        def load_state_dict(self, state_dict):
            self.taken = state_dict["taken"]

    class LocalMeanLoss(BaseLoss):
        """The fault local-mean: each rank's loss the mean over its own tokens
        (the global token count the Trainer passes ignored) while torchtitan's
        FSDP sums the gradients: gradients x the dp size."""

        @dataclasses.dataclass(kw_only=True, slots=True)
        class Config(BaseLoss.Config):
            pass

        def __init__(self, config, *, compile_config=None):
            self.fn = cross_entropy_loss

        def __call__(self, pred, labels, global_valid_tokens=None, **kwargs):
            return self.fn(pred, labels) / labels.numel(), {}

    return PassThroughTokenizer, ExportBatches, LocalMeanLoss


PassThroughTokenizer = ExportBatches = LocalMeanLoss = None


def define():
    """Defines the component classes (after tt_shim.apply(): torchtitan's
    import-time device choice must see the shim first)."""
    global PassThroughTokenizer, ExportBatches, LocalMeanLoss
    if PassThroughTokenizer is None:
        PassThroughTokenizer, ExportBatches, LocalMeanLoss = _classes()


def overrides(strategy, world, precision, ex):
    """The strategy as the Trainer's command-line overrides."""
    p = {
        "fsdp2": ["--parallelism.data_parallel_shard_degree", str(world)],
        "ddp": ["--parallelism.data_parallel_replicate_degree", str(world)],
        "tp-sp": ["--parallelism.tensor_parallel_degree", str(world),
                  "--parallelism.enable_sequence_parallel"],
        "pp": ["--parallelism.pipeline_parallel_degree", str(world),
               "--parallelism.pipeline_parallel_schedule", "1F1B",
               "--parallelism.pipeline_parallel_microbatch_size", str(ex.batch // 2)],
        "pp-interleaved": ["--parallelism.pipeline_parallel_degree", str(world),
                           "--parallelism.pipeline_parallel_schedule", "Interleaved1F1B",
                           "--parallelism.pipeline_parallel_microbatch_size", str(ex.batch // 2)],
        "cp": ["--parallelism.context_parallel_degree", str(world)],
    }[strategy]
    dp = world if strategy in ("fsdp2", "ddp") else 1
    p += ["--training.local_batch_size", str(ex.batch // dp)]  # each replica's rows of the global batch
    if precision == "bf16-mixed":
        p += ["--training.mixed_precision_param", "bfloat16"]
    return p
