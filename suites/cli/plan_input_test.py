#!/usr/bin/env python3
"""plan's inputs (#50 hardening, #48 published tables): each bad input to
`parabench plan` is refused with exit 2 and a message naming what is wrong,
no NaN or infinite figure is ever printed or written, and `plan --validate`
reads a published table strictly.

    plan_input_test.py PARABENCH WORKDIR
"""
import os
import re
import shutil
import subprocess
import sys

EXE, WORK = sys.argv[1], sys.argv[2]
SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
PUBLISHED = os.path.join(SRC, "configs", "published")


def w(*parts):
    return os.path.join(WORK, *parts)


def write(name, data):
    path = w(name)
    with open(path, "w") as fh:
        fh.write(data)
    return path


def table_lines():
    with open(os.path.join(PUBLISHED, "korthikanti_table5.csv")) as fh:
        return fh.read().split("\n")


def edited(name, edit):
    return write(name, "\n".join(edit(table_lines())))


def llama_edited(name, edit):  # the torchtitan table: its model and cp columns
    with open(os.path.join(PUBLISHED, "torchtitan_llama3.csv")) as f:
        return write(name, "\n".join(edit(f.read().split("\n"))))


def header_index(lines):
    return next(i for i, l in enumerate(lines) if l and not l.startswith("#"))


def rename_column(lines, old, new):
    h = header_index(lines)
    lines[h] = ",".join(new if c == old else c for c in lines[h].split(","))
    return lines


def add_column(lines, col, value):
    h = header_index(lines)
    return lines[:h] + [l + "," + (col if i == 0 else value) if l else l for i, l in enumerate(lines[h:])]


def drop_column(lines, col):
    h = header_index(lines)
    j = lines[h].split(",").index(col)
    return lines[:h] + [",".join(f for k, f in enumerate(l.split(",")) if k != j) if l else l for l in lines[h:]]


def clear_field(lines, col):
    h = header_index(lines)
    j = lines[h].split(",").index(col)
    f = lines[h + 1].split(",")
    f[j] = ""
    lines[h + 1] = ",".join(f)
    return lines


def set_field(lines, col, value):
    h = header_index(lines)
    j = lines[h].split(",").index(col)
    f = lines[h + 1].split(",")
    f[j] = value
    lines[h + 1] = ",".join(f)
    return lines


