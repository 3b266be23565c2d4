#!/usr/bin/env python3
"""The bad-input table (#14): every class of bad input a user can give the CLI,
each case asserting the exit code and the message that names what is wrong.

    bad_input_test.py PARABENCH WORKDIR

Classes (the issue's numbering): 1 preflight on size, 2 zero and -1 are
values, 3 non-finite and overflowing numbers, 4 readers that validate their
files, 5 matrices validated before the first row, 7 minor. Class 6 (a frozen
rank) and the MPI halves of class 5 need mpirun and are ctests of their own
(collectives_fail_mpi_stop, cli_mpi_spec_mismatch, cli_mpi_check_names_skipped).
A case passes when the exit code matches, the output matches the regex, no
Python-style traceback or signal shows, and it ends within its time limit.
"""
import csv
import io
import os
import random
import re
import shutil
import subprocess
import sys

EXE, WORK = sys.argv[1], sys.argv[2]
SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BASE = os.path.join(SRC, "results", "baselines", "default", "conformance.csv")


def w(*parts):
    return os.path.join(WORK, *parts)


def write(path, data, mode="w"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as fh:
        fh.write(data)
    return path


def csv_variant(name, edit):
    """A copy of the committed baseline conformance CSV, edited."""
    with open(BASE, newline="") as fh:
        lines = fh.read().split("\n")
    return write(w("csv", name, "conformance.csv"), edit(lines), "w")


def fields(line):
    """A CSV line's fields (the strategy column is quoted: it holds commas)."""
    return next(csv.reader([line]))


def joined(f):
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(f)
    return out.getvalue()


def drop_column(lines, col):
    j = fields(lines[0]).index(col)
    out = []
    for ln in lines[:6]:
        if not ln:
            continue
        f = fields(ln)
        out.append(joined(f[:j] + f[j + 1:]))
    return "\n".join(out) + "\n"


def set_field(lines, col, value, rows=6):
    f = fields(lines[1])
    f[fields(lines[0]).index(col)] = value
    return "\n".join([lines[0], joined(f)] + lines[2:rows]) + "\n"


def st_edit(src, dst, meta=None, f64=None):
    """A copy of a safetensors file with metadata keys replaced and F64
    tensor elements set (f64: {(name, index): value})."""
    import json
    import struct
    with open(src, "rb") as fh:
        raw = fh.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = bytearray(raw[8 + n:])
    header["__metadata__"].update(meta or {})
    for (name, i), v in (f64 or {}).items():
        begin = header[name]["data_offsets"][0] + 8 * i
        data[begin:begin + 8] = struct.pack("<d", v)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(dst, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text + bytes(data))
    return dst


def setup():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    files = {}
    files["no_ratio"] = csv_variant("no_ratio", lambda ls: drop_column(ls, "ratio"))
    files["empty_status"] = csv_variant("empty_status", lambda ls: set_field(ls, "status", ""))
    files["torn"] = csv_variant("torn", lambda ls: "\n".join(ls[:5]) + "\n" + ls[5][:40])
    files["nul"] = csv_variant("nul", lambda ls: "\n".join(ls[:3]) + "\n" + ls[3][:20] + "\0" + ls[3][21:] + "\n")
    files["bad_number"] = csv_variant("bad_number", lambda ls: set_field(ls, "ratio", "fast", 5))
    noise = bytes(random.Random(14).randrange(256) for _ in range(4096))  # a binary file, the same every run
    files["binary"] = write(w("csv", "binary", "results.csv"), noise, "wb")
    files["foreign"] = write(w("csv", "foreign", "data.csv"), "a,b\n1,2\n")
    for k in ("no_ratio", "empty_status", "torn", "nul", "binary", "foreign", "bad_number"):
        files[k + "_dir"] = os.path.dirname(files[k])
    files["good_dir"] = os.path.dirname(csv_variant("good", lambda ls: "\n".join(ls[:6]) + "\n"))

    files["unknown_keys"] = write(w("cfg", "unknown_keys.toml"),
                                  "[train]\n" + "".join("k%d = 1\n" % i for i in range(30000)))
    files["bad_toml"] = write(w("cfg", "bad.toml"), "[train\nsteps = 3\n")
    files["lr_inf"] = write(w("cfg", "lr_inf.toml"), "[optim]\nlr = inf\n")
    files["clip_nan"] = write(w("cfg", "clip_nan.toml"), "[optim]\nclip = nan\n")
    files["steps_str"] = write(w("cfg", "steps_str.toml"), '[train]\nsteps = "three"\n')
    files["huge_world_sweep"] = write(w("cfg", "huge_sweep.toml"), "[sweep]\nworlds = [100000]\n")
    files["huge_model_sweep"] = write(w("cfg", "huge_model_sweep.toml"),
                                      '[sweep]\nworlds = [1]\nmodels = ["gpt2-350m"]\nseq = 1024\nbatch_per_rank = 1024\n')
    files["sweep_cfg"] = write(w("cfg", "sweep.toml"), "[sweep]\nworlds = [1]\nsteps = 1\nwarmup = 0\n")
    files["sweep_cfg_steps"] = write(w("cfg", "sweep2.toml"), "[sweep]\nworlds = [1]\nsteps = 2\nwarmup = 0\n")
    files["sweep_machine_alone"] = write(w("cfg", "sweep_machine.toml"), '[sweep]\nworlds = [1]\nmachine = "a100"\n')
    files["sweep_machine_unknown"] = write(w("cfg", "sweep_machine2.toml"),
                                           '[sweep]\nworlds = [1]\nextrapolate = [64]\nmachine = "z9000"\n')
    files["sweep_device_gpu"] = write(w("cfg", "sweep_gpu.toml"), '[sweep]\nworlds = [1]\ndevice = "gpu"\n')
    files["sweep_device_cuda"] = write(w("cfg", "sweep_cuda.toml"), '[sweep]\nworlds = [1]\ndevice = "cuda"\n')
    files["sweep_extrapolate_zero"] = write(w("cfg", "sweep_extra0.toml"), "[sweep]\nworlds = [1]\nextrapolate = [0]\n")
    files["sweep_extrapolate_huge"] = write(w("cfg", "sweep_extra1.toml"),
                                            "[sweep]\nworlds = [1]\nextrapolate = [99999999999]\n")
    # A finished one-point sweep, to resume with a config that changes its result.
    subprocess.run([EXE, "sweep", "--config", files["sweep_cfg"], "--run-dir", w("sweep_done")], check=True,
                   capture_output=True, timeout=120)
    # Its CSV with a gated figure that is not finite.
    with open(w("sweep_done", "sweep.csv"), newline="") as fh:
        lines = fh.read().split("\n")
    j = lines[0].split(",").index("tokens_per_s")
    f = lines[1].split(",")
    f[j] = "inf"
    files["sweep_done_csv"] = w("sweep_done", "sweep.csv")
    files["inf_tps"] = write(w("csv", "inf_tps", "sweep.csv"), "\n".join([lines[0], ",".join(f)]) + "\n")
    os.makedirs(w("readonly"), exist_ok=True)
    files["bad_machine"] = write(w("cfg", "machine.toml"), '[machine]\nname = "x"\nsource = "s"\n')
    # #50 class 4: an export and its own trace edited to claim what was not run.
    files["ex"] = w("ex")
    subprocess.run([EXE, "export", "--dir", files["ex"]], check=True, capture_output=True, timeout=120)
    golden = os.path.join(files["ex"], "trace.safetensors")
    os.makedirs(w("traces"), exist_ok=True)
    for name, mesh in (("tp4", "tp4"), ("pp", "pp1000000"), ("ep2", "dp2.ep2")):
        files["trace_" + name] = st_edit(golden, w("traces", name + ".safetensors"), meta={"mesh": mesh})
    files["trace_nan_norm"] = st_edit(golden, w("traces", "nan_norm.safetensors"), f64={("grad_norm", 1): float("nan")})
    files["trace_neg_norm"] = st_edit(golden, w("traces", "neg_norm.safetensors"), f64={("grad_norm", 0): -1.0})
    files["trace_bad_lr"] = st_edit(golden, w("traces", "bad_lr.safetensors"), f64={("lr", 2): 0.5})
    files["header_only"] = write(w("csv", "header_only", "conformance.csv"), open(BASE).readline())
    os.makedirs(w("empty_run"), exist_ok=True)
    files["sweep_all_rejected"] = write(w("cfg", "sweep_rejected.toml"),
                                        '[sweep]\nworlds = [2]\nstrategies = ["shard=zero1"]\nscaling = ["strong"]\n'
                                        'global_batch = 3\nsteps = 1\nwarmup = 0\n')
    # #50 class 5: inter-node timings no link has, and a sweep row of NaN step time.
    col = w("col", "collectives.csv")
    subprocess.run([EXE, "collectives", "all_reduce", "--world", "4", "--ranks-per-node", "2", "-b", "4", "-e", "4M",
                    "-f", "4", "-n", "2", "-w", "1", "-F", col], check=True, capture_output=True, timeout=120)
    with open(col, newline="") as fh:
        rows = list(csv.reader(fh))
    t, b = rows[0].index("time_us"), rows[0].index("bytes")
    for name, time in (("fast", lambda x: 1e-300 + x * 1e-310), ("slow", lambda x: 1 + x * 1e290)):
        with open(w("col", name + ".csv"), "w", newline="") as fh:
            out = csv.writer(fh)
            out.writerow(rows[0])
            for r in rows[1:]:
                out.writerow(r[:t] + [repr(time(float(r[b])))] + r[t + 1:])
        files["inter_" + name] = w("col", name + ".csv")
    j = lines[0].split(",").index("step_time_s")
    f = lines[1].split(",")
    f[j] = "nan"
    files["nan_step"] = write(w("csv", "nan_step", "sweep.csv"), "\n".join([lines[0], ",".join(f)]) + "\n")
    files["sweep_no_meshes"] = write(w("cfg", "sweep_no_meshes.toml"), "[sweep]\nmeshes = []\nsteps = 1\nwarmup = 0\n")
    files["fifo"] = w("cfg", "fifo")
    if not os.path.exists(files["fifo"]):
        os.mkfifo(files["fifo"])
    return files


def cases(F):
    o = ["--out", w("runs")]
    c = [
        # 1. preflight on size: refused before anything starts, with the figure and the flag
        (1, ["check", "--dp", "1000000"] + o, 2, r"runs 1000000 ranks as threads.*--max-ranks"),
        (1, ["collectives", "--world", "100000"] + o, 2, r"100000 ranks as threads of this process, more than the 1024"),
        (1, ["collectives", "--world", "64", "-b", "1G", "-e", "2G"] + o, 2, r"needs 1\.13 TiB of memory, this machine has"),
        (1, ["schedule", "--pp", "100000", "--microbatches", "100000", "--schedule", "1f1b"], 2,
         r"20000000000 actions\): needs .* TiB of memory"),
        (1, ["train", "--set", "model.channels=100000", "--steps", "1"] + o, 2, r"train custom: needs .* TiB of memory"),
        (1, ["train", "--model", "gpt2-124m", "--batch", "1024", "--seq", "1024", "--steps", "1"] + o, 2,
         r"train gpt2-124m: needs .* TiB of memory.*parabench plan"),
        (1, ["train", "--steps", "1", "--max-memory", "1K"] + o, 2, r"needs .* MiB of memory, the limit is 1\.00 KiB"),
        (1, ["check", "--mesh", "dp2", "--max-ranks", "1"] + o, 2, r"runs 2 ranks as threads.*more than the 1 allowed"),
        (1, ["sweep", "--config", F["huge_world_sweep"]] + o, 2, r"sweep point dp100000 .*100000 ranks as threads"),
        (1, ["sweep", "--config", F["huge_model_sweep"]] + o, 2, r"sweep point dp1 .*gpt2-350m.*needs .* of memory"),
        (1, ["train", "--set", "model.channels=1000000000", "--steps", "1"] + o, 2, r"parameters, more than parabench sizes \(2\^50\)"),
        (1, ["export", "--set", "model.channels=100000", "--dir", w("export")], 2, r"export custom: needs .* TiB"),
        (1, ["collectives", "--max-memory", "0"] + o, 2, r"--max-memory: must be > 0"),
        (1, ["collectives", "--max-memory", "lots"] + o, 2, r"--max-memory: 'lots' is not a size"),
        (1, ["train", "--max-ranks", "0"] + o, 2, r"--max-ranks"),
        # 2. zero and -1 are values, refused naming the flag
        (2, ["train", "--steps", "0"] + o, 2, r"--steps: Value 0 not in range"),
        (2, ["train", "--batch", "0"] + o, 2, r"--batch: Value 0 not in range"),
        (2, ["train", "--seq", "0"] + o, 2, r"--seq: Value 0 not in range"),
        (2, ["train", "--dp", "0"] + o, 2, r"--dp: Value 0 not in range"),
        (2, ["train", "--threads", "0"] + o, 2, r"--threads: Value 0 not in range"),
        (2, ["train", "--lr", "0"] + o, 2, r"--lr: .*must be a finite number > 0"),
        (2, ["train", "--seed", "-1"] + o, 2, r"--seed: Value -1 not in range"),
        (2, ["train", "--microbatches", "-1"] + o, 2, r"--microbatches: Value -1 not in range"),
        (2, ["train", "--config", ""] + o, 2, r"--config: must not be empty"),
        (2, ["train", "--out", ""], 2, r"--out: must not be empty"),
        (2, ["plan", "--model", "tiny", "--seq", "0"], 2, r"--seq: Value 0 not in range"),
        (2, ["plan", "--model", "tiny", "--dp", "0"], 2, r"--dp: Value 0 not in range"),
        (2, ["schedule", "--pp", "2", "--microbatches", "4", "--schedule", "2bw", "--steps", "0"], 2, r"--steps: Value 0 not in range"),
        (2, ["schedule", "--pp", "0", "--microbatches", "4", "--schedule", "1f1b"], 2, r"--pp.*must be >= 1"),
        (2, ["check", "--steps", "0"] + o, 2, r"--steps"),
        (2, ["collectives", "-n", "0"] + o, 2, r"-n/--iters: must be >= 1"),
        # 3. non-finite and overflowing numbers, wherever a number is read
        (3, ["train", "--lr", "inf"] + o, 2, r"--lr: .*finite"),
        (3, ["train", "--lr", "nan"] + o, 2, r"--lr: .*finite"),
        (3, ["train", "--config", F["lr_inf"]] + o, 2, r"optim\.lr.*finite"),
        (3, ["train", "--config", F["clip_nan"]] + o, 2, r"optim\.clip.*finite"),
        (3, ["train", "--set", "optim.lr=inf"] + o, 2, r"optim\.lr.*finite"),
        (3, ["train", "--batch", "2000000000"] + o, 2, r"--batch: Value 2000000000 not in range"),
        (3, ["collectives", "-e", "99999999999G"] + o, 2, r"-e/--maxbytes: '99999999999G' is .* EiB, more than any size"),
        (3, ["collectives", "-e", "inf"] + o, 2, r"-e/--maxbytes: 'inf' is not a size"),
        (3, ["collectives", "-b", "nan"] + o, 2, r"-b/--minbytes: 'nan' is not a size"),
        (3, ["collectives", "-e", "1e400"] + o, 2, r"-e/--maxbytes: '1e400' is not a size"),
        (3, ["collectives", "-e", "0x10"] + o, 2, r"-e/--maxbytes: '0x10' is not a size"),
        (3, ["collectives", "-f", "nan"] + o, 2, r"-f/--stepfactor: must be a finite number"),
        (3, ["schedule", "--pp", "2", "--microbatches", "4", "--schedule", "1f1b", "--costs", "1,inf,1"], 2,
         r"--costs: 'inf' is not a finite number"),
        (3, ["schedule", "--pp", "2", "--microbatches", "4", "--schedule", "1f1b", "--p2p", "nan"], 2, r"--p2p: must be a finite"),
        (3, ["plan", "--params", "1e30"], 2, r"--params: must be in \[1, 9e18\)"),
        (3, ["gate", "--baseline", F["good_dir"], "--current", F["good_dir"], "--max-throughput-drop", "nan"], 2,
         r"--max-throughput-drop: must be in \[0, 1\)"),
        (3, ["train", "--config", F["steps_str"]] + o, 2, r"train\.steps: expected an integer"),
        # 4. gates, reports and resumes validate their files (file, line, column)
        (4, ["gate", "--baseline", F["good_dir"], "--current", F["no_ratio_dir"]], 2, r"conformance\.csv.*ratio"),
        (4, ["gate", "--baseline", F["good_dir"], "--current", F["empty_status_dir"]], 2, r"conformance\.csv:2: .*status"),
        (4, ["gate", "--baseline", F["good_dir"], "--current", F["torn"]], 2, r"conformance\.csv:6: truncated last row"),
        (4, ["gate", "--baseline", F["good_dir"], "--current", F["nul"]], 2, r"conformance\.csv:4: NUL byte"),
        (4, ["gate", "--baseline", F["good_dir"], "--current", F["bad_number"]], 2, r"conformance\.csv:2: .*ratio"),
        (4, ["gate", "--baseline", F["no_ratio_dir"], "--current", F["good_dir"]], 2, r"conformance\.csv.*ratio"),
        (3, ["gate", "--baseline", F["sweep_done_csv"], "--current", F["inf_tps"]], 2,
         r"sweep\.csv:2: column 'tokens_per_s': 'inf' is not a measurement"),
        (4, ["report", F["torn_dir"]], 2, r"conformance\.csv:6: truncated last row"),
        (4, ["report", F["nul_dir"]], 2, r"conformance\.csv:4: NUL byte"),
        (4, ["report", F["binary_dir"]], 2, r"results\.csv:\d*:? "),
        (4, ["report", F["foreign_dir"]], 2, r"data\.csv: header 'a,b' is neither a results CSV"),
        (4, ["report", F["good_dir"], "--out", "/proc/parabench-no"], 2, r"--out: cannot create directory"),
        (4, ["report", F["good_dir"], "--out", F["good_dir"] + "/conformance.csv"], 2, r"--out: cannot create directory"),
        (4, ["validate", F["binary"]], 1, r"results\.csv:\d*:? "),
        (4, ["sweep", "--config", F["sweep_cfg"], "--resume", F["good_dir"] + "/conformance.csv"], 2, r"not a sweep CSV"),
        (4, ["sweep", "--config", F["sweep_cfg"], "--resume", F["torn"]], 2, r"not a sweep CSV|truncated"),
        (4, ["sweep", "--config", F["sweep_cfg"], "--resume", w("nothing-here")], 2, r"--resume: no sweep CSV"),
        (4, ["sweep", "--config", F["sweep_machine_alone"], "--run-dir", w("sm1")], 2,
         r"sweep\.machine: only used with sweep\.extrapolate"),
        (4, ["sweep", "--config", F["sweep_machine_unknown"], "--run-dir", w("sm2")], 2, r"z9000"),
        (4, ["sweep", "--config", F["sweep_extrapolate_zero"], "--run-dir", w("sm3")], 2, r"sweep\.extrapolate"),
        (4, ["sweep", "--config", F["sweep_extrapolate_huge"], "--run-dir", w("sm4")], 2, r"sweep\.extrapolate"),
        (4, ["sweep", "--config", F["sweep_cfg_steps"], "--resume", w("sweep_done")], 2,
         r"sweep\.csv:2: --resume: this point \(dp1 shard=none tiny fp32\) was run with other settings"),
        # 5. matrices are validated whole before the first row
        (5, ["check", "--pp", "5", "7", "--run-dir", w("check_pp")], 2, r"more stages than layers"),
        (5, ["check", "--tp", "0"] + o, 2, r"--tp: tensor-parallel sizes must be > 0"),
        (5, ["check", "--ep", "3"] + o, 2, r"--ep: expert-parallel sizes must divide"),
        (5, ["check", "--shard", "foo"] + o, 2, r"--shard: 'foo' is not one of"),
        (5, ["check", "--precision", "fp16"] + o, 2, r"--precision: 'fp16' is not one of"),
        (5, ["check", "--mesh", "dp2.xx"] + o, 2, r"--mesh: 'xx' is not an axis"),
        (5, ["check", "--mesh", "dp2", "--strategy", "shard=zero9"] + o, 2, r"zero9"),
        (5, ["check", "--strategy", "shard=zero1"] + o, 2, r"--strategy: applies to --mesh points"),
        # check on GPUs (#17): a device that is not one, fp64, a backend that moves host memory, no GPU here
        # (on a GPU machine without mpirun the dp2 point is not of the launched world: an empty matrix).
        (5, ["check", "--device", "gpu", "--mesh", "dp2"] + o, 2, r"--device: 'gpu' is not cpu or cuda"),
        (5, ["check", "--device", "cuda", "--mesh", "dp2", "--precision", "fp64"] + o, 2,
         r"--precision fp64: --device cuda runs fp32 and bf16-mixed"),
        (5, ["check", "--device", "cuda", "--mesh", "dp2", "--backend", "local"] + o, 2,
         r"--backend local: --device cuda runs over nccl"),
        (5, ["check", "--mesh", "dp2", "--backend", "nccl"] + o, 2, r"--backend nccl: needs --device cuda"),
        (5, ["check", "--device", "cuda", "--mesh", "dp2"] + o, 2, r"--device cuda: |check: the matrix is empty"),
        # 7. minor: named commands, capped messages, no files left behind
        (7, ["frobnicate"], 2, r"unknown command 'frobnicate' \(commands: "),
        # One vocabulary (docs/cli.md): two flags that give the same thing are refused naming both, never
        # one silently winning (train --mesh dp2 --dp 4 ran dp4; check --mesh dp2 --dp 4 ignored --dp).
        (7, ["train", "--mesh", "dp2", "--dp", "4", "--steps", "1"] + o, 2,
         r"--mesh dp2 and --dp 4: both give the mesh; give one"),
        (7, ["train", "--dp", "2", "--shard", "zero3", "--strategy", "prefetch=2,shard=zero1", "--steps", "1"] + o, 2,
         r"--shard zero3 and --strategy prefetch=2,shard=zero1: both give the data axis's shard"),
        (7, ["check", "--mesh", "dp2", "--dp", "4"] + o, 2,
         r"--dp 4 and --mesh dp2: both give the points to check \(--dp shapes the default matrix\)"),
        (7, ["check", "--spec", "dp2 shard=zero3", "--schedule", "1f1b"] + o, 2,
         r"--schedule 1f1b and --spec dp2 shard=zero3: both give the points to check"),
        (7, ["check", "--spec", "dp2 shard=zero3 x"] + o, 2, r"--spec: 'dp2 shard=zero3 x' is not '<mesh> <strategy>'"),
        (7, ["check", "--spec", "dp2.xx"] + o, 2, r"--spec: 'xx' is not an axis"),
        # Faults are typed at parse: an unknown name is refused there, naming every declared one by axis.
        (7, ["train", "--mesh", "dp2", "--strategy", "faults=bogus", "--steps", "1"] + o, 2,
         r"--strategy\.faults: unknown fault 'bogus' \(data-parallel faults: grad_not_averaged, .*pipeline faults: "),
        (7, ["check", "--mesh", "dp2", "--strategy", "faults=skip_bucket+bogus"] + o, 2,
         r"--strategy\.faults: unknown fault 'bogus' \(data-parallel faults: "),
        (7, ["train", "--mesh", "tp2", "--strategy", "faults=drop_w", "--model", "tiny-tp", "--steps", "1"] + o, 2,
         r"strategy\.faults: 'drop_w' is not a fault of the tensor_parallel strategy \(tensor-parallel faults: "),
        # train.device (#17): a device that is not one, options no device runs, one this machine lacks.
        (7, ["train", "--device", "gpu", "--steps", "1"] + o, 2, r"train\.device: must be one of cpu, cuda; got 'gpu'"),
        # (offload on a device is accepted, #17: what stops it here is the missing GPU)
        (7, ["train", "--device", "cuda", "--model", "tiny-moe", "--mesh", "dp2.ep2", "--strategy",
             "shard=zero2,offload=optimizer", "--steps", "1"] + o, 2, r"train\.device: cuda: "),
        (7, ["train", "--device", "cuda", "--mesh", "dp2", "--backend", "mpi", "--steps", "1"] + o, 2,
         r"--backend mpi: train\.device = cuda runs over nccl"),
        (7, ["train", "--mesh", "dp2", "--backend", "nccl", "--steps", "1"] + o, 2,
         r"--backend nccl: .*needs train\.device = cuda"),
        (7, ["train", "--device", "cuda", "--precision", "fp64", "--steps", "1"] + o, 2,
         r"train\.device: cuda runs fp32 and bf16-mixed"),
        (7, ["train", "--set", "train.device=cuda", "--strategy", "shard=zero2,offload=optimizer", "--steps", "1",
             "--precision", "fp64"] + o, 2, r"train\.device: cuda runs fp32 and bf16-mixed"),
        (7, ["sweep", "--config", F["sweep_device_gpu"]] + o, 2, r"sweep\.device: must be one of cpu, cuda; got 'gpu'"),
        (7, ["sweep", "--config", F["sweep_device_cuda"]] + o, 2, r"sweep\.device: cuda: "),
        (7, ["sweep", "--config", F["sweep_device_cuda"], "--backend", "mpi"] + o, 2,
         r"--backend mpi: sweep\.device = cuda runs over nccl"),
        (7, ["sweep", "--config", F["sweep_cfg"], "--backend", "nccl"] + o, 2, r"--backend nccl: needs sweep\.device = cuda"),
        (7, ["train", "--config", F["unknown_keys"]] + o, 2, r"unknown key 'train\.k0'.*and 29990 more unknown keys"),
        (7, ["train", "--config", F["bad_toml"]] + o, 2, r"bad\.toml"),
        (7, ["train", "--config", w("cfg", "missing.toml")] + o, 2, r"missing\.toml: cannot open"),
        (7, ["train", "--set", "model.nope=1"] + o, 2, r"unknown key 'model\.nope'"),
        (7, ["train", "--set", "optim.lr=abc"] + o, 2, r"optim\.lr: expected a float"),
        (7, ["export", "--dir", "/proc/parabench-no"], 2, r"/proc/parabench-no"),
        (7, ["calibrate", "--seconds", "0", "--out", w("m.toml")], 2, r"--seconds: must be in \(0, 60\]"),
        (7, ["calibrate", "--device", "rocm", "--out", w("m.toml")], 2, r"--device: rocm not in \{cpu,cuda\}"),
        # No GPU here (or not under mpirun where there is one): named, exit 2.
        (7, ["calibrate", "--device", "cuda", "--out", w("m.toml")], 2,
         r"calibrate --device cuda: (no GPU to calibrate: \S.*|run it under mpirun)"),
        (7, ["calibrate", "--device", "cuda", "--model", "tiny", "--out", w("m.toml")], 2,
         r"calibrate --device cuda: (no GPU to calibrate: \S.*|--model calibrate the CPU's figures)"),
        (7, ["calibrate", "--out", w("no", "such", "m.toml")], 2, r"--out .*m\.toml: its directory .* does not exist"),
        (7, ["calibrate", "--out", F["bad_machine"], "--inter-node", F["bad_machine"]], 2, r"--out .*: is also an input"),
        # A directory is not an empty config, and a FIFO is not read (it would block).
        (7, ["train", "--config", w("cfg")], 2, r"config .*cfg: is a directory"),
        (7, ["sweep", "--config", F["fifo"]], 2, r"config .*fifo: is not a regular file"),
        (7, ["gate", "--baseline", F["fifo"], "--current", F["fifo"]], 2, r"fifo: is not a regular file"),
        (7, ["calibrate", "--out", w("m.toml"), "--inter-node", w("no.csv")], 2, r"--inter-node: .*no\.csv: cannot open"),
        (7, ["calibrate", "--out", w("m.toml"), "--inter-node", F["bad_machine"]], 2, r"--inter-node: "),
        (7, ["calibrate", "--out", w("m.toml"), "--model", "bogus"], 2, r"--model: unknown model 'bogus'"),
        (7, ["calibrate", "--out", w("m.toml"), "--model", "tiny", "none"], 2, r"--model: none stands alone"),
        (7, ["calibrate", "--out", w("m.toml"), "--model", "tiny", "tiny"], 2,
         r"--model: tiny and tiny are the same work per block"),
        (7, ["plan", "--against", w("m.toml")], 2, r"--against: needs --machine"),
        (7, ["plan", "--machine", ""], 2, r"--machine: .*empty"),
        (7, ["plan", "--machine", "", "--against", w("no.csv")], 2, r"--machine: .*empty"),
        (7, ["export", "--config", w("cfg"), "--dir", w("export_cfgdir")], 2, r"config .*cfg: is a directory"),
        (7, ["export", "--config", F["fifo"], "--dir", w("export_fifo")], 2, r"config .*fifo: is not a regular file"),
        (7, ["plan", "--machine", "a100", "--against", w("no.csv")], 2, r"--against: .*no\.csv: cannot open"),
        (7, ["plan", "--machine", "a100", "--against", F["bad_machine"]], 2, r"--against: "),
        (7, ["plan", "--machine", "a100", "--model", "tiny", "--against", w("no.csv")], 2,
         r"--against: plans the points of the sweep CSV; give only --machine"),
        (7, ["calibrate", "--out", w("m.toml"), "--model", "small", "--seq", "100000"], 2,
         r"--model small --seq 100000 .*train\.seq: must be <= model\.context"),
        (7, ["calibrate", "--out", w("m.toml"), "--model", "gpt2-124m", "--seq", "1024", "--microbatch-size", "64",
             "--max-memory", "1G"], 2, r"calibration step: needs .* GiB of memory, the limit is 1\.00 GiB"),
        (7, ["calibrate", "--out", w("m.toml"), "--microbatches", "0"], 2, r"--microbatches: Value 0 not in range"),
        (7, ["plan", "--model", "gpt2-124m", "--machine", "nosuch"], 2,
         r"--machine: 'nosuch' is neither a built-in machine \(a100, h100, h200, mi300x, b200, h100-96gb-500w, a100-2022\)"),
        (7, ["plan", "--model", "gpt2-124m", "--machine", F["bad_machine"]], 2, r"machine\.peak_tflops_bf16"),
        # 8. the model family (docs/models.md): bad sizes named, family options on gpt2, axes not there yet
        (8, ["train", "--model", "tiny-llama", "--set", "model.kv_heads=3"] + o, 2,
         r"model\.kv_heads: must divide model\.heads \(8 heads, 3 kv heads\)"),
        (8, ["train", "--model", "tiny-llama", "--set", "model.ffn=0"] + o, 2, r"model\.ffn: must be > 0.*got 0"),
        (8, ["train", "--set", "model.kv_heads=2"] + o, 2,
         r"model\.kv_heads: model 'tiny' is model\.family = gpt2, which takes no kv_heads"),
        (8, ["train", "--model", "tiny-llama", "--set", "model.ffn=98", "--mesh", "tp4"] + o, 2,
         r"mesh\.tp: tp4 does not divide model\.ffn = 98 \(98 % 4 = 2\)"),
        (8, ["train", "--model", "tiny-mixtral", "--mesh", "dp3.ep3", "--batch", "6"] + o, 2,
         r"mesh: ep3 must divide model\.moe\.experts \(4\)"),
        (8, ["train", "--model", "tiny-mixtral", "--mesh", "dp2.ep2.tp3"] + o, 2,
         r"mesh\.tp: tp3 does not divide model\.heads = 8"),
        (8, ["train", "--model", "tiny-mixtral", "--mesh", "cp2.ep4.pp2"] + o, 2,
         r"mesh\.ep: must divide dp\*cp = 2, got 4"),
        (8, ["plan", "--model", "llama3-70b", "--tp", "3"], 2, r"--tp: must divide the llama MLP's ffn \(28672\), got 3"),
        (8, ["plan", "--model", "mixtral-8x7b", "--pp", "2", "--schedule", "zb-h1", "--recompute", "full"], 2,
         r"zb-h1 with recompute=full and a mixture-of-experts model: the engine does not run it"),
    ]
    return c + issue50_cases(F)


def issue50_cases(F):
    """Hardening round two (#50): the reproductions of its classes 3, 4, 5 and 7."""
    o = ["--out", w("runs")]
    return [
        # 3. products of sizes computed checked and refused naming the factors; preflight before any allocation
        (3, ["check", "--mesh", "dp2147483647"] + o, 2,
         r"train\.batch = 8 \(sequences per dp rank\) x 2147483647 \(mesh dp\) is more than 2147483647"),
        (3, ["check", "--mesh", "pp1073741824"] + o, 2,
         r"train\.microbatches = 2 \(per pipeline stage\) x 1073741824 \(mesh pp\) is more than"),
        (3, ["train", "--set", "model.layers=1000000000", "--steps", "1"] + o, 2, r"train custom: needs .* TiB of memory"),
        (3, ["train", "--mesh", "pp2", "--set", "train.batch=1000000000", "--set", "train.microbatches=1000000000",
             "--steps", "1"] + o, 2, r"train pp2 .*needs .* TiB of memory"),
        # 4. no silent pass: meshes the model cannot have, unjudged quantities, checks that compared nothing
        (4, ["verify", "--export", F["ex"], "--trace", F["trace_tp4"]] + o, 2,
         r"metadata 'mesh' is 'tp4': tp4 does not divide the model's 2 heads"),
        (4, ["verify", "--export", F["ex"], "--trace", F["trace_pp"]] + o, 2,
         r"pp1000000 is more stages than the model's 2 layers"),
        (4, ["verify", "--export", F["ex"], "--trace", F["trace_ep2"]] + o, 2,
         r"ep2 needs a mixture-of-experts model; the export's is dense"),
        (4, ["verify", "--export", F["ex"], "--trace", F["trace_nan_norm"]] + o, 1, r"grad_norm: worst ratio .* FAIL"),
        (4, ["verify", "--export", F["ex"], "--trace", F["trace_neg_norm"]] + o, 1, r"grad_norm: .* at step 1 FAIL"),
        (4, ["verify", "--export", F["ex"], "--trace", F["trace_bad_lr"]] + o, 1,
         r"lr: DIFFERS from the export's schedule at step 3"),
        (4, ["gate", "--baseline", os.path.dirname(F["header_only"]), "--current", F["good_dir"]], 2,
         r"--baseline: .*header_only' holds no result rows: nothing to compare"),
        (4, ["gate", "--baseline", F["good_dir"], "--current", F["header_only"]], 2,
         r"--current: .* holds no result rows: nothing to compare"),
        (4, ["report", w("empty_run")], 2, r"empty_run' holds no results CSV \(\*\.csv\): nothing to report"),
        (4, ["sweep", "--config", F["sweep_all_rejected"], "--run-dir", w("sweep_rejected")], 2,
         r"every one of its 1 points was rejected .*nothing measured"),
        # 5. every written figure finite and in range, or refused with nothing written
        (5, ["calibrate", "--seconds", "0.01", "--model", "none", "--out", w("m_fast.toml"), "--inter-node",
             F["inter_fast"]], 2, r"--inter-node: the all_reduce rows of .*fit a bandwidth of inf GB/s"),
        (5, ["calibrate", "--seconds", "0.01", "--model", "none", "--out", w("m_slow.toml"), "--inter-node",
             F["inter_slow"]], 2, r"--inter-node: .*fit a bandwidth of 1\.5e-293 GB/s .*not a link's"),
        # 7. empty or zero values that meant something else
        (7, ["calibrate", "--name", "", "--out", w("m_noname.toml")], 2, r"--name: .*empty"),
        (7, ["sweep", "--config", F["sweep_no_meshes"], "--run-dir", w("sweep_nomesh")], 2,
         r"sweep\.meshes: empty; list meshes"),
        (7, ["train", "--set", "optim.clip=-1", "--steps", "1"] + o, 2, r"optim\.clip: must be >= 0 \(0: no clipping"),
        (5, ["validate", F["nan_step"]], 1, r"sweep\.csv:2: column 'step_time_s': 'nan' is not a measurement"),
        (3, ["export", "--set", "train.steps=100000000", "--dir", w("export_big", "new", "ex")], 2,
         r"export tiny: needs .* GiB of memory"),
    ]


def main():
    F = setup()
    table = cases(F)
    failures = []
    per_class = {}
    for cls, args, rc_want, pattern in table:
        per_class[cls] = per_class.get(cls, 0) + 1
        try:
            p = subprocess.run([EXE] + args, capture_output=True, text=True, errors="replace", timeout=60, cwd=WORK)
            rc, out = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired:
            failures.append((args, "hung (60 s)"))
            continue
        why = []
        if rc != rc_want:
            why.append("exit %d, expected %d" % (rc, rc_want))
        if not re.search(pattern, out, re.S):
            why.append("output does not match /%s/" % pattern)
        if "Traceback" in out or "terminate called" in out or rc < 0:
            why.append("crashed")
        if len(out) > 4000:
            why.append("message of %d bytes" % len(out))
        if why:
            failures.append((args, "; ".join(why) + "\n    output: " + out[:600].replace("\n", "\n    ")))
    # Side effects: the refused matrix wrote no rows; no .tmp files anywhere.
    if os.path.exists(w("check_pp", "conformance.csv")):
        failures.append((["check", "--pp", "5", "7"], "wrote conformance.csv before refusing the matrix"))
    for name in ("m_fast.toml", "m_slow.toml"):
        if os.path.exists(w(name)):
            failures.append((["calibrate", "--out", w(name)], "wrote a profile it refused"))
    # A refused export leaves nothing behind, not even the directories it would have made.
    if os.path.exists(w("export_big")):
        failures.append((["export", "--set", "train.steps=100000000"], "left %s behind" % w("export_big")))
    for root, _, files in os.walk(WORK):
        for f in files:
            if f.endswith(".tmp") or ".tmp." in f:
                failures.append(([os.path.join(root, f)], "a .tmp file left behind"))
    print("%d bad inputs in %d classes (%s)" % (len(table), len(per_class),
                                               ", ".join("class %d: %d" % kv for kv in sorted(per_class.items()))))
    for args, why in failures:
        print("FAIL: parabench %s\n    %s" % (" ".join(args), why))
    print("%d passed, %d failed" % (len(table) - len(failures), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
