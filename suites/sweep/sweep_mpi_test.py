"""`parabench sweep` under mpirun: the points whose world is mpirun's -np run on
the MPI backend, one process per rank, and give the same exact figures (memory
per tag, data-parallel bytes per step) as the same points on the local
backend; --resume under mpirun adds nothing twice; an error only rank 0 sees
(a bad --resume path) ends every process with exit 2 instead of hanging them;
sweep.ranks_per_node is the node boundary of the MPI world too.
Usage: sweep_mpi_test.py PARABENCH MPIEXEC WORKDIR (ctest: sweep_mpi_np2)."""
import csv
import os
import shutil
import subprocess
import sys

CONFIG = """[sweep]
strategies = ["shard=none", "shard=zero1", "shard=zero2", "shard=zero3", "shard=hsdp", "shard=hzero"]
worlds = [1, 2]
models = ["tiny"]
precisions = ["fp32", "bf16-mixed"]
batch_per_rank = 4
seq = 16
steps = 2
warmup = 1
peak_gflops = 10.0
ranks_per_node = 1
"""
EXACT = ["mem_params", "mem_grads", "mem_optimizer", "mem_activations", "mem_comm", "mem_workspace",
         "mem_total", "mem_host_total", "comm_dp_bytes", "comm_inter_node_bytes"]
KEY = ("strategy", "mesh", "model", "precision", "microbatches", "scaling")


def check(cond, what):
    if not cond:
        raise SystemExit("FAIL: " + what)
    print("ok:", what)


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def run(cmd, timeout=240):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    print(p.stdout[-2000:])
    return p.returncode


def main():
    exe, mpiexec, work = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cfg = os.path.join(work, "sweep.toml")
    with open(cfg, "w") as f:
        f.write(CONFIG)
    mpirun = [mpiexec, "-np", "2", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none"]
    mpi_dir, local_dir = os.path.join(work, "mpi"), os.path.join(work, "local")

    check(run(mpirun + [exe, "sweep", "--config", cfg, "--run-dir", mpi_dir]) == 0, "mpirun -np 2 sweep exits 0")
    check(run([exe, "sweep", "--config", cfg, "--run-dir", local_dir]) == 0, "local sweep exits 0")
    mpi = rows(os.path.join(mpi_dir, "sweep.csv"))
    local = {tuple(r[k] for k in KEY): r for r in rows(os.path.join(local_dir, "sweep.csv"))}
    check(len(mpi) == 12, "one row per world-2 point (%d)" % len(mpi))
    check(all(r["world"] == "2" and r["backend"] == "mpi" and r["status"] == "ok" for r in mpi),
          "only world-2 points, backend mpi, all ok")
    for r in mpi:
        l = local[tuple(r[k] for k in KEY)]
        diff = [(c, r[c], l[c]) for c in EXACT if r[c] != l[c]]
        check(not diff, "%s %s: exact figures equal the local backend's %s" % (r["strategy"], r["precision"], diff))
        check(float(r["tokens_per_s"]) > 0, "%s %s measured a throughput" % (r["strategy"], r["precision"]))
    check(not os.path.exists(os.path.join(mpi_dir, "plan.csv")), "no plan rows under mpirun")
    v = subprocess.run([exe, "validate", os.path.join(mpi_dir, "sweep.csv")], stdout=subprocess.PIPE, text=True)
    check(v.returncode == 0, "the MPI sweep CSV validates")

    check(run(mpirun + [exe, "sweep", "--config", cfg, "--resume", mpi_dir]) == 0, "--resume under mpirun exits 0")
    check(len(rows(os.path.join(mpi_dir, "sweep.csv"))) == 12, "--resume ran nothing twice")
    check(any(int(r["comm_inter_node_bytes"]) > 0 for r in mpi), "ranks_per_node = 1 puts the ranks on two nodes")

    rc = run(mpirun + [exe, "sweep", "--config", cfg, "--backend", "local", "--out", work], timeout=120)
    check(rc == 2, "--backend local under mpirun -np 2 exits 2 (got %d): every process would write" % rc)
    rc = run(mpirun + [exe, "sweep", "--config", cfg, "--resume", os.path.join(work, "nope")], timeout=120)
    check(rc == 2, "a bad --resume under mpirun exits 2 (got %d), no process left waiting" % rc)
    with open(cfg, "a") as f:
        f.write("nonsense = 1\n")
    check(run(mpirun + [exe, "sweep", "--config", cfg, "--out", work], timeout=120) == 2, "a bad config under mpirun exits 2")


if __name__ == "__main__":
    main()
