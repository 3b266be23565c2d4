"""The torchtitan adapter's CPU shims (scripts/frameworks/tt_train.py). Each
patch says what it replaces and why; no torchtitan code is copied."""


def apply():
    import torch
    import torchtitan.distributed.parallel_dims as pd
    import torchtitan.tools.utils as tu

    # torchtitan.tools.utils picks device_type = the available accelerator
    # or "cuda" when there is none, and builds every DeviceMesh on it
    # (parallel_dims imports the name). Here there is no accelerator: the
    # meshes live on "cpu" (gloo), with torch.cpu as the device module.
    tu.device_type, tu.device_module = "cpu", torch.cpu
    pd.device_type = "cpu"


def sdpa_config():
    """torchtitan's language models take FlexAttention or varlen (both need a
    GPU backward: FlexAttention has no CPU backward). Its own
    ScaledDotProductAttention (causal, no masks) is used instead; every
    sequence of the export is one document, so causal attention is the
    export's attention."""
    from torchtitan.models.common.attention import ScaledDotProductAttention
    return ScaledDotProductAttention.Config()


def sum_reductions(model):
    """torchtitan's apply_fsdp_to_decoder sets FSDP2's gradient divide
    factor, which FSDP2 turns into a reduce-scatter with
    ReduceOp.PREMUL_SUM(1/factor): NCCL has it, gloo refuses it ("Cannot use
    ReduceOp.PREMUL_SUM with Gloo"). FSDP2's own switch makes it reduce with
    a plain SUM and divide afterwards (same average)."""
    from torch.distributed.fsdp import FSDPModule
    for mod in model.modules():
        if isinstance(mod, FSDPModule):
            mod.set_force_sum_reduction_for_comms(True)
