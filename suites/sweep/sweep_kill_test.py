"""SIGKILL a running `parabench sweep` midway, then check the sweep CSV holds
only whole rows, and that `--resume` completes it with every point exactly once.
Usage: sweep_kill_test.py PARABENCH WORKDIR (run by ctest: sweep_cli_kill_resume)."""
import csv
import os
import shutil
import signal
import subprocess
import sys
import time

CONFIG = """[sweep]
strategies = ["shard=none", "shard=zero1", "shard=zero2", "shard=zero3"]
worlds = [1, 2]
models = ["tiny", "small"]
steps = 3
warmup = 1
batch_per_rank = 4
peak_gflops = 10.0
"""
POINTS = 4 * 2 * 2
KEY = ("strategy", "mesh", "model", "precision", "microbatches", "scaling")


def rows(path):
    with open(path, newline="") as f:
        text = f.read()
    assert text.endswith("\n"), "partial (unterminated) last row"
    table = list(csv.reader(text.splitlines()))
    header, body = table[0], table[1:]
    for r in body:
        assert len(r) == len(header), f"row with {len(r)} fields, header has {len(header)}"
    return [dict(zip(header, r)) for r in body]


def main():
    exe, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cfg = os.path.join(work, "sweep.toml")
    with open(cfg, "w") as f:
        f.write(CONFIG)
    run_dir = os.path.join(work, "run")
    out = os.path.join(run_dir, "sweep.csv")
    p = subprocess.Popen([exe, "sweep", "--config", cfg, "--run-dir", run_dir], stdout=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None:
        if os.path.exists(out) and len(rows(out)) >= 3:
            break
        time.sleep(0.005)
    assert p.poll() is None, "the sweep ended before it could be killed"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    before = rows(out)
    assert 3 <= len(before) < POINTS, len(before)

    subprocess.run([exe, "sweep", "--config", cfg, "--resume", run_dir], check=True, stdout=subprocess.DEVNULL)
    after = rows(out)
    keys = [tuple(r[k] for k in KEY) for r in after]
    assert len(after) == POINTS, f"{len(after)} rows, want {POINTS}"
    assert len(set(keys)) == POINTS, "duplicate points after resume"
    assert after[: len(before)] == before, "resume rewrote rows it should have kept"
    assert all(r["status"] == "ok" for r in after), [r["reason"] for r in after if r["status"] != "ok"]
    print(f"killed after {len(before)} of {POINTS} points; resume completed {POINTS - len(before)}")


if __name__ == "__main__":
    main()
