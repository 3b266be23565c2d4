// The sweep's config and its points: [sweep] read and checked, expanded into
// points in run order, each point's run spec.
#include "suites/sweep/sweep.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "harness/mesh.h"
#include "harness/status.h"
#include "impl/registry.h"
#include "impl/spec/run_spec.h"
#include "reference/model_config.h"
#include "suites/planner/machine.h"

namespace pb::sweep {
namespace {

constexpr int64_t kMaxGlobalBatch = int64_t(1) << 30;  // sequences per step

std::vector<std::string> read_scaling(ConfigReader& r) {
  std::vector<std::string> v;
  try {
    v = r.get<std::vector<std::string>>("sweep.scaling", {"weak"});
  } catch (const InputError&) {
    v = {r.get<std::string>("sweep.scaling", "weak")};
  }
  require(!v.empty(), "sweep.scaling: must not be empty");
  for (const auto& s : v)
    require(s == "weak" || s == "strong", "sweep.scaling: must be weak or strong, got '" + s + "'");
  return v;
}

template <class T>
void non_empty(const std::vector<T>& v, const char* key) {
  require(!v.empty(), std::string(key) + ": must not be empty");
}

// The canonical text of a strategy / mesh entry (InputError naming the key).
std::string canonical_strategy(const std::string& text) {
  RunSpec s;
  apply_strategy_text(s, text, fault_catalogue(), "sweep.strategies");
  return strategy_text(s);
}

// A sweep.points entry, "<mesh> <strategy> [model]", in its parts (model:
// empty when the point runs on every sweep.models entry).
struct PointText {
  std::string mesh, strategy, model;
};
PointText split_point(const std::string& p) {
  const size_t sp = p.find(' ');
  require(sp != std::string::npos && sp > 0 && sp + 1 < p.size(),
          "sweep.points: '" + p + "' is not \"<mesh> <strategy> [model]\" (e.g. \"tp2 shard=none,sp=on\")");
  const size_t sp2 = p.find(' ', sp + 1);
  PointText t{p.substr(0, sp), p.substr(sp + 1, sp2 == std::string::npos ? std::string::npos : sp2 - sp - 1), ""};
  if (sp2 != std::string::npos) {
    t.model = p.substr(sp2 + 1);
    require(!t.model.empty() && t.model.find(' ') == std::string::npos,
            "sweep.points: '" + p + "' is not \"<mesh> <strategy> [model]\"");
  }
  return t;
}

}  // namespace

SweepConfig read_sweep_config(ConfigReader& r) {
  SweepConfig c;
  c.strategies = r.get<std::vector<std::string>>("sweep.strategies", c.strategies);
  c.worlds = r.get<std::vector<int64_t>>("sweep.worlds", c.worlds, Bounds::positive());
  const bool meshes_given = r.has("sweep.meshes");  // before get(), which writes the default back
  c.meshes = r.get<std::vector<std::string>>("sweep.meshes", {});
  require(!meshes_given || !c.meshes.empty(), "sweep.meshes: empty; list meshes (e.g. [\"dp2\", \"dp2.tp2\"]) or "
                                                       "leave the key out to sweep sweep.worlds");
  c.models = r.get<std::vector<std::string>>("sweep.models", c.models);
  c.precisions = r.get<std::vector<std::string>>("sweep.precisions", c.precisions);
  c.microbatches = r.get<std::vector<int64_t>>("sweep.microbatches", c.microbatches, Bounds::positive());
  c.scaling = read_scaling(r);
  c.batch_per_rank = r.get<int>("sweep.batch_per_rank", c.batch_per_rank, Bounds::positive());
  // Strong scaling's default batch: batch_per_rank x the largest dp.
  int64_t max_dp = c.worlds.empty() ? 1 : *std::max_element(c.worlds.begin(), c.worlds.end());
  if (!c.meshes.empty()) max_dp = 1;
  for (auto& m : c.meshes) {
    const MeshShape ms = parse_mesh(m, "sweep.meshes");
    m = mesh_text(ms);  // canonical: the row's spelling and the resume key
    max_dp = std::max<int64_t>(max_dp, ms.dp);
  }
  c.points = r.get<std::vector<std::string>>("sweep.points", {});
  for (auto& p : c.points) {
    const PointText t = split_point(p);
    const MeshShape ms = parse_mesh(t.mesh, "sweep.points");
    max_dp = std::max<int64_t>(max_dp, ms.dp);
    if (!t.model.empty()) named_model(t.model);  // InputError naming the model when unknown
    p = mesh_text(ms) + " " + canonical_strategy(t.strategy) + (t.model.empty() ? "" : " " + t.model);
  }
  // The largest point's global batch under weak scaling (and strong
  // scaling's default): a product checked before it becomes an int, named
  // by its factors.
  const bool weak = std::find(c.scaling.begin(), c.scaling.end(), "weak") != c.scaling.end();
  int64_t largest = 0;
  if (__builtin_mul_overflow(int64_t(c.batch_per_rank), max_dp, &largest) || largest > kMaxGlobalBatch) {
    const std::string product = "sweep.batch_per_rank x the largest dp = " + std::to_string(c.batch_per_rank) +
                                " x " + std::to_string(max_dp) + " sequences per step is more than 2^30";
    require(!weak, product + " (weak scaling)");
    require(r.has("sweep.global_batch"), product + " (strong scaling's default sweep.global_batch)");
  }
  c.global_batch = r.get<int>("sweep.global_batch", int(std::min(largest, kMaxGlobalBatch)), Bounds::positive());
  c.seq = r.get<int>("sweep.seq", c.seq, Bounds::positive());
  c.steps = r.get<int>("sweep.steps", c.steps, Bounds::positive());
  c.warmup = r.get<int>("sweep.warmup", c.warmup, Bounds::non_negative());
  c.min_seconds = r.get<double>("sweep.min_seconds", 0.0, Bounds::non_negative());
  require(c.min_seconds <= 3600, "sweep.min_seconds: at most 3600 seconds per point (got " +
                                     std::to_string(c.min_seconds) + ")");
  require(c.min_seconds == 0 || c.warmup >= 1,
          "sweep.min_seconds: needs sweep.warmup >= 1 (the last warm-up step sets the number of measured steps)");
  require(c.min_seconds == 0 || c.steps <= INT32_MAX / SweepConfig::kMaxStepsFactor - c.warmup,
          "sweep.steps: too many with sweep.min_seconds (at most " +
              std::to_string(INT32_MAX / SweepConfig::kMaxStepsFactor - c.warmup) + ")");
  c.rounds = r.get<int>("sweep.rounds", c.rounds, Bounds::positive());
  require(c.rounds <= SweepConfig::kMaxRounds, "sweep.rounds: at most " + std::to_string(SweepConfig::kMaxRounds) +
                                                   " windows per point (got " + std::to_string(c.rounds) + ")");
  c.ranks_per_node = r.get<int>("sweep.ranks_per_node", c.ranks_per_node, Bounds::non_negative());
  c.peak_gflops = r.get<double>("sweep.peak_gflops", 0.0, Bounds::non_negative());
  c.extrapolate = r.get<std::vector<int64_t>>("sweep.extrapolate", {}, Bounds::positive());
  c.machine = r.get<std::string>("sweep.machine", "");
  c.device = parse_device(r.get_enum("sweep.device", "cpu", {"cpu", "cuda"}));
  r.check_no_unknown_keys();
  require(c.device == Device::cpu || c.extrapolate.empty(),
          "sweep.extrapolate: plan rows come from a sweep on the CPU's local backend; on sweep.device = cuda give "
          "`parabench plan --machine` the GPU's profile instead");
  for (int64_t w : c.extrapolate)
    require(w <= (int64_t(1) << 24), "sweep.extrapolate: " + std::to_string(w) + " ranks is beyond 2^24");
  require(c.machine.empty() || !c.extrapolate.empty(), "sweep.machine: only used with sweep.extrapolate");
  if (!c.machine.empty()) {  // an unknown name or a bad file: named as this config key
    try {
      planner::load_machine(c.machine);
    } catch (const InputError& e) {
      std::string msg = e.what();
      if (msg.rfind("--machine: ", 0) == 0) msg = msg.substr(11);
      throw InputError("sweep.machine: " + msg);
    }
  }
  for (const std::string& f : {r.source(), c.machine}) {
    std::error_code ec;
    if (!f.empty() && std::filesystem::is_regular_file(f, ec)) c.inputs.push_back(f);
  }
  non_empty(c.strategies, "sweep.strategies");
  non_empty(c.worlds, "sweep.worlds");
  non_empty(c.models, "sweep.models");
  non_empty(c.precisions, "sweep.precisions");
  non_empty(c.microbatches, "sweep.microbatches");
  for (auto& s : c.strategies) s = canonical_strategy(s);
  for (const auto& m : c.models) named_model(m);
  for (const auto& p : c.precisions) parse_precision(p);
  return c;
}

std::string SweepPoint::strategy() const { return strategy_text(spec); }

std::string SweepPoint::mesh() const { return mesh_text(spec.mesh); }

std::string SweepPoint::precision() const { return precision_name(spec.train.precision); }

std::string SweepPoint::key() const {
  return strategy() + "|" + mesh() + "|" + model() + "|" + precision() + "|" + std::to_string(microbatches) + "|" +
         scaling;
}

std::string SweepPoint::label() const {
  return mesh() + " " + strategy() + " " + model() + " " + precision() + " mb" + std::to_string(microbatches) + " " +
         scaling;
}

SweepPoint make_point(const std::string& strategy, const std::string& mesh, const std::string& model,
                      const std::string& precision, const std::string& scaling, int microbatches,
                      const std::string& field) {
  SweepPoint p;
  p.spec.mesh = parse_mesh(mesh, field);
  apply_strategy_text(p.spec, strategy, fault_catalogue(), field);
  p.spec.train.model = named_model(model);
  p.spec.train.precision = parse_precision(precision);
  p.scaling = scaling;
  p.microbatches = microbatches;
  return p;
}

std::vector<SweepPoint> expand(const SweepConfig& c) {
  std::vector<SweepPoint> v;
  for (const auto& sc : c.scaling)
    for (const auto& m : c.models)
      for (const auto& p : c.precisions)
        for (int64_t mb : c.microbatches)
          for (const auto& s : c.strategies) {
            std::vector<std::string> meshes = c.meshes;
            if (meshes.empty())
              for (int64_t w : c.worlds) meshes.push_back("dp" + std::to_string(w));
            for (const auto& mesh : meshes) v.push_back(make_point(s, mesh, m, p, sc, int(mb), "sweep.strategies"));
          }
  for (const auto& sc : c.scaling)
    for (const auto& m : c.models)
      for (const auto& p : c.precisions)
        for (int64_t mb : c.microbatches)
          for (const auto& pt : c.points) {
            const PointText t = split_point(pt);
            if (!t.model.empty() && m != c.models.front()) continue;  // a point naming its model runs once
            v.push_back(make_point(t.strategy, t.mesh, t.model.empty() ? m : t.model, p, sc, int(mb), "sweep.points"));
          }
  return v;
}

int64_t point_global_batch(const SweepConfig& c, const SweepPoint& p) {
  return p.scaling == "weak" ? int64_t(c.batch_per_rank) * p.dp() : int64_t(c.global_batch);
}

RunSpec point_spec(const SweepConfig& c, const SweepPoint& p) {
  const int64_t global_batch = point_global_batch(c, p);
  const char* bkey = p.scaling == "weak" ? "sweep.batch_per_rank" : "sweep.global_batch";
  require(global_batch <= kMaxGlobalBatch,
          std::string(bkey) + ": the global batch " + std::to_string(global_batch) + " is more than 2^30 sequences");
  RunSpec spec = p.spec;
  TrainConfig& cfg = spec.train;
  cfg.seq = c.seq;
  cfg.batch = int(global_batch);
  cfg.microbatches = p.microbatches;
  // The most steps the point may run (sweep.min_seconds raises the measured ones).
  cfg.steps = c.warmup + (c.min_seconds > 0 ? c.steps * SweepConfig::kMaxStepsFactor : c.steps);
  cfg.threads = 1;
  cfg.device = c.device;
  cfg.validate();
  if (!spec.mesh.ranks_per_node) spec.mesh.ranks_per_node = c.ranks_per_node;
  require(cfg.batch % (p.dp() * p.microbatches) == 0,
          std::string(bkey) + ": global batch " + std::to_string(cfg.batch) + " must be divisible by dp x microbatches (" +
              std::to_string(p.dp()) + " x " + std::to_string(p.microbatches) + ")");
  validate(spec);
  const Strategy& strat = strategy_for(spec);
  strat.validate(spec);  // bad input is found here, alike on every rank, before any communication
  require(spec.pipe.schedule != pipeline::ScheduleKind::pipedream_2bw,
          "sweep.strategies: 2bw trains its whole window at once; the sweep times optimizer steps one by one");
  return spec;
}

}  // namespace pb::sweep