def cases():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    huge = write("huge_fp32.toml", '[machine]\nname = "huge"\nsource = "test"\npeak_tflops_bf16 = 100\n'
                 'peak_tflops_fp32 = 1e300\nmem_bw_GBps = 1000\nbw_intra_GBps = 100\n')
    gpu_nosrc = write("gpu_nosrc.toml", '[machine]\nname = "g"\nsource = "test"\ngpu = true\npeak_tflops_bf16 = 100\n'
                      'mem_bw_GBps = 1000\nbw_intra_GBps = 100\nbw_inter_GBps = 10\nmemory_GB = 80\n'
                      '[machine.sources]\npeak_tflops_bf16 = "a datasheet"\nmem_bw_GBps = "a datasheet"\n'
                      'bw_intra_GBps = "a datasheet"\nmemory_GB = "a datasheet"\n')
    gpu_zero = write("gpu_zero.toml", '[machine]\nname = "g"\nsource = "test"\ngpu = true\npeak_tflops_bf16 = 100\n'
                     'mem_bw_GBps = 0\nbw_intra_GBps = 100\nbw_inter_GBps = 10\nmemory_GB = 80\n')
    gpu_missing = write("gpu_missing.toml", '[machine]\nname = "g"\nsource = "test"\ngpu = true\n'
                        'peak_tflops_bf16 = 100\nbw_intra_GBps = 100\nbw_inter_GBps = 10\nmemory_GB = 80\n')
    torn = write("torn_sweep.csv", "kind,mesh,step_ms\nsweep,dp1,1.0\nsweep,dp2,")
    gpt = ["plan", "--model", "gpt2-124m"]
    return [
        # #50: checked products, exit 2 naming the factors (printed 0.000 GiB of activations)
        (gpt + ["--microbatch-size", str(2 ** 32), "--machine", "a100"], 2,
         r"--microbatch-size 4294967296 x --seq 1024 x layers 12 .* overflow"),
        (gpt + ["--global-batch", str(2 ** 40), "--machine", "a100"], 2, r"--global-batch .*overflow|too many microbatches"),
        # #50: a profile's peak of 1e300 printed -nan and wrote NaN rows
        (gpt + ["--machine", huge, "--precision", "fp32"], 2, r"machine\.peak_tflops_fp32.*1e\+300"),
        (gpt + ["--machine", huge, "--precision", "fp32", "--csv", w("nan_rows.csv")], 2, r"peak_tflops_fp32"),
        # #50: non-finite and denormal rates by flag
        (gpt + ["--peak-tflops", "inf"], 2, r"--peak-tflops .*got inf"),
        (gpt + ["--peak-tflops", "nan"], 2, r"--peak-tflops .*got nan"),
        (gpt + ["--peak-tflops", "100", "--dp", "2", "--bw-intra", "1e-308"], 2, r"--bw-intra .*got 1e-308"),
        (gpt + ["--peak-tflops", "100", "--mem-bw", "1e30"], 2, r"--mem-bw .*got 1e\+30"),
        (gpt + ["--peak-tflops", "100", "--latency-us", "inf"], 2, r"--latency-us"),
        # #50: --against dropped a truncated last row silently
        (["plan", "--machine", "a100", "--against", torn], 2, r"--against: .*torn_sweep\.csv.*(torn|newline|incomplete)"),
        # #48: a GPU profile names a source for every figure, gives every figure, no rate 0
        (gpt + ["--machine", gpu_nosrc], 2, r"machine\.bw_inter_GBps has no source"),
        (gpt + ["--machine", gpu_zero], 2, r"machine\.mem_bw_GBps must be > 0 on a GPU profile"),
        (gpt + ["--machine", gpu_missing], 2, r"machine\.mem_bw_GBps is missing"),
        # #48: the published table reader
        (["plan", "--validate", edited("unknown_col.csv", lambda l: rename_column(l, "assumed", "assumd"))], 2,
         r"unknown column 'assumd'"),
        (["plan", "--validate", edited("missing_col.csv", lambda l: drop_column(l, "source"))], 2,
         r"missing column 'source'"),
        (["plan", "--validate", edited("empty_field.csv", lambda l: clear_field(l, "tp"))], 2,
         r"line \d+: field 'tp' is empty"),
        (["plan", "--validate", edited("bad_metric.csv", lambda l: set_field(l, "metric", "speed"))], 2,
         r"metric 'speed' must be one of"),
        (["plan", "--validate", edited("zero_pub.csv", lambda l: set_field(l, "published", "0"))], 2,
         r"published '0' must be a finite number > 0"),
        (["plan", "--validate", edited("bad_gpus.csv", lambda l: set_field(l, "gpus", "9"))], 2,
         r"gpus 9 is not tp x pp x dp \(8\)"),
        (["plan", "--validate", llama_edited("llama_shape.csv", lambda l: set_field(l, "layers", "33"))], 2,
         r"layers 33 is not model llama3-8b's \(32"),
        (["plan", "--validate", llama_edited("llama_model.csv", lambda l: set_field(l, "model", "llama9"))], 2,
         r"--model: unknown model 'llama9'"),
        (["plan", "--validate", llama_edited("llama_gpus.csv", lambda l: set_field(l, "cp", "2"))], 2,
         r"gpus 8 is not tp x cp x pp x dp \(16\)"),
        (["plan", "--validate", llama_edited("llama_gib.csv", lambda l: set_field(l, "published_gib", "-3"))], 2,
         r"published_gib '-3' must be a finite number > 0 \(or empty"),
        (["plan", "--validate", llama_edited("llama_spg.csv", lambda l: set_field(l, "sp_gather", "kept"))], 2,
         r"sp_gather: 'kept' must be regather .* or saved"),
        (gpt + ["--peak-tflops", "100", "--tp", "2", "--sp", "--sp-gather", "kept"], 2,
         r"--sp-gather: 'kept' must be regather"),
        (["plan", "--validate", edited("no_rows.csv", lambda l: l[:header_index(l) + 1] + [""])], 2,
         r"no rows: a check that compares nothing fails"),
        (["plan", "--validate", edited("bad_machine.csv", lambda l: set_field(l, "machine", "nosuch"))], 2,
         r"row '22B full'.*'nosuch' is neither a built-in machine"),
        (["plan", "--validate", os.path.join(PUBLISHED, "korthikanti_table5.csv"), "--model", "gpt2-124m"], 2,
         r"--validate: plans the rows"),
        (gpt + ["--peak-tflops", "100", "--max-median", "10"], 2, r"--max-median: only with --validate"),
        (gpt + ["--peak-tflops", "100", "--max-memory-error", "5"], 2, r"--max-memory-error: only with --validate"),
        (["plan", "--validate", os.path.join(PUBLISHED, "korthikanti_table5.csv"), "--max-memory-error", "5"], 1,
         r"FAIL: --max-memory-error: no row of .* gives a published peak memory"),
        # --explain: the step's parts, each with its figure and that figure's source
        (["plan", "--layers", "128", "--channels", "25600", "--heads", "160", "--vocab", "51200", "--seq", "2048",
          "--tp", "8", "--pp", "64", "--dp", "6", "--global-batch", "3072", "--recompute", "full", "--machine", "a100",
          "--explain"], 0,
         r"where the step goes.*GEMMs .*GEMMs at [0-9.]+% of 312 TFLOP/s.*mamf-finder.*108 SMs.*memory-bound .*"
         r"1800 GB/s where its kind has none.*88% of peak.*"
         # the memory-bound kinds, each at its rate and with its source (or mem_bw_GBps's)
         r"norms \(fused\) .*GB at 993 GB/s .*layer_norm, huggingface.*softmax .*GB at 1249 GB/s .*02-fused-softmax.*"
         r"loss .*GB at 853 GB/s .*cross_entropy.*elementwise .*GB at 1684 GB/s .*01-vector-add.*"
         r"optimizer .*GB at 1800 GB/s \(mem_bw_GBps\) .*88% of peak.*"
         r"pipeline bubble.*comm pp .*24 GB/s \(inter-node: 1 per node, 8 rails.*"
         r"14 us per ring step.*nccl issue 812.*latency: NCCL's cost model.*NET 14\.0 us.*"
         r"comm tp .*200 GB/s \(intra-node\) \+ 3\.4 us per ring step.*nccl-tests issue 149.*NVLINK 3\.4 us.*"
         r"placement .*tp-cp-dp-pp.*"
         r"exposed comm.*per-op overhead .*ops at 4 us host each.*issue 82793"),
        # the norms at the rate of the kernel --kernels runs: eager ops, Triton's (the fused figure standing in),
        # apex's FusedLayerNorm on the a100-2022
        (["plan", "--model", "llama3-8b", "--seq", "8192", "--dp", "8", "--global-batch", "8", "--machine", "a100",
          "--kernels", "eager", "--explain"], 0,
         r"norms \(eager\) .*GB at 1049 GB/s .*rms_norm, huggingface.*FSDP2's MixedPrecisionPolicy.*softmax "),
        (["plan", "--model", "llama3-8b", "--seq", "8192", "--dp", "8", "--global-batch", "8", "--machine", "a100",
          "--kernels", "eager-fused-norm", "--explain"], 0,
         r"norms \(Triton\) .*GB at 993 GB/s .*standing in, for kernels = eager-fused-norm.*softmax "),
        (["plan", "--layers", "24", "--channels", "2304", "--heads", "24", "--vocab", "51200", "--seq", "2048",
          "--dp", "8", "--global-batch", "8", "--machine", "a100-2022", "--explain"], 0,
         r"norms \(fused\) .*GB at 801 GB/s .*apex/pull/1037.*softmax "),
        (gpt + ["--peak-tflops", "100", "--order", "dp-tp"], 2, r"--order: 'dp-tp' must be tp-cp-dp-pp"),
        (gpt + ["--peak-tflops", "100", "--attention", "fused"], 2, r"--attention: 'fused' must be flash"),
        (gpt + ["--peak-tflops", "100", "--kernels", "fast"], 2, r"--kernels: 'fast' must be fused"),
        (gpt + ["--peak-tflops", "100", "--grad-reduce", "fp8"], 2, r"--grad-reduce: 'fp8' must be bf16, fp16"),
        (["plan", "--validate", llama_edited("llama_reduce.csv", lambda l: set_field(l, "grad_reduce", "float32"))],
         2, r"line [0-9]+: grad_reduce: 'float32' must be bf16, fp16"),
        (gpt + ["--peak-tflops", "100", "--kernels", "eager"], 2, r"--kernels eager: counted for the llama family"),
        # Megatron's dropout: a 0/1 column, and no dropout for the llama family
        (["plan", "--validate", edited("bad_dropout.csv", lambda l: set_field(l, "dropout", "yes"))], 2,
         r"line \d+: dropout 'yes' must be 0 or 1"),
        (["plan", "--model", "llama3-8b", "--dropout", "--machine", "h100"], 2,
         r"--dropout: Megatron's GPT dropout; the llama family has none"),
        # 2bw's two weight versions: none or zero1, as the executor refuses the rest
        (gpt + ["--peak-tflops", "100", "--bw-intra", "100", "--dp", "2", "--pp", "2", "--shard", "zero2",
                "--schedule", "2bw"], 2, r"--schedule: 2bw keeps two weight versions in full; .*got zero2"),
        # a DDP run's gradient accumulation: buffer or autograd, DDP only
        (gpt + ["--peak-tflops", "100", "--grad-accum", "fused"], 2, r"--grad-accum: 'fused' must be buffer"),
        (gpt + ["--machine", "a100", "--dp", "2", "--global-batch", "8", "--grad-accum", "autograd", "--explain"], 0,
         r"memory-bound .*GB of non-GEMM traffic \(fused kernels; grads autograd\)"),
        (gpt + ["--peak-tflops", "100", "--dp", "2", "--shard", "zero3", "--grad-accum", "autograd"], 2,
         r"--grad-accum autograd: PyTorch's .grad accumulation under DDP \(shard none.*got shard zero3"),
        (["plan", "--validate", edited("bad_accum.csv", lambda l: add_column(l, "grad_accum", "eager"))], 2,
         r"line \d+: grad_accum: 'eager' must be buffer"),
        # FSDP's backward prefetch: pre or post, by flag and by column
        (gpt + ["--peak-tflops", "100", "--bwd-prefetch", "early"], 2, r"--bwd-prefetch: 'early' must be pre"),
        # ... and only where it plans something: a prefetched sharded axis timed on a GPU profile
        (gpt + ["--machine", "a100", "--dp", "2", "--bwd-prefetch", "post"], 2,
         r"--bwd-prefetch post: FSDP's backward prefetch acts on a sharded, prefetched data axis .*got shard none"),
        (gpt + ["--peak-tflops", "100", "--dp", "2", "--shard", "zero3", "--bwd-prefetch", "post"], 2,
         r"--bwd-prefetch post: .*got shard zero3, prefetch 1, not a GPU profile"),
        (gpt + ["--machine", "a100", "--dp", "2", "--bwd-prefetch", "pre"], 2,
         r"--bwd-prefetch pre: .*this plan has none, so the flag would plan nothing"),
        (gpt + ["--machine", "a100", "--dp", "2", "--shard", "zero3", "--bwd-prefetch", "post"], 0, r"step"),
        (["plan", "--validate", edited("bad_prefetch.csv", lambda l: add_column(l, "bwd_prefetch", "later"))], 2,
         r"line \d+: bwd_prefetch: 'later' must be pre"),
        # Megatron-LM's async column-parallel backward: none or wgrad, by flag and by column; wgrad needs tp > 1
        # and a GPU profile (the CPU profiles' tensor-parallel ranks wait for each collective)
        (gpt + ["--peak-tflops", "100", "--tp-overlap", "async"], 2, r"--tp-overlap: 'async' must be none"),
        (gpt + ["--machine", "a100", "--tp-overlap", "wgrad"], 2, r"--tp-overlap wgrad: .*needs --tp > 1 \(got --tp 1\)"),
        (gpt + ["--peak-tflops", "100", "--bw-intra", "100", "--tp", "2", "--tp-overlap", "wgrad"], 2,
         r"--tp-overlap wgrad: a GPU profile's"),
        (gpt + ["--machine", "a100", "--tp", "2", "--tp-overlap", "wgrad", "--explain"], 0,
         r"TP hidden .*column-parallel bwd TP comm behind its GEMMs.*2755bcb87b.*TP slowdown .*arXiv:2507\.03114"),
        (["plan", "--validate", edited("bad_tp_overlap.csv", lambda l: set_field(l, "tp_overlap", "async"))], 2,
         r"line \d+: tp_overlap: 'async' must be none"),
        (["plan", "--validate", edited("tp1_overlap.csv", lambda l: set_field(set_field(l, "tp", "1"), "gpus", "1"))],
         2, r"row '22B full': --tp-overlap wgrad: .*needs --tp > 1"),
        # the optimizer step's and the loss's kernels: named variants, by flag and by column
        (gpt + ["--peak-tflops", "100", "--optimizer", "adam"], 2, r"--optimizer: 'adam' must be fused"),
        (gpt + ["--peak-tflops", "100", "--optimizer", "megatron-fp16", "--precision", "fp32"], 2,
         r"--optimizer megatron-fp16: .*needs --precision bf16-mixed"),
        (["plan", "--validate", edited("bad_optimizer.csv", lambda l: set_field(l, "optimizer", "apex"))], 2,
         r"line \d+: optimizer: 'apex' must be fused"),
        (gpt + ["--peak-tflops", "100", "--loss", "fp32"], 2,
         r"--loss: 'fp32' must be fused .*, megatron-fp32 .*, flash-xentropy .* or composer-flash-xentropy"),
        (gpt + ["--peak-tflops", "100", "--loss", "flash"], 2, r"--loss: 'flash' must be fused"),
        # the training loop around the model: none or megatron-lm, by flag and by column
        (gpt + ["--peak-tflops", "100", "--train-loop", "deepspeed"], 2,
         r"--train-loop: 'deepspeed' must be none .* or megatron-lm"),
        (["plan", "--validate", edited("bad_loop.csv", lambda l: set_field(l, "train_loop", "torchtitan"))], 2,
         r"line \d+: train_loop: 'torchtitan' must be none"),
        (gpt + ["--machine", "a100", "--tp", "2", "--train-loop", "megatron-lm", "--explain"], 0,
         r"per-op overhead .*ops, \d+ Megatron loop syncs at 4 us"),
        (gpt + ["--machine", "a100", "--loss", "flash-xentropy", "--explain"], 0,
         r"memory-bound .*non-GEMM traffic \(fused kernels; loss flash-xentropy\)"),
        (gpt + ["--machine", "a100", "--loss", "composer-flash-xentropy", "--explain"], 0,
         r"memory-bound .*non-GEMM traffic \(fused kernels; loss composer-flash-xentropy\)"),
        (["plan", "--validate", edited("flash_loss.csv", lambda l: set_field(l, "loss", "composer-flash-xentropy"))],
         0, r"median"),
        (["plan", "--validate", edited("bad_loss.csv", lambda l: set_field(l, "loss", "xent"))], 2,
         r"line \d+: loss: 'xent' must be fused"),
        (gpt + ["--peak-tflops", "100", "--optimizer", "composer", "--loss", "megatron-fp32"], 0, r"step"),
        (gpt + ["--machine", "a100", "--attention", "flash-triton", "--explain"], 0,
         r"attention .*Triton FlashAttention at 75 TFLOP/s \(d 64, seq 1024.*flash2_a100_fwd_bwd_benchmark"),
        (gpt + ["--machine", "h100", "--attention", "flash", "--explain"], 0,
         r"attention .*FlashAttention-2 at 192 TFLOP/s \(d 64, seq 1024.*flash2_h100_fwd_bwd_benchmark"),
        (gpt + ["--machine", "b200", "--attention", "flash", "--explain"], 0,
         r"attention .*FlashAttention at 1613 TFLOP/s \(d 64, seq 1024.*FlashAttention-4.*arXiv:2603\.05451"),
        (gpt + ["--peak-tflops", "100", "--attention", "flash", "--explain"], 0,
         r"attention .*--attention flash, but the profile gives no rate for the kernel"),
        # the optional order column: Llama 3's placement accepted, anything else named
        (["plan", "--validate", edited("order_llama.csv", lambda l: add_column(l, "order", "tp-cp-pp-dp"))], 0,
         r"median \|error\|"),
        (["plan", "--validate", edited("order_bad.csv", lambda l: add_column(l, "order", "pp-dp"))], 2,
         r"line \d+: order: 'pp-dp' must be tp-cp-dp-pp"),
        (gpt + ["--peak-tflops", "100", "--explain"], 0, r"GEMMs .*of 100 TFLOP/s.*typed by hand: --peak-tflops"),
        # --mem-bw typed on a profile times every memory-bound kind at it (the profile's per-kind rates go)
        (gpt + ["--machine", "a100", "--mem-bw", "1000", "--explain"], 0,
         r"memory-bound .* at 1000 GB/s typed by hand: --mem-bw\n +norms \(fused\) .* at 1000 GB/s \(mem_bw_GBps\)"
         r".*\n +elementwise .* at 1000 GB/s \(mem_bw_GBps\)"),
        # the fleet's GEMM spread (#48): out of [0, 0.5) or NaN named; typed by hand it paces the slowest of
        # the world's GPUs and --explain says so; the a100's names its fleet measurement, the h100's none
        (gpt + ["--machine", "a100", "--gemm-spread", "nan"], 2, r"--gemm-spread: must be in \[0, 0\.5\)"),
        (gpt + ["--machine", "a100", "--gemm-spread", "0.5"], 2, r"--gemm-spread: must be in \[0, 0\.5\)"),
        (gpt + ["--machine", "a100", "--gemm-spread", "-0.01"], 2, r"--gemm-spread: must be in \[0, 0\.5\)"),
        (gpt + ["--machine", "h100", "--dp", "8", "--gemm-spread", "0.01", "--explain"], 0,
         r"slowest GPU +\(in GEMMs\) +GEMM-bound compute x 1\.0142: slowest of 8 GPUs, 1\.42 sd of 1% "
         r"typed by hand: --gemm-spread"),
        (gpt + ["--machine", "a100", "--dp", "8", "--explain"], 0,
         r"slowest GPU +\(in GEMMs\) +GEMM-bound compute x 1\.0111: slowest of 8 GPUs, 1\.42 sd of 0\.783% "
         r"Wei, Pradeep and Bhatele"),
        (gpt + ["--machine", "h100", "--dp", "8", "--explain"], 0,
         r"slowest GPU +- +identical GPUs \(gemm_spread 0\) +not given"),
        # NCCL's plateau of a ring across nodes: an all-reduce of 248 MB over 2 nodes pays it, --explain says so
        (gpt + ["--machine", "a100", "--dp", "16", "--explain"], 0,
         r"comm dp .*; all-reduce latency x 1\.4 .*plateau: NCCL's cost model.*Plateau effect of ring"),
        # and a good table plans every row, the median and the signs printed
        (["plan", "--validate", os.path.join(PUBLISHED, "korthikanti_table5.csv")], 0,
         r"8 rows.*median \|error\| [0-9.]+% over 8 rows; worst .*signs: \d+ \+, \d+ -"),
    ]


def main():
    failures = []
    table = cases()
    for args, rc_want, pattern in table:
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
        if re.search(r"\bnan\b|\binf\b", out.split("error:")[0], re.I) and rc == 0:
            why.append("a non-finite figure printed")
        if "terminate called" in out or rc < 0:
            why.append("crashed")
        if why:
            failures.append((args, "; ".join(why) + "\n    output: " + out[:600].replace("\n", "\n    ")))
    if os.path.exists(w("nan_rows.csv")):
        failures.append((["--csv", "nan_rows.csv"], "a refused plan wrote a row"))
    for args, why in failures:
        print("FAIL: parabench %s\n    %s" % (" ".join(args), why))
    print("%d passed, %d failed" % (len(table) - len(failures), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
