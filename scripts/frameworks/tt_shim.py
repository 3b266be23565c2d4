"""The torchtitan adapter's CPU shims (scripts/frameworks/tt_train.py). Each
patch says what it replaces and why; no torchtitan code is copied."""

import os


class CpuDeviceModule:
    """torch.cpu with what torchtitan asks of a device module beyond it (its
    metrics' DeviceMemoryMonitor: a name, a capacity, memory statistics,
    cache calls). Memory statistics: none (an empty dict, which torchtitan
    reports as -1); the trace's memory is each process's peak RSS."""

    def __getattr__(self, name):  # set_device, device_count, synchronize
        import torch
        return getattr(torch.cpu, name)

    @staticmethod
    def current_device():
        # torch.cpu.current_device() answers "cpu"; torchtitan passes it as
        # barrier(device_ids=[...]), which takes integers (gloo ignores them).
        return 0

    @staticmethod
    def get_device_name(device=None):
        return "cpu"

    @staticmethod
    def get_device_properties(device=None):
        import types
        return types.SimpleNamespace(name="cpu", total_memory=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))

    @staticmethod
    def memory_stats(device=None):
        return {}

    @staticmethod
    def reset_peak_memory_stats(device=None):
        pass

    @staticmethod
    def empty_cache():
        pass


def apply():
    """Before any other torchtitan import. torchtitan.tools.utils picks, at
    import, device_type = the available accelerator or "cuda" when there is
    none, and device_module = its torch module; the Trainer, the metrics,
    parallel_dims and distributed.utils import both names (every DeviceMesh,
    the local device, the backend are built on them). Here there is no
    accelerator: torch's accelerator query answers "cpu" while that module
    is imported (then restored), and the device module is CpuDeviceModule."""
    import sys

    import torch._utils

    if "torchtitan.tools.utils" not in sys.modules:
        query = torch._utils._get_available_device_type
        torch._utils._get_available_device_type = lambda: "cpu"
        try:
            import torchtitan.tools.utils  # noqa: F401
        finally:
            torch._utils._get_available_device_type = query
    import torchtitan.tools.utils as tu
    tu.device_type, tu.device_module = "cpu", CpuDeviceModule()
    import torchtitan.distributed.parallel_dims as pd
    assert pd.device_type == "cpu", "tt_shim.apply() must run before torchtitan's other modules are imported"


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
