#!/usr/bin/env python3
"""Independent safetensors reader (json + struct only) used by
safetensors_test: prints {"header_len": N, "metadata": {...}, "tensors":
{name: {"dtype", "shape", "values"}}} as JSON, or exits 1 naming the problem.
Checks the layout rules the C++ writer promises: N % 8 == 0 and tensors tile
the data section in header order."""
import json
import struct
import sys

FORMATS = {"F64": ("d", 8), "F32": ("f", 4), "I64": ("q", 8), "I32": ("i", 4), "BF16": ("H", 2)}


def main(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    if n % 8:
        sys.exit(f"header length {n} is not a multiple of 8")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    out = {"header_len": n, "metadata": header.pop("__metadata__", {}), "tensors": {}}
    at = 0
    for name, t in header.items():
        code, size = FORMATS[t["dtype"]]
        begin, end = t["data_offsets"]
        count = 1
        for d in t["shape"]:
            count *= d
        if begin != at or end - begin != count * size:
            sys.exit(f"{name}: offsets [{begin}, {end}) do not follow at {at} with {count} x {size} bytes")
        at = end
        values = list(struct.unpack("<%d%s" % (count, code), data[begin:end]))
        if t["dtype"] == "BF16":
            values = [struct.unpack("<f", struct.pack("<I", v << 16))[0] for v in values]
        out["tensors"][name] = {"dtype": t["dtype"], "shape": t["shape"], "values": values}
    if at != len(data):
        sys.exit(f"{len(data) - at} trailing data bytes")
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
