"""The CPU shim that lets Megatron-Core 0.16.1 train on CPU over gloo. No
flag takes Megatron-Core off CUDA: its layers, buffers, pipeline p2p and
optimizer allocate with `device=torch.cuda.current_device()` or a literal
`device='cuda'`, its optimizers accept parameters only by their CUDA type
names, and its RNG tracker forks the CUDA generator. Each patch below says
what it replaces and why; none changes what Megatron computes (the adapter
runs with transformer_impl="local", use_cpu_initialization=True, every
fusion off, and no dropout). install() patches the calling process only."""

import torch
from torch.overrides import TorchFunctionMode


def _is_cuda(device):
    # A bare int as a device means that CUDA device.
    if isinstance(device, int) and not isinstance(device, bool):
        return True
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, torch.device) and device.type == "cuda"


_CUDA_TYPE = {"torch.FloatTensor": "torch.cuda.FloatTensor", "torch.HalfTensor": "torch.cuda.HalfTensor",
              "torch.BFloat16Tensor": "torch.cuda.BFloat16Tensor"}


class CudaToCpu(TorchFunctionMode):
    """Every torch call made while the mode is active:
    - a `device=` naming CUDA (the literal 'cuda' in clip_grads, the
      optimizers and the schedules' token counters) allocates on the CPU;
    - `t.cuda(...)` and `t.to(<cuda device>)` leave the tensor on the CPU;
    - `t.type()` (no argument) names a CPU float tensor by its CUDA name:
      Megatron's optimizers (optimizer.py, distrib_optimizer.py) and
      clip_grads check `param.type() == 'torch.cuda.FloatTensor'` (or the
      bf16/fp16 names) and raise for anything else."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if "device" in kwargs and _is_cuda(kwargs["device"]):
            kwargs["device"] = "cpu"
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.to and len(args) > 1 and _is_cuda(args[1]):
            args = (args[0], "cpu") + tuple(args[2:])
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:
            name = func(*args)
            return _CUDA_TYPE.get(name, name)
        return func(*args, **kwargs)


class _NoStream:
    """Stands in for torch.cuda.Stream/Event: DistributedDataParallel makes a
    communication stream for overlapped reduction; on CPU every collective
    runs on gloo's own threads, so there is nothing to order."""

    def __init__(self, *args, **kwargs):
        pass

    def wait_stream(self, *args):
        pass

    def wait_event(self, *args):
        pass

    def record(self, *args):
        pass

    def record_event(self, *args):  # Megatron-FSDP's buffers: an event waited on later
        return _NoStream()

    def wait(self, *args):
        pass

    def synchronize(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def install():
    """Patches this process and enters the CudaToCpu mode for good."""
    import contextlib

    from megatron.core.tensor_parallel import random as mrandom

    # torch.cuda.current_device() raises without a CUDA driver; Megatron uses
    # its value as a device (`device=torch.cuda.current_device()`, also in
    # the backward of its tensor-parallel autograd functions, where no torch
    # function mode is active): the CPU.
    torch.cuda.current_device = lambda: torch.device("cpu")
    # Streams and events: see _NoStream. torch.cuda.stream(s) is a context.
    torch.cuda.Stream = _NoStream
    torch.cuda.Event = _NoStream
    torch.cuda.current_stream = lambda *a, **k: _NoStream()
    torch.cuda.stream = lambda *a, **k: contextlib.nullcontext()
    torch.cuda.synchronize = lambda *a, **k: None
    # The RNG tracker (tensor_parallel/random.py) saves, seeds and restores
    # the CUDA generator around model-parallel regions (dropout, init); here
    # it keeps the CPU generator's state instead. With no dropout and the
    # weights loaded from the export, no random number reaches the result.
    torch.cuda.get_rng_state = lambda *a, **k: torch.get_rng_state()
    torch.cuda.manual_seed = lambda seed: torch.manual_seed(seed)
    mrandom._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()
    mrandom._set_cuda_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    # MoE: moe_utils imports its fused ops, te_general_gemm among them, from
    # Transformer Engine in a try block; without TE the name is never bound,
    # and the router's gating (RouterGatingLinearFunction, forward and
    # backward) tests `te_general_gemm is not None` and raises NameError.
    # Bound to None, what the test expects without TE: the gating runs its
    # own torch.mm in the router dtype.
    from megatron.core.transformer.moe import moe_utils

    if not moe_utils.HAVE_TE:
        moe_utils.te_general_gemm = None
    # MoE's alltoall dispatcher: maybe_move_tensor_to_cpu turns the split
    # sizes into host numpy arrays only for a CUDA tensor (`tensor.is_cuda`);
    # a CPU tensor stays a tensor, which all_to_all_single refuses as split
    # sizes. On the CPU the tensor is already on the host: the same numpy
    # conversion (as_numpy) as the CUDA path.
    from megatron.core.transformer.moe import token_dispatcher

    def host_tensor(tensor, as_numpy=False, record_stream=False):
        if torch.is_tensor(tensor) and as_numpy:
            return tensor.numpy()
        return tensor

    moe_utils.maybe_move_tensor_to_cpu = host_tensor
    token_dispatcher.maybe_move_tensor_to_cpu = host_tensor
    mode = CudaToCpu()
    mode.__enter__()
    return mode
