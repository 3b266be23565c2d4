"""SIGKILL a running `parabench sweep` midway, then check the sweep CSV holds
only whole rows, and that `--resume` completes it with every point exactly once.
With ROUNDS (sweep.rounds), the kill lands in the first round, before any row:
the resume must take each point's first round from sweep_rounds.csv (running
it again for none) and finish every point with all its rounds' steps.
Usage: sweep_kill_test.py PARABENCH WORKDIR [ROUNDS] (run by ctest:
sweep_cli_kill_resume, sweep_cli_kill_resume_rounds)."""
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
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cfg = os.path.join(work, "sweep.toml")
    with open(cfg, "w") as f:
        f.write(CONFIG + (f"rounds = {rounds}\n" if rounds > 1 else ""))
    run_dir = os.path.join(work, "run")
    out = os.path.join(run_dir, "sweep.csv")
    side = os.path.join(run_dir, "sweep_rounds.csv")
    watched = side if rounds > 1 else out  # rounds: killed in the first round
    p = subprocess.Popen([exe, "sweep", "--config", cfg, "--run-dir", run_dir], stdout=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None:
        if os.path.exists(watched) and len(rows(watched)) >= 3:
            break
        time.sleep(0.005)
    assert p.poll() is None, "the sweep ended before it could be killed"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    before = rows(out)
    if rounds > 1:
        assert not before, f"{len(before)} rows after a kill in the first round"
        first = rows(side)
        assert 3 <= len(first) < POINTS, len(first)
    else:
        assert 3 <= len(before) < POINTS, len(before)

    subprocess.run([exe, "sweep", "--config", cfg, "--resume", run_dir], check=True, stdout=subprocess.DEVNULL)
    after = rows(out)
    keys = [tuple(r[k] for k in KEY) for r in after]
    assert len(after) == POINTS, f"{len(after)} rows, want {POINTS}"
    assert len(set(keys)) == POINTS, "duplicate points after resume"
    assert after[: len(before)] == before, "resume rewrote rows it should have kept"
    assert all(r["status"] == "ok" for r in after), [r["reason"] for r in after if r["status"] != "ok"]
    if rounds > 1:
        # Each point's steps come from all its rounds (3 steps split in
        # `rounds`), and no round ran twice: the rounds file holds rounds
        # 0..rounds-2 of every point, once each.
        per_round = -(-3 // rounds)
        assert all(int(r["measured_steps"]) == per_round * rounds for r in after), [r["measured_steps"] for r in after]
        done = [(r["key"], r["round"]) for r in rows(side)]
        assert len(done) == len(set(done)) == POINTS * (rounds - 1), (len(done), len(set(done)))
        print(f"killed after {len(first)} of {POINTS} first rounds; resume completed the rest")
    else:
        print(f"killed after {len(before)} of {POINTS} points; resume completed {POINTS - len(before)}")


if __name__ == "__main__":
    main()
