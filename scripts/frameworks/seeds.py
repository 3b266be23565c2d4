#!/usr/bin/env python3
"""No false alarm over 3 seeds (#47): every row of a framework's coverage
table trained from exports of seeds 1, 2 and 3, each trace judged by
`parabench verify`, which must pass them all.

    seeds.py PARABENCH WORKDIR ADAPTER ROW...
    ROW: "NAME|EXPORT SETS|ADAPTER ARGS", e.g. "zero1|model.layers=4 train.steps=6|--strategy zero1"

Run with the frameworks environment's python (scripts/frameworks/seeds.sh
does, and skips when it is not installed). To stay cheap the framework is
imported once, here: each run is the adapter's own main() (its checks, its
workers), with the ranks forked from this process (common.START_METHOD)
instead of spawned fresh. Each seed's export sets train.seed and data.seed
to the seed. Prints, per row, the worst ratio over the seeds of every
quantity verify judges and the row's time; exits 1 when a run fails or
verify rejects a trace, 2 on bad arguments. A run whose rank dies without a
Python exception (a forked rank's signal or bare exit) is run once more and
said on stderr; failing again, it fails the row.
"""

import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

SEEDS = (1, 2, 3)
QUANTITIES = ("loss", "grads", "params", "grad_norm")


def preload(adapter):
    """The framework imported before any rank is forked."""
    import torch  # noqa: F401
    if adapter == "tt_train.py":
        import tt_shim
        tt_shim.apply()  # before torchtitan's other imports
        import torchtitan.trainer  # noqa: F401
    elif adapter == "ds_train.py":
        import deepspeed  # noqa: F401
    else:  # mg_train.py; mg_shim patches at install(), in each rank, after these imports
        import megatron.core.distributed  # noqa: F401
        import megatron.core.models.gpt  # noqa: F401
        import megatron.core.optimizer  # noqa: F401
        import megatron.core.pipeline_parallel  # noqa: F401


def ratios(text):
    """{quantity: worst ratio} from verify's report of one trace."""
    lines = text.splitlines()
    head = next((ln.split() for ln in lines if ln.split()[:1] == ["mesh"]), None)
    row = next((ln.split() for ln in lines if ln.rstrip().endswith(("PASS", "FAIL")) and ln[:1] != " "), None)
    out = {}
    if head and row and len(row) == len(head):
        for q in ("loss", "grads", "params"):
            out[q] = float(row[head.index(q)])
    m = re.search(r"grad_norm: worst ratio ([0-9.e+-]+)", text)
    if m:
        out["grad_norm"] = float(m.group(1))
    return out


def main():
    if len(sys.argv) < 5:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    pb, work, adapter = os.path.realpath(sys.argv[1]), sys.argv[2], sys.argv[3]
    rows = []
    for r in sys.argv[4:]:
        parts = r.split("|")
        if len(parts) != 3 or not parts[0]:
            print(f"seeds.py: row '{r}' is not NAME|EXPORT SETS|ADAPTER ARGS", file=sys.stderr)
            sys.exit(2)
        rows.append(parts)
    if adapter not in ("ds_train.py", "mg_train.py", "tt_train.py"):
        print(f"seeds.py: unknown adapter '{adapter}'", file=sys.stderr)
        sys.exit(2)
    preload(adapter)
    module = __import__(adapter[:-3])
    common.START_METHOD = "fork"
    failed = []
    print(f"{'row':28s} " + " ".join(f"{q:>9s}" for q in QUANTITIES) + "   time (3 seeds)")
    for name, sets, args in rows:
        start = time.time()
        worst = {}
        for seed in SEEDS:
            d = os.path.join(work, name, f"seed{seed}")
            subprocess.run(["rm", "-rf", d], check=True)
            os.makedirs(d)
            cmd = [pb, "export", "--dir", f"{d}/export"]
            for kv in sets.split() + [f"train.seed={seed}", f"data.seed={seed}"]:
                cmd += ["--set", kv]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            argv = [adapter, "--export", f"{d}/export", "--out", f"{d}/trace.safetensors", "--world", "2"]
            argv += args.split()
            error = None
            for attempt in (1, 2):
                sys.argv = list(argv)
                try:
                    module.main()
                    error = None
                except SystemExit as e:
                    error = f"the adapter exited {e.code}" if e.code else None
                except Exception as e:  # a rank failed: its traceback, if it raised, is above
                    error = f"training failed ({type(e).__name__}: {e})"
                    # A rank that died without a Python exception (torch's
                    # ProcessExitedException: a signal, or an exit code with no
                    # traceback) in a process forked from this long-lived one
                    # is run once more, said on stderr; any other failure, or
                    # the same twice, fails the row.
                    if attempt == 1 and type(e).__name__ == "ProcessExitedException":
                        print(f"seeds: {name} seed {seed}: {error}; run again", file=sys.stderr, flush=True)
                        continue
                break
            if error:
                failed.append(f"{name} seed {seed}: {error}")
                continue
            v = subprocess.run([pb, "verify", "--export", f"{d}/export", "--trace", f"{d}/trace.safetensors",
                                "--run-dir", f"{d}/verify"], capture_output=True, text=True)
            got = ratios(v.stdout)
            if v.returncode != 0 or set(got) != set(QUANTITIES):
                failed.append(f"{name} seed {seed}: verify exit {v.returncode}\n{v.stdout}{v.stderr}")
            for q, r in got.items():
                worst[q] = max(worst.get(q, 0.0), r)
        print(f"{name:28s} " + " ".join(f"{worst.get(q, float('nan')):9.3f}" for q in QUANTITIES)
              + f"   {time.time() - start:.0f} s", flush=True)
    for f in failed:
        print(f"seeds: FAIL: {f}", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
