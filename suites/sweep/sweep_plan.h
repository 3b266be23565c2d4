// The planner's estimate for each measured sweep point (issue 6: "planner vs
// measured"): the `plan` row of the same (strategy, model, precision, mesh,
// global_batch, seq_len), timed with hardware figures measured on this machine
// once per sweep, so the report can show the estimate's error per point.
// Invariant: the local backend runs `world` ranks as threads on `cores` cores,
// so a rank's share of the machine is min(1, cores / world) of one core's GEMM
// peak and one thread's copy bandwidth; the planner is given that share (the
// MFU denominator of the sweep row stays world x the full per-core peak, as
// results/SCHEMA.md defines it).
#pragma once
#include <map>
#include <vector>
#include <tuple>
#include <utility>
#include <string>

#include "harness/io/csv.h"
#include "harness/io/run_meta.h"
#include "reference/model_config.h"
#include "suites/planner/planner.h"
#include "suites/calibrate/local_hardware.h"
#include "suites/calibrate/shape_rates.h"
#include "suites/planner/machine.h"
#include "suites/sweep/shape_step.h"
#include "suites/sweep/sweep.h"

namespace pb::sweep {

// compute_scale from the single-rank step (dp1, no sharding) of shape key k's
// model at seq tokens measured at `measured_s`: over the planner's estimate of
// that step on this machine's figures h and rates r (their compute_scale
// ignored), the data-parallel buffers' time, which compute_scale leaves alone
// (planner::PlanResult::buffer_s), taken out of both; so that step's plan is
// its measured time.
double single_rank_compute_scale(const ShapeKey& k, int seq, const calibrate::LocalHardware& h, calibrate::ShapeRates r,
                                 double measured_s);

// The planner input describing point p (as run by run_point): dp = world, the
// point's shard, precision, global batch and microbatches, DDP's bucket overlap
// (its default in the sweep), the point's model shape at the sweep's seq.
planner::PlanInput plan_input(const SweepConfig& c, const SweepPoint& p, const PointResult& r,
                              const calibrate::LocalHardware& h, const calibrate::ShapeRates& rates = {});

// The plan row of point p: its columns and common metadata (backend analytic,
// the point's mesh and config hash, the hardware used noted in `reason`). A
// point the planner rejects gets a rejected row naming why.
struct PlanRow {
  RunMeta meta;
  CsvRecord values;
};
PlanRow plan_row(const SweepConfig& c, const SweepPoint& p, const PointResult& r, const calibrate::LocalHardware& h,
                 const RunMeta& point_meta, const calibrate::ShapeRates& rates = {});

// The vendor's figure: for every measured series (the ok points sharing
// strategy, model, precision, microbatches, scaling and the mesh's axes other
// than dp), its largest point re-planned at each world of c.extrapolate above
// it, dp scaled to reach that world (weak scaling scales the global batch with
// dp; strong keeps it). The hardware is c.machine's profile if given, else
// this machine's measured figures for one rank per core (core share 1, the
// latency measured at the largest world, ranks per node = cores, inter-node
// links as fast as intra-node: said in the row's reason). A world the series'
// other axes do not divide, or a batch that does not split, gets a rejected
// row naming why. `rates` is keyed by shape_key.
struct MeasuredPoint {
  SweepPoint point;
  PointResult result;
  RunMeta meta;
};
std::vector<PlanRow> extrapolated_plan_rows(const SweepConfig& c, const std::vector<MeasuredPoint>& measured,
                                            const calibrate::LocalHardware& h,
                                            const std::map<ShapeKey, calibrate::ShapeRates>& rates);

// A machine profile against measured points (`parabench plan --machine FILE
// --against SWEEP_CSV`): every ok sweep row of the CSV planned with profile
// m as plan --machine plans it (hardware_for, the profile's ranks per node),
// each point as run_point ran it (plan_input: its mesh, strategy, batch,
// microbatches and seq; DDP's buckets overlapped only where the local backend
// had a core per progress thread, at m.ranks_per_node cores). A point whose
// ranks outnumber the profile's node (oversubscribed here: the profile plans
// one rank per core, more ranks as more nodes) or that the planner refuses is
// listed, not compared, with why. InputError naming the file when it is not
// a sweep CSV.
struct ProfilePoint {
  std::string label;  // "<mesh> <strategy> <model> <precision>"
  MeshShape mesh;
  bool compared = false;
  std::string why;  // not compared: why
  double measured_s = 0, planned_s = 0;
  // Compared: the plan row's columns (the sweep's strategy text, so the
  // report pairs it with the point) and the point's world and config hash.
  CsvRecord plan;
  int world = 1;
  std::string config_hash;
  // Throughput error, plan over measured (positive: the plan is too fast).
  double error() const { return measured_s / planned_s - 1; }
};
std::vector<ProfilePoint> plan_against(const planner::MachineProfile& m, const std::string& sweep_csv);

}  // namespace pb::sweep
