// The scaling sweep (parabench sweep): every (strategy, mesh, model,
// precision, microbatches, scaling) point of a [sweep] table — strategy and
// mesh in the run spec's text form (impl/spec/run_spec.h), any strategy the
// registry implements, pipelines included — is trained for warm-up + measured
// steps through the one Rank interface and becomes one "sweep" row of
// results/schema.json: step time, tokens/s, model FLOP/s, MFU, peak memory per
// tag (the worst rank: for a pipeline, the worst stage), communication bytes
// per group (pipeline p2p included), exposed communication, measured bubble.
// Invariants: a point always yields exactly one row — ok, rejected (bad input
// for that point: InputError) or failed (anything else) with the reason — and
// the row is appended as soon as the point ends, so a killed sweep loses at
// most the point it was running; resume() skips every point whose key is
// already in the file, so resuming never duplicates a point.
// Rounds (sweep.rounds > 1): every point is measured in that many windows,
// interleaved over the sweep (round 1 of every point, then round 2, ...,
// each round starting at another point: round_offset), and
// its row holds the median of its rounds' medians, written when its last
// round ends. A window in which the host slows down (a noisy neighbour on a
// shared machine: seen to slow six consecutive points by 1.3-1.8x) then spoils
// one round of a point, not its row. Each earlier round is appended to a side
// file as it ends (SweepRun::rounds_csv_path), so a killed sweep loses at most
// the round it was running there too.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "harness/io/config.h"
#include "harness/io/csv.h"
#include "harness/io/run_meta.h"
#include "harness/comm/runner.h"
#include "harness/preflight.h"
#include "impl/spec/rank.h"
#include "impl/spec/run_spec.h"

namespace pb::sweep {

struct SweepConfig {
  std::vector<std::string> strategies = {"shard=none"};  // strategy text (run_spec.h), canonical
  std::vector<int64_t> worlds = {1};       // data-parallel meshes dp<w>, when `meshes` is empty
  std::vector<std::string> meshes;         // mesh text (dp2, dp2.pp2, ...), canonical
  // Points beyond the strategies x meshes product: "<mesh> <strategy>" (the
  // report label form, e.g. "tp2 shard=none,sp=on,recompute=full"), canonical.
  std::vector<std::string> points;
  std::vector<std::string> models = {"tiny"};
  std::vector<std::string> precisions = {"fp32"};
  std::vector<int64_t> microbatches = {1};
  std::vector<std::string> scaling = {"weak"};  // weak | strong
  int batch_per_rank = 8;  // weak scaling: sequences per data-parallel replica per step
  int global_batch = 0;    // strong scaling: sequences per step (0: batch_per_rank x max dp)
  int seq = 16;            // tokens per sequence
  int steps = 5;           // measured steps (at least)
  int warmup = 2;          // steps run before measuring
  // Measure at least this long (0: exactly `steps`): the measured steps are
  // raised to ceil(min_seconds / the slowest rank's last warm-up step), at
  // most kMaxStepsFactor x steps, so a sub-millisecond point is a median over
  // hundreds of steps, not ten.
  double min_seconds = 0;
  static constexpr int kMaxStepsFactor = 100;
  // Windows per point, interleaved over the sweep (see the top of this file):
  // `steps` and `min_seconds` are the point's totals, split evenly over its
  // rounds (each round warms up again: it is a run of its own).
  int rounds = 1;
  static constexpr int kMaxRounds = 15;
  int ranks_per_node = 0;  // node boundary for hierarchical strategies (0: one node)
  double peak_gflops = 0;  // per-rank MFU peak; 0: measure single-thread sgemm
  // Plan rows beyond the measured worlds (the vendor's figure): for every
  // measured series, its largest point re-planned at each of these world sizes
  // (dp scaled; weak scaling scales the batch too), with the hardware of
  // `machine` (a built-in name or a calibrate profile; empty: this machine's
  // measured figures, one rank per core per node, inter-node = intra-node).
  std::vector<int64_t> extrapolate;
  std::string machine;
  // Where every point's ranks train (train.device): cuda runs one rank per
  // GPU over nccl, so the points of mpirun's world size only (or world-1
  // points alone), no plan rows; points no strategy runs on a device (tensor,
  // context, expert parallel, MoE, fp64) are rejected rows naming why.
  Device device = Device::cpu;
  // The files this config was read from (the config itself, sweep.machine's
  // profile): no output of the sweep may be one of them.
  std::vector<std::string> inputs;
};

// Reads [sweep] and rejects keys nothing read (InputError naming the key).
SweepConfig read_sweep_config(ConfigReader& r);

// One point, parsed once (at expansion): its mesh, every axis's options, its
// model and precision in `spec` (the train config's batch, seq and steps are
// the sweep's: point_spec). Its text is printed from the spec, never kept.
struct SweepPoint {
  RunSpec spec;
  std::string scaling;  // weak | strong
  int microbatches = 1;

