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
    mode = CudaToCpu()
    mode.__enter__()
    return mode
