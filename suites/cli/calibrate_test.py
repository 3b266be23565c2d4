#!/usr/bin/env python3
"""parabench calibrate (#16) end to end: a short calibration writes a profile
`plan --machine` reads, with GEMM tables, collective fits and a training
shape's figures the plan then uses (a figure typed by hand overrides them);
the plan of the calibrated shape's single-rank step is the step calibrate
measured (compute_scale makes it so). Usage: calibrate_test.py PARABENCH WORKDIR"""
import os
import re
import subprocess
import sys

pb, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
prof = os.path.join(work, "calibrated.toml")


def run(*args):
    p = subprocess.run([pb, *args], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"parabench {' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p.stdout


out = run("calibrate", "--seconds", "0.05", "--model", "tiny", "small", "--out", prof)
text = open(prof).read()
for table in ["machine.gemm.fp32", "machine.gemm.bf16", "machine.gemm.fp64", "machine.collective.all_reduce",
              "machine.collective.send_recv", "machine.shape"]:
    assert f"[{table}]" in text, f"no [{table}] in the profile"
shape = text[text.index("[machine.shape]"):]
figures = {}
for key in ["work", "compute_scale", "corun_scale", "shared_mem_bw_GBps", "optimizer_mem_bw_GBps",
            "buffer_mem_bw_GBps", "mem_bw_GBps"]:
    m = re.search(rf"^{key} = \[([^\]]*)\]$", shape, re.M)
    assert m, f"no {key} in [machine.shape]"
    figures[key] = [float(v) for v in m.group(1).split(",")]
    assert len(figures[key]) == 2 and all(v > 0 for v in figures[key]), f"{key} = {figures[key]}"
assert figures["work"][0] < figures["work"][1], "the shapes are not in ascending work"
assert ('workload = ["tiny, seq 16, 2 microbatches of 4, fp32", "small, seq 16, 2 microbatches of 4, fp32"]'
        in shape), "the profile does not name its shapes in order:\n" + shape

# Each calibrated step plans at the time calibrate measured for it.
steps = [float(v) for v in re.findall(r"single-rank step\s+([0-9.e+-]+) ms measured", out)]
assert len(steps) == 2, "calibrate did not report its two single-rank steps:\n" + out
planned = []
for model, measured_ms in zip(["tiny", "small"], steps):
    plan = run("plan", "--model", model, "--seq", "16", "--precision", "fp32", "--microbatch-size", "4",
               "--global-batch", "8", "--machine", prof)
    step = re.search(r"^\s+step\s+([0-9.e+-]+) s$", plan, re.M)
    assert step, plan
    planned.append(1e3 * float(step.group(1)))
    assert abs(planned[-1] / measured_ms - 1) < 2e-3, f"{model}: planned {planned[-1]} ms, measured {measured_ms} ms"
measured_ms, planned_ms = steps[0], planned[0]

# Two data-parallel ranks on the node: the corun factor (when it is not 1).
dp2 = run("plan", "--model", "tiny", "--seq", "16", "--precision", "fp32", "--microbatch-size", "4",
          "--global-batch", "16", "--dp", "2", "--machine", prof)
if abs(figures["corun_scale"][0] - 1) > 1e-6:
    assert "ranks of a node computing side by side" in dp2, dp2

big = ["plan", "--model", "gpt2-124m", "--dp", "2", "--machine", prof]
assert "tokens/s" in run(*big)
assert "the profile's GEMM table at this rank's shapes" in run(*big)
assert "GEMM table" not in run(*big, "--gemm-efficiency", "0.5")

# --model none: the machine alone (no shape figures).
run("calibrate", "--seconds", "0.05", "--model", "none", "--out", prof)
text = open(prof).read()
assert "[machine.shape]" not in text and "compute_scale" not in text, text
print("calibrate: ok (tiny step measured %.4g ms, planned %.4g ms)" % (measured_ms, planned_ms))
