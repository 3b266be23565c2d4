"""Reading a parabench export and writing a parabench trace (results/TRACE.md,
format v1) with PyTorch alone: safetensors is simple enough to read and write
by hand (an 8-byte little-endian header length, a JSON header, raw data), so
the adapter needs no package beyond torch."""

import json
import math
import os
import struct

import torch

EXPORT_FORMAT = "parabench-export-v1"
TRACE_FORMAT = "parabench-trace-v2"

_DTYPES = {"F64": torch.float64, "F32": torch.float32, "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32}
_NAMES = {v: k for k, v in _DTYPES.items()}


class ExportError(Exception):
    pass


def read_safetensors(path):
    """Returns (metadata dict, {name: tensor}) of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ExportError(f"{path}: shorter than a safetensors header")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise ExportError(f"{path}: header length {n} beyond the file")
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    data = memoryview(raw)[8 + n :]
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        dt = _DTYPES[info["dtype"]]
        t = torch.frombuffer(bytearray(data[b:e]), dtype=dt) if e > b else torch.empty(0, dtype=dt)
        out[name] = t.reshape(info["shape"])
    return meta, out


def write_safetensors(path, tensors, metadata):
    """Writes {name: tensor} (in the dict's order) with string metadata."""
    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    blobs, off = [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        b = t.reshape(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def parse_toml_config(text):
    """The export's config: flat TOML tables of numbers, strings and booleans."""
    try:
        import tomllib

        return tomllib.loads(text)
    except ImportError as e:  # Python < 3.11
        raise ExportError("Python 3.11 or later is needed (tomllib)") from e


class Export:
    """A parabench export directory: config, init weights, batches."""

    def __init__(self, directory, allow_moe=False):
        init_path = os.path.join(directory, "init.safetensors")
        batch_path = os.path.join(directory, "batch.safetensors")
        for p in (init_path, batch_path):
            if not os.path.isfile(p):
                raise ExportError(f"{p} is missing (write the export with parabench export)")
        meta, self.init = read_safetensors(init_path)
        if meta.get("format") != EXPORT_FORMAT:
            raise ExportError(f"{init_path}: format {meta.get('format')!r}, expected {EXPORT_FORMAT!r}")
        self.config_hash = meta["config_hash"]
        self.config = parse_toml_config(meta["config"])
        self.precision = meta["precision"]
        _, b = read_safetensors(batch_path)
        self.inputs, self.targets = b["inputs"].long(), b["targets"].long()
        m, t, o = self.config["model"], self.config["train"], self.config["optim"]
        self.V, self.C, self.L, self.NH = m["vocab"], m["channels"], m["layers"], m["heads"]
        self.moe = self.config.get("moe", {})
        if self.moe.get("experts", 0) and not allow_moe:
            raise ExportError("the adapter trains dense models only (the export's has experts)")
        self.steps, self.batch, self.seq, self.micro = t["steps"], t["batch"], t["seq"], t["microbatches"]
        self.optim = o

    def lr_at(self, step):
        """parabench's schedule (reference/train_config.cc lr_at), 1-based step."""
        o = self.optim
        if o["warmup"] > 0 and step <= o["warmup"]:
            return o["lr"] * step / o["warmup"]
        if o["schedule"] == "constant":
            return o["lr"]
        span = max(1, self.steps - o["warmup"])
        progress = min(1.0, (step - o["warmup"]) / span)
        return o["min_lr"] + 0.5 * (o["lr"] - o["min_lr"]) * (1 + math.cos(math.pi * progress))


def write_trace(path, export, *, precision, framework, strategy, mesh, microbatches, losses, grad_norms, lrs,
                grads1, params, note=None, peak_memory=None, comm_bytes=None, moe_tokens=None, moe_aux=None):
    """grads1 / params: {parameter name: full tensor} in the export's names.
    moe_tokens (steps, MoE layers, experts) and moe_aux (steps, MoE layers):
    a mixture of experts' optional per-step routing (results/TRACE.md)."""
    tensors = {
        "loss": torch.tensor(losses, dtype=torch.float64),
        "grad_norm": torch.tensor(grad_norms, dtype=torch.float64),
        "lr": torch.tensor(lrs, dtype=torch.float64),
    }
    for name in export.init:
        tensors["grads." + name] = grads1[name]
        tensors["params." + name] = params[name]
    if peak_memory is not None:
        tensors["rank.peak_memory_bytes"] = torch.tensor(peak_memory, dtype=torch.int64)
    if comm_bytes is not None:
        tensors["rank.comm_bytes"] = torch.tensor(comm_bytes, dtype=torch.int64)
    if moe_tokens is not None:
        tensors["moe.tokens_per_expert"] = torch.tensor(moe_tokens, dtype=torch.int64)
    if moe_aux is not None:
        tensors["moe.aux_loss"] = torch.tensor(moe_aux, dtype=torch.float64)
    meta = {
        "format": TRACE_FORMAT,
        "export_hash": export.config_hash,
        "precision": precision,
        "framework": framework,
        "strategy": strategy,
        "mesh": mesh,
        "microbatches": microbatches,
    }
    if note:
        meta["note"] = note
    write_safetensors(path, tensors, meta)
