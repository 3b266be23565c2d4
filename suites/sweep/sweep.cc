// The sweep's orchestration (run_sweep): the points this process runs, in
// rounds, each point's row written as it ends, with its plan row and the
// extrapolated ones. The parts: sweep_config.cc (config, points),
// sweep_point.cc (one point), sweep_rows.cc (rows, rounds, resume),
// shape_step.cc and sweep_plan.cc (the plan rows' figures).
#include "suites/sweep/sweep.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <ostream>
#include <map>
#include <set>
#include <memory>
#include <stdexcept>
#include <thread>

#include "harness/io/csv.h"
#include "harness/io/csv_schema.h"
#include "harness/io/output_file.h"
#include "harness/comm/runner.h"
#include "harness/status.h"
#include "harness/mesh.h"
#include "impl/registry.h"
#include "impl/spec/run_spec.h"
#include "kernels/cpu/peak.h"
#include "reference/model_config.h"
#include "suites/planner/machine.h"
#include "suites/planner/preflight.h"
#include "suites/sweep/reliability.h"
#include "suites/sweep/sweep_plan.h"
#include "suites/sweep/sweep_internal.h"

namespace pb::sweep {

using calibrate::LocalHardware;
using calibrate::measure_local_hardware;
using calibrate::measure_shape_rates;
using calibrate::measure_split_gemm_efficiency;
using calibrate::measure_world;
using calibrate::ShapeRates;
using internal::round_columns;
using internal::round_row;
using internal::RowKey;

namespace {

// A resumed sweep replaces the extrapolated plan rows an earlier run of it
// wrote (they came from the largest points measured then): the rows whose
// reason starts with "extrapolated" leave plan.csv, and so does a torn last
// row (rows are single lines, csv_escape folds line breaks). Rewritten by
// write_output_file: a temporary renamed over a regular file, never over
// what is not one, nor over one of the sweep's inputs.
void drop_extrapolated_rows(const std::string& plan_path, const std::vector<std::string>& inputs) {
  if (!std::filesystem::exists(plan_path)) return;
  const CsvTable t = read_csv(plan_path, {/*drop_partial_tail=*/true});
  const size_t cr = t.column("reason");
  std::set<size_t> drop;
  for (size_t i = 0; i < t.rows.size(); ++i)
    if (t.rows[i][cr].rfind("extrapolated", 0) == 0) drop.insert(t.row_lines[i]);
  if (drop.empty() && !t.dropped_partial_tail) return;
  std::ifstream in(plan_path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  require(bool(in) || in.eof(), "--resume: cannot read '" + plan_path + "'");
  std::string kept;
  size_t line = 1, at = 0;
  for (size_t nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1, ++line)
    if (!drop.count(line)) kept.append(text, at, nl + 1 - at);
  write_output_file(plan_path, kept, "--resume: plan.csv", inputs);
}

// Every file the sweep writes, checked before the first point runs: none is
// a directory, a socket or one of the sweep's inputs (the config, the
// machine profile: SweepConfig::inputs).
void check_outputs(const SweepConfig& c, const SweepRun& run) {
  const std::pair<const std::string*, const char*> outputs[] = {
      {&run.csv_path, "sweep CSV"}, {&run.plan_csv_path, "plan CSV"}, {&run.rounds_csv_path, "rounds CSV"}};
  for (const auto& [path, what] : outputs)
    if (!path->empty()) check_output_path(*path, what, c.inputs);
}

// The ok points an earlier run of a resumed sweep measured (rows of its CSV
// this config also runs), for the extrapolation over every measured point.
std::vector<MeasuredPoint> earlier_points(const SweepRun& run, const SweepConfig& c, const std::set<std::string>& skip) {
  std::map<std::string, SweepPoint> by_key;
  for (const SweepPoint& p : expand(c)) by_key[p.key()] = p;
  const CsvTable t = read_csv(run.csv_path, {/*drop_partial_tail=*/true});
  const size_t cst = t.column("status"), cg = t.column("global_batch"), cq = t.column("seq_len");
  const RowKey key_of(t);
  std::vector<MeasuredPoint> out;
  for (const auto& row : t.rows) {
    const std::string key = key_of(row);
    const auto it = by_key.find(key);
    if (row[cst] != "ok" || !skip.count(key) || it == by_key.end()) continue;
    PointResult r;
    r.global_batch = std::stoll(row[cg]);
    r.seq = std::stoll(row[cq]);
    out.push_back({it->second, r, point_meta(c, it->second, r, run.meta)});
  }
  return out;
}

// The plan rows' figures for shape k: its kernels' rates (measure_shape_rates)
// and compute_scale, from a single-rank step of the shape run as a sweep point
// (dp1, no sharding: the reference's step, at c's seq, warm-up and measuring
// time) over the planner's estimate of it. That step is `same`, the sweep's
// own result of that very point when it has one (the median of its rounds),
// or else single_rank_step. A step that cannot run, or would not fit this
// machine's limits on one rank (a model the sweep only runs sharded), leaves
// 1 (the row's reason says so).
ShapeRates measure_rates(const SweepConfig& c, const ShapeKey& k, const LocalHardware& hw, double peak_rank,
                         const Limits& limits, const PointResult* same) {
  ShapeRates r = measure_shape_rates(k.model, k.sequences, c.seq, peak_rank, 3);
  const PointResult step = same ? *same : single_rank_step(c, k, peak_rank, limits);
  if (step.status == "ok") {
    r.compute_scale = single_rank_compute_scale(k, c.seq, hw, r, step.step_time_s);
    r.step_measured = true;
  }
  return r;
}

// The points this process runs (under mpirun, those of its world size),
// each checked against the preflight limits before the first runs. A point
// that is not valid is left to run_point (a rejected row).
std::vector<SweepPoint> hosted_points(const SweepConfig& c, const SweepRun& run) {
  std::vector<SweepPoint> points;
  for (auto& p : expand(c))
    if (!run.world || p.world() == run.world->size()) points.push_back(p);
  if (run.world)
    require(!points.empty(), "sweep.worlds: no point has world " + std::to_string(run.world->size()) +
                                 ", the size mpirun launched");
  for (const SweepPoint& p : points) {
    RunSpec spec;
    try {
      spec = point_spec(c, p);
    } catch (const InputError&) {
      continue;
    }
    const int64_t hosted = run.world ? int64_t(run.world->local_ranks().size()) : p.world();
    require_fits(planner::run_need(spec, hosted, !run.world, /*conformance=*/false), run.limits,
                 "sweep point " + p.label());
  }
  return points;
}

// The points still to run, with the rounds an earlier run measured of each.
struct Todo {
  std::vector<SweepPoint> points;
  std::vector<int> first_round;                // of each point: the rounds an earlier run measured
  std::vector<std::vector<PointResult>> got;  // its rounds so far (the writer's)
};

// Which points are done, and how many rounds of the others, is the writer's
// to say (it holds the CSV and the rounds file): under mpirun every process
// follows its list.
Todo todo_points(const SweepConfig& c, const SweepRun& run, bool writer, const std::vector<SweepPoint>& points,
                 const std::set<std::string>& skip,
                 const std::map<std::string, std::vector<PointResult>>& rounds_done, SweepSummary& sum) {
  std::vector<double> done(points.size(), 0.0);  // -1: done
  if (writer)
    for (size_t k = 0; k < points.size(); ++k) {
      const auto it = rounds_done.find(points[k].key());
      done[k] = skip.count(points[k].key())   ? -1.0
                : it == rounds_done.end() ? 0.0
                                          : double(std::min<size_t>(it->second.size(), size_t(c.rounds - 1)));
    }
  if (run.world) run_ranks(*run.world, [&](Communicator& comm) { comm.broadcast(done.data(), done.size(), DType::f64, 0); });
  Todo todo;
  for (size_t k = 0; k < points.size(); ++k) {
    if (done[k] < 0) {
      ++sum.skipped;
      continue;
    }
    ++sum.points;
    todo.points.push_back(points[k]);
    todo.first_round.push_back(int(done[k]));
    todo.got.emplace_back();
    if (writer && done[k] > 0) {
      const std::vector<PointResult>& earlier = rounds_done.at(points[k].key());
      todo.got.back().assign(earlier.begin(), earlier.begin() + std::ptrdiff_t(done[k]));
    }
  }
  return todo;
}

// What the plan rows need, each measured once: each shape's rates, each
// world's figures (hw), and ranks computing side by side
// (ShapeRates::corun_scale) once per shape and count: the median of c.rounds
// windows (corun_ratio), taken one at the start of each of the sweep's rounds
// for the shapes and counts its points need (windows), as a point's own
// rounds are spread over the sweep; a single window caught whole by a slow
// spell of the host once measured 1.85 where the other runs measured
// 1.05-1.08. Others (a resumed run's earlier points): the c.rounds windows
// back to back, at once.
class PlanFigures {
 public:
  PlanFigures(const SweepConfig& c, const Limits& limits) : c_(c), limits_(limits) {}

  LocalHardware hw;
  std::map<ShapeKey, ShapeRates> rates;
  std::map<std::pair<ShapeKey, int>, std::vector<double>> windows;
  double peak_rank = 0;  // one rank's MFU peak, FLOP/s

  // The ok rows of this run, by point key.
  void point_done(const SweepPoint& p, const PointResult& r) { done_ok_[p.key()] = r; }

  void corun_for(const ShapeKey& key, int together) {
    if (together < 2 || !rates[key].step_measured || rates[key].corun_scale.count(together)) return;
    rates[key].corun_scale[together] = corun_scale(c_, key, together, limits_, windows[{key, together}]);
  }

  // Point p's shape's figures, its split's and its world's measured now if
  // not yet.
  const ShapeRates& figures_for(const SweepPoint& p, const PointResult& r) {
    const ShapeKey key = shape_key(p, r);
    if (!rates.count(key)) rates[key] = measure_rates(c_, key, hw, peak_rank, limits_, same_point(key));
    corun_for(key, std::min(p.world(), hw.cores));
    add_split(rates[key], key, p, r);
    measure_world(hw, p.world());
    return rates[key];
  }

 private:
  // A shape's single-rank step, when the sweep measured that very point
  // (same batch and seq: weak scaling at dp1 gives it the shape's batch).
  const PointResult* same_point(const ShapeKey& key) const {
    const auto it = done_ok_.find(single_rank_point(key).key());
    if (it == done_ok_.end() || it->second.seq != c_.seq ||
        it->second.global_batch != key.batch())
      return nullptr;
    return &it->second;
  }

  // A tensor- or context-parallel point's GEMM efficiency at its rank's
  // shapes and its attention core.
  void add_split(ShapeRates& into, const ShapeKey& key, const SweepPoint& p, const PointResult& r) {
    const MeshShape& mesh = p.spec.mesh;
    if (mesh.tp == 1 && mesh.cp == 1) return;
    const ModelConfig& m = p.spec.train.model;
    if (r.seq % mesh.cp != 0 || m.C % mesh.tp != 0 || m.NH % mesh.tp != 0) return;
    measure_split_gemm_efficiency(into, m, key.sequences, r.seq, peak_rank, mesh.tp, mesh.cp, 3);
    try {
      add_cp_attention(into, m, p.spec.train.precision, key.sequences, int(r.seq), mesh.tp, mesh.cp,
                       p.spec.context.algo, p.spec.context.zigzag);
    } catch (const InputError&) {
      // A split the attention cannot run (Ulysses' heads not splitting
      // over cp): the planner rejects its row too.
    }
  }

  const SweepConfig& c_;
  const Limits& limits_;
  std::map<std::string, PointResult> done_ok_;
};

// One result line of the table (SweepRun::table).
std::string table_line(const SweepPoint& p, const PointResult& r) {
  char line[256];
  if (r.status == "ok")
    std::snprintf(line, sizeof line, "%-44s %10.4f s %12.0f tok/s  MFU %6.2f%%  dp %10lld B/step  bubble %.3f",
                  p.label().c_str(), r.step_time_s, r.tokens_per_s, 100 * r.mfu, (long long)r.comm_dp_bytes,
                  r.bubble);
  else
    std::snprintf(line, sizeof line, "%-44s %s: %.180s", p.label().c_str(), r.status.c_str(), r.reason.c_str());
  return line;
}

// One sweep's run: its outputs, the points to run and the plan rows'
// figures; run_sweep calls its steps in order.
class SweepDriver {
 public:
  SweepDriver(const SweepConfig& c, const SweepRun& run, const std::set<std::string>& skip)
      : c_(c), run_(run), skip_(skip), writer_(!run.world || hosts_rank(*run.world, 0)),
        extrapolates_(writer_ && !run.world && !run.plan_csv_path.empty() && !c.extrapolate.empty()),
        figures_(c, run.limits) {}

  void select(const std::map<std::string, std::vector<PointResult>>& rounds_done) {
    if (writer_) load_before_ = sample_host_load();
    todo_ = todo_points(c_, run_, writer_, hosted_points(c_, run_), skip_, rounds_done, sum);
  }

  // The CSV writers, the MFU peak and, with plan rows, this machine's figures.
  void open_outputs() {
    if (writer_) csv_ = std::make_unique<ResultWriter>(run_.csv_path, "sweep");
    figures_.peak_rank = c_.peak_gflops * 1e9;
    if (writer_ && figures_.peak_rank == 0 && !todo_.points.empty() && !run_.peak_flops)
      figures_.peak_rank = kernels::measure_sgemm_gflops(512, 0.3) * 1e9;
    if (extrapolates_ && !skip_.empty()) drop_extrapolated_rows(run_.plan_csv_path, c_.inputs);
    if (writer_ && !run_.world && !run_.plan_csv_path.empty() && !todo_.points.empty()) open_plan_csv();
    if (writer_ && c_.rounds > 1 && !run_.rounds_csv_path.empty())
      rounds_csv_ = std::make_unique<CsvWriter>(run_.rounds_csv_path, round_columns());
  }

  // Round-major: round 0 of every point, then round 1, ...; a point's row
  // (and plan row) when its last round ends, or its first fails.
  void run_rounds() {
    const std::set<std::pair<ShapeKey, int>> corun_need = corun_needs();
    const SweepConfig window = round_config(c_);
    finished_.assign(todo_.points.size(), false);
    for (int first : todo_.first_round) runs_ += size_t(c_.rounds - first);
    started_ = clock::now();
    for (int round = 0; round < c_.rounds; ++round) {
      for (const auto& need : corun_need)
        figures_.windows[need].push_back(corun_ratio(window, need.first, need.second, run_.limits));
      for (size_t j = 0; j < todo_.points.size(); ++j) {
        const size_t k = (j + round_offset(round, c_.rounds, todo_.points.size())) % todo_.points.size();
        if (!finished_[k] && round >= todo_.first_round[k]) run_round(window, k, round);
      }
    }
  }

  // Every series continued from its largest measured point, a resumed run's
  // earlier points included (their shapes' figures and ring steps measured
  // now if this run did not).
  void extrapolate() {
    std::vector<MeasuredPoint> all =
        extrapolates_ && !skip_.empty() ? earlier_points(run_, c_, skip_) : std::vector<MeasuredPoint>{};
    if (extrapolates_) all.insert(all.end(), measured_.begin(), measured_.end());
    if (all.empty()) return;
    if (!plan_csv_) {
      if (figures_.peak_rank == 0) figures_.peak_rank = kernels::measure_sgemm_gflops(512, 0.3) * 1e9;
      open_plan_csv();
    }
    for (const MeasuredPoint& m : all) {
      figures_.figures_for(m.point, m.result);
      // Extrapolated: one rank per core, every core busy.
      figures_.corun_for(shape_key(m.point, m.result), figures_.hw.cores);
    }
    for (const PlanRow& row : extrapolated_plan_rows(c_, all, figures_.hw, figures_.rates))
      plan_csv_->write(row.meta, row.values);
  }

  // The warning naming the rows whose step times spread past the bound,
  // with the load the host showed over the run.
  void warn_unreliable() {
    if (!writer_ || unreliable_.empty()) return;
    const std::string w = unreliable_warning(unreliable_, sum.ok, load_before_, sample_host_load(),
                                             int(std::max(1u, std::thread::hardware_concurrency())));
    *(run_.warnings ? run_.warnings : &std::cerr) << w << std::endl;
  }

  SweepSummary sum;

 private:
  using clock = std::chrono::steady_clock;

  void open_plan_csv() {
    plan_csv_ = std::make_unique<ResultWriter>(run_.plan_csv_path, "plan");
    figures_.hw = calibrate::measure_local_hardware(figures_.peak_rank,
                                                    int(std::max(1u, std::thread::hardware_concurrency())));
  }

  // The shapes and counts of ranks computing at once the plan rows will need
  // a corun factor for (PlanFigures::corun_for), one window of each per round.
  std::set<std::pair<ShapeKey, int>> corun_needs() const {
    std::set<std::pair<ShapeKey, int>> need;
    if (!plan_csv_) return need;
    const int cores = figures_.hw.cores;
    for (const SweepPoint& p : todo_.points) {
      PointResult r;
      r.seq = c_.seq;
      r.global_batch = point_global_batch(c_, p);
      if (p.world() >= 2 && cores >= 2) need.insert({shape_key(p, r), std::min(p.world(), cores)});
      if (extrapolates_ && cores >= 2) need.insert({shape_key(p, r), cores});
    }
    return need;
  }

  double peak_of(const SweepPoint& p) const {
    return c_.peak_gflops > 0 || !run_.peak_flops ? figures_.peak_rank : run_.peak_flops(p);
  }

  void progress(const SweepPoint& p, int round) {
    const double el = std::chrono::duration<double>(clock::now() - started_).count();
    char eta[32] = "?";
    if (run_no_) std::snprintf(eta, sizeof eta, "%.0fs", el / double(run_no_) * double(runs_ - run_no_));
    *run_.progress << "[" << run_no_ + 1 << "/" << runs_ << "] " << p.label();
    if (c_.rounds > 1) *run_.progress << " round " << round + 1 << "/" << c_.rounds;
    *run_.progress << " ... ETA " << eta << std::endl;
  }

  // Round `round` of todo point k; its rows when it is finished.
  void run_round(const SweepConfig& window, size_t k, int round) {
    const SweepPoint& p = todo_.points[k];
    if (writer_ && run_.progress) progress(p, round);
    ++run_no_;
    PointResult r = run_point(window, p, writer_ ? peak_of(p) : 0, run_.world, run_.open_device);
    // Not ok (rejected alike on every process; under mpirun a failure
    // throws): its row now, no more rounds.
    if (r.status != "ok" || round == c_.rounds - 1) finished_[k] = true;
    if (!writer_) return;
    if (r.status == "ok") todo_.got[k].push_back(r);
    if (!finished_[k]) {
      if (rounds_csv_) rounds_csv_->write_row(round_row(c_, p, round, r));
      return;
    }
    if (r.status == "ok") r = combine_rounds(todo_.got[k]);
    write_rows(p, r);
  }

  // Point p's row, its plan row and its table line.
  void write_rows(const SweepPoint& p, const PointResult& r) {
    const RunMeta meta = point_meta(c_, p, r, run_.meta);
    csv_->write(meta, to_record(p, r));
    if (r.status == "ok") figures_.point_done(p, r);
    if (plan_csv_ && r.status == "ok") {
      measured_.push_back({p, r, meta});
      const PlanRow pr = plan_row(c_, p, r, figures_.hw, meta, figures_.figures_for(p, r));
      plan_csv_->write(pr.meta, pr.values);
    }
    (r.status == "ok" ? sum.ok : r.status == "rejected" ? sum.rejected : sum.failed) += 1;
    if (unreliable(r)) {
      unreliable_.push_back({p.label(), r.step_time_cv});
      ++sum.unreliable;
    }
    if (run_.table) *run_.table << table_line(p, r) << std::endl;
  }

  const SweepConfig& c_;
  const SweepRun& run_;
  const std::set<std::string>& skip_;
  const bool writer_, extrapolates_;
  PlanFigures figures_;
  Todo todo_;
  std::unique_ptr<ResultWriter> csv_, plan_csv_;
  std::unique_ptr<CsvWriter> rounds_csv_;
  std::vector<bool> finished_;
  std::vector<MeasuredPoint> measured_;  // ok points with plan rows, for the extrapolation
  std::vector<UnreliableRow> unreliable_;  // this run's rows past the spread bound
  HostLoad load_before_;
  size_t runs_ = 0, run_no_ = 0;
  clock::time_point started_;
};

}  // namespace

SweepSummary run_sweep(const SweepConfig& c, const SweepRun& run, const std::set<std::string>& skip,
                       const std::map<std::string, std::vector<PointResult>>& rounds_done) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!run.world || hosts_rank(*run.world, 0)) check_outputs(c, run);
  SweepDriver sweep(c, run, skip);
  sweep.select(rounds_done);
  sweep.open_outputs();
  sweep.run_rounds();
  sweep.extrapolate();
  sweep.warn_unreliable();
  sweep.sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sweep.sum;
}

}  // namespace pb::sweep
