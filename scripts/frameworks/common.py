"""What the DeepSpeed and Megatron-Core adapters share: the command line, the
checks before any process starts (the framework installed at its pinned
version, the export readable, the output writable), the gloo process group,
and the trace (written by scripts/torch/pbtrace.py, whose export reader and
trace writer, and whose canonical model in scripts/torch/train.py, are
imported, not copied). docs/frameworks.md describes the adapters."""

import argparse
import importlib.metadata
import os
import re
import resource
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch"))
import pbtrace  # noqa: E402


def pinned_version(package):
    """The version requirements.txt pins for `package`."""
    with open(os.path.join(HERE, "requirements.txt")) as f:
        for line in f:
            m = re.match(rf"^{re.escape(package)}==(\S+)", line.strip())
            if m:
                return m.group(1)
    raise RuntimeError(f"requirements.txt pins no {package}")


def check_framework(ap, package):
    """Exit 2 naming the package when it is missing or not the pinned version."""
    want = pinned_version(package)
    try:
        have = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        ap.error(f"{package} is not installed in {sys.executable} (install the environment with "
                 f"scripts/frameworks/setup.sh and run its python)")
    if have != want:
        ap.error(f"{package} {have} is outside the pinned version {want} (scripts/frameworks/requirements.txt)")
    return have


def parser(doc, strategies, faults):
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--export", required=True, help="the directory parabench export wrote")
    ap.add_argument("--strategy", required=True, choices=strategies)
    ap.add_argument("--world", type=int, default=2, help="processes (2 to 8)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16-mixed"])
    ap.add_argument("--fault", default="none", choices=faults, help="a deliberate bug (the trace must fail verify)")
    ap.add_argument("--out", required=True, help="the trace file to write")
    return ap


def preflight(ap, args, allow_moe=False):
    """The export read and the output writable, before a process starts."""
    if not 1 <= args.world <= 8:
        ap.error("--world must be 1 to 8")
    try:
        ex = pbtrace.Export(args.export, allow_moe=allow_moe)
    except (pbtrace.ExportError, OSError, KeyError, ValueError, struct.error) as e:
        ap.error(f"--export {args.export}: {e}")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK) or os.path.isdir(args.out):
        ap.error(f"--out {args.out}: cannot write a file there")
    return ex


# "spawn" (fresh processes, each importing the framework) unless a driver
# that imported the framework once runs many adapters in one process
# (scripts/frameworks/seeds.py sets "fork": the ranks then start with the
# framework imported and nothing initialized, as the parent never trains).
START_METHOD = "spawn"


def spawn(worker, args):
    """Runs worker(rank, args) in args.world processes joined in one gloo
    group (torch.distributed's env:// rendezvous, which both frameworks read)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_run, args=(worker, args, port), nprocs=args.world, join=True, start_method=START_METHOD)
    print(f"wrote {args.out}")


def _run(rank, worker, args, port):
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(args.world), LOCAL_WORLD_SIZE=str(args.world))
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    try:
        worker(rank, args)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # As scripts/torch/train.py: leave without the interpreter's teardown,
    # where gloo's threads can abort a process whose work succeeded.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class Recorder:
    """What rank 0 writes: per-step loss, norm and lr; step-1 gradients and
    final parameters (full tensors, the export's names)."""

    def __init__(self):
        self.losses, self.norms, self.lrs = [], [], []
        self.grads1, self.params = None, None
        self.moe_tokens, self.moe_aux = None, None  # a mixture of experts: per step, per MoE layer

    def step(self, loss, norm, lr):
        self.losses.append(float(loss))
        self.norms.append(float(norm))
        self.lrs.append(float(lr))


def write(rank, args, ex, rec, *, framework, mesh, microbatches, script):
    """Gathers each rank's peak RSS and writes the trace on rank 0."""
    import torch.distributed as dist

    rss = [None] * dist.get_world_size()
    dist.all_gather_object(rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    if rank != 0:
        return
    strategy = args.strategy + ("" if args.fault == "none" else "." + args.fault)
    if args.precision == "bf16-mixed":
        strategy += ".bf16"
    pbtrace.write_trace(
        args.out, ex, precision=args.precision, framework=framework, strategy=strategy, mesh=mesh,
        microbatches=microbatches, losses=rec.losses, grad_norms=rec.norms, lrs=rec.lrs, grads1=rec.grads1,
        params=rec.params, peak_memory=rss, moe_tokens=rec.moe_tokens, moe_aux=rec.moe_aux,
        note=f"scripts/frameworks/{script} --strategy {args.strategy} --world {args.world} "
             f"--precision {args.precision} --fault {args.fault}; rank.peak_memory_bytes: peak RSS per process")