  int world() const { return spec.world(); }
  int dp() const { return spec.mesh.dp; }
  std::string strategy() const;  // strategy text (the row's `strategy`)
  std::string mesh() const;      // mesh text (the row's `mesh`)
  const std::string& model() const { return spec.train.model.name; }
  std::string precision() const;
  std::string key() const;    // strategy|mesh|model|precision|microbatches|scaling
  std::string label() const;  // "dp4 shard=zero3 small fp32 mb1 weak"
};

// A point from its text: strategy and mesh in the run spec's text form, a
// model name and a precision (InputError naming `field` when one does not
// parse).
SweepPoint make_point(const std::string& strategy, const std::string& mesh, const std::string& model,
                      const std::string& precision, const std::string& scaling, int microbatches,
                      const std::string& field = "sweep point");

// The points in run order (scaling, model, precision, microbatches, strategy, mesh).
std::vector<SweepPoint> expand(const SweepConfig& c);

struct PointResult {
  std::string status = "ok";  // ok | rejected | failed
  std::string reason;
  std::string device = "cpu";  // rank 0's device name ("cuda:0 NVIDIA H100 ..."); not run: sweep.device
  int64_t global_batch = 0, seq = 0;
  double step_time_s = 0, tokens_per_s = 0, model_flops_per_s = 0, mfu = 0, peak_flops = 0;
  // The spread of the measured steps (each the job's pace, step_times):
  // fastest, slowest, and the coefficient of variation (sample stddev / mean).
  double step_time_min_s = 0, step_time_max_s = 0, step_time_cv = 0;
  double step_time_mean_s = 0;  // (not a column: the cv's denominator, to pool rounds)
  int measured_steps = 0;  // steps behind those figures (sweep.steps, or more under sweep.min_seconds)
  bool oversubscribed = false;  // more ranks than this machine's cores: the scaling is not the strategy's
  int64_t mem[6] = {};  // peak per MemTag (device), max over ranks
  int64_t mem_total = 0, mem_host_total = 0;
  int64_t comm_dp_bytes = 0, comm_tp_bytes = 0, comm_cp_bytes = 0, comm_pp_bytes = 0, comm_inter_node_bytes = 0;  // per step, max over ranks
  int64_t comm_ep_bytes = 0;                              // per step, max over ranks
  double moe_dropped = 0, moe_load_max_mean = 0;          // MoE routing over the measured steps, all ranks
  double exposed_comm_s = 0;                              // per step, max over ranks
  double bubble = 0;  // pipeline: mean over measured steps of sum_r (T - busy_r) / (p T); else 0
};

// The measured steps' times from the moments the last rank finished each
// (seconds from a common start, non-decreasing): step i lasts from the last
// rank's end of step i-1 (the start, for the first) to its end of step i. So
// the times add up to the whole run, however the ranks' own step boundaries
// jitter: at more ranks than cores a rank woken late from the last step's
// collective starts late, and the max over ranks of each rank's own step
// (what this replaced) counted that lateness again every step (measured at
// 4 ranks on 2 cores, both in one run: DDP and ZeRO-2 at dp4 9-30% slower,
// cp4 4-10%, the rest 0-5%). InputError on a decreasing or non-finite time.
std::vector<double> step_times(const std::vector<double>& last_ends);

// A point's sequences per step: batch_per_rank x dp (weak scaling) or
// global_batch (strong).
int64_t point_global_batch(const SweepConfig& c, const SweepPoint& p);

// The run spec of point p (model, precision, batch, seq, steps, mesh, options),
// validated: InputError naming the sweep key that makes it invalid.
RunSpec point_spec(const SweepConfig& c, const SweepPoint& p);

// Trains one point, on a local world of p.world threads, or on `world` (the
// processes mpirun launched; its size must be p.world). Never throws for a bad
// point: the status says why (bad input is found before any communication,
// alike on every rank). On `world` a failure throws instead: a rank error
// leaves MPI's communicators unusable, so the caller ends every process.
// The figures are the max over ranks and only the process hosting rank 0
// gets them (others return an empty ok result).
// peak_flops_per_rank: the MFU denominator of one rank (FLOP/s).

// open_device: each rank's device when c.device is cuda (then `world` is
// required: a device rank's buffers are not the local backend's threads').
PointResult run_point(const SweepConfig& c, const SweepPoint& p, double peak_flops_per_rank,
                      World* world = nullptr, const DeviceOpener& open_device = {});

// The median seconds per step of each of `copies` copies of spec's
// single-rank step (a dp1 spec), each in a world of its own on a thread of
// its own, all meeting at a barrier after every step, as the ranks of one
// world meet at least once a step (the slowest copy of each step sets the
// pace; the corun factor of the sweep's plan rows, ShapeRates::corun_scale);
// the steps as c's measured steps fill c.min_seconds (at least c.steps),
// after c's warm-up. Throws what a copy's step throws.
std::vector<double> paced_copies(const SweepConfig& c, const RunSpec& spec, int copies);

// One measurement window of a point under sweep.rounds: the config whose
// run_point measures round `round` (0-based) of c's points: ceil(steps /
// rounds) steps and min_seconds / rounds seconds at least.
SweepConfig round_config(const SweepConfig& c);

// Where round `round` of `rounds` starts in the list of `points` points (it
// visits them from there, wrapping around): the last round at the first
// point, so rows come in the points' order; each earlier round (r + 1) / rounds
// of the way in, so one point's windows fall at different moments of their
// rounds (a disturbance that recurs with the sweep's rhythm, or a slow spell
// as long as a round's stretch of points, does not hit every window of the
// same points).
size_t round_offset(int round, int rounds, size_t points);

// A point's row from its rounds (all ok, in order, at least one): the step
// time is the median of the rounds' medians (of the two middle ones, the
// mean), min and max over every round, the cv and mean over every measured
// step pooled, measured_steps their sum, bubble and exposed communication the
// mean over rounds weighted by their steps, tokens/s, model FLOP/s and MFU at
// the combined step time; everything else (memory, bytes, routing, device) is
// the last round's. One round is returned as it is.
PointResult combine_rounds(const std::vector<PointResult>& rounds);

// The sweep columns of one row (RunMeta carries world, mesh, status, reason).
CsvRecord to_record(const SweepPoint& p, const PointResult& r);
// config_hash: point_config_hash, so a row says which settings made it.
RunMeta point_meta(const SweepConfig& c, const SweepPoint& p, const PointResult& r, const RunMeta& base);

// The hash of everything that changes point p's figures under config c: the
// point (strategy, mesh, model, precision, microbatches, scaling) and the
// sweep's batch, seq, steps, warm-up, rounds, ranks per node and MFU peak.
std::string point_config_hash(const SweepConfig& c, const SweepPoint& p);

// Keys of the points present in an existing sweep CSV (a torn last row is
// ignored), for --resume under config c. InputError naming the file (and
// line) if it does not validate against the results schema, is not a sweep
// CSV, or holds a point of c run with other settings (its config_hash).
std::set<std::string> done_keys(const std::string& csv_path, const SweepConfig& c);

// The rounds of points not yet in the sweep CSV that an earlier run of c
// recorded in its rounds file (SweepRun::rounds_csv_path), by point key, each
// point's rounds in order from round 0 (a gap ends them; a torn last row is
// ignored). Empty if the file does not exist. InputError naming the file and
// line if it is not a rounds file or holds a point of c run with other
// settings.
std::map<std::string, std::vector<PointResult>> done_rounds(const std::string& rounds_path, const SweepConfig& c);

struct SweepRun {
  std::string csv_path;       // appended to (created with the header if absent)
  // sweep.rounds > 1: every round but a point's last is appended here as it
  // ends (key, config_hash, round, its time figures), for --resume; empty:
  // kept in memory only.
  std::string rounds_csv_path;
  std::string plan_csv_path;  // if set: a plan row per ok point (sweep_plan.h), appended here
  RunMeta meta;               // run_id, git_rev, host, backend for every row
  std::ostream* progress = nullptr;  // "[k/n] ... ETA" lines, if set
  std::ostream* table = nullptr;     // one result line per point, if set
  // The end-of-run warning naming the unreliable rows (reliability.h) and
  // the host's load; null: std::cerr.
  std::ostream* warnings = nullptr;
  // Under mpirun: the launched world. Only its points (world = its size) run;
  // the process hosting rank 0 writes, and no plan rows are written (their
  // timing uses this machine's local-backend figures; give `parabench plan`
  // the cluster's link figures instead).
  World* world = nullptr;
  Limits limits;  // preflight: every point must fit (harness/preflight.h)
  // sweep.device = cuda: each rank's GPU, and the MFU denominator of one rank
  // for a point (sweep.peak_gflops, when set, wins; unset: the CPU's sgemm).
  DeviceOpener open_device;
  std::function<double(const SweepPoint&)> peak_flops;
};

struct SweepSummary {
  int points = 0, skipped = 0, ok = 0, rejected = 0, failed = 0;
  int unreliable = 0;  // ok rows marked unreliable (their step-time spread: reliability.h)
  double seconds = 0;
};

// Runs every point not in `skip` (read on the writer only), writing one row
// per point (and, with plan_csv_path, the planner's row for each ok point).
// `rounds_done`: rounds of points an earlier run measured (done_rounds; read
// on the writer only): only the rest run.
SweepSummary run_sweep(const SweepConfig& c, const SweepRun& run, const std::set<std::string>& skip = {},
                       const std::map<std::string, std::vector<PointResult>>& rounds_done = {});

}  // namespace pb::sweep
