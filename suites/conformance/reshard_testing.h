// What the resharding tests (reshard_test.cc, reshard_pipeline_test.cc) build
// their runs from: one training shape (4 steps split at 2, seq 16, 24
// sequences: divides over dp 1, 2, 3 and 4), the pairs and single sides on
// it, the failing quantities of a result, and a scratch directory
// (docs/checkpoint.md).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "suites/conformance/reshard.h"

namespace pb::reshard_testing {

// blocks > 0 sets the model's depth (room for pp x v stages); a pipeline
// side then runs 2 microbatches per stage when per_stage_microbatches.
struct ReshardShape {
  int blocks = 0;
  bool per_stage_microbatches = false;
};

inline bool pipelined(const RunSpec& s) { return s.mesh.pp > 1 || s.pipe.schedule.has_value(); }

// The tests' training on `c` in place: the model (its depth per shape),
// 4 steps, seq 16, 24 sequences; a pipeline side's microbatches per shape.
inline void shape_train(RunSpec& s, const std::string& model, const ReshardShape& shape) {
  s.train.model = named_model(model);
  if (shape.blocks > 0) s.train.model.L = shape.blocks;
  s.train.steps = 4;
  s.train.seq = 16;
  s.train.batch = 24;
  if (shape.per_stage_microbatches && pipelined(s)) s.train.microbatches = 2 * s.mesh.pp;
}

// A against B checkpointed at step 2; the model tiny, tiny-tp where a side
// splits tensors (tp or cp), tiny-moe where one has experts, unless named.
inline ReshardRun pair(const std::string& a, const std::string& b, Precision p, const std::string& model,
                       const ReshardShape& shape) {
  ReshardRun r;
  r.from = parse_reshard_side(a, "A", nullptr);
  r.to = parse_reshard_side(b, "B", &r.faults);
  const bool moe = r.from.mesh.ep > 1 || r.to.mesh.ep > 1;
  const bool split = r.from.mesh.tp > 1 || r.to.mesh.tp > 1 || r.from.mesh.cp > 1 || r.to.mesh.cp > 1;
  const std::string m = !model.empty() ? model : moe ? "tiny-moe" : split ? "tiny-tp" : "tiny";
  for (RunSpec* x : {&r.from, &r.to}) {
    x->train = TrainConfig{};
    x->train.precision = p;
    shape_train(*x, m, shape);
  }
  r.at = 2;
  return r;
}

// One side on its own (train_and_save, reshard_checkpoint), its training
// otherwise as the side's text gives it.
inline RunSpec side(const std::string& text, const std::string& model, const ReshardShape& shape) {
  RunSpec s = parse_reshard_side(text, "test", nullptr);
  shape_train(s, model, shape);
  return s;
}

// The label and every quantity that failed, for a test's message.
inline std::string why(const ReshardResult& r) {
  std::string out = r.label;
  for (const auto* v : {&r.rule, &r.fp64, &r.bits})
    for (const QuantityCheck& q : *v)
      if (!q.pass) out += " [" + q.quantity + "@" + std::to_string(q.step) + " ratio " + std::to_string(q.ratio) + "]";
  return out;
}

inline bool is_empty_dir(const std::string& d) {
  return std::filesystem::is_directory(d) && std::filesystem::is_empty(d);
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// A scratch directory under the system's temp, per process and tag; removed
// when the test ends.
struct TempDir {
  std::filesystem::path path;
  TempDir(const std::string& prefix, const std::string& tag)
      : path(std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()) + "_" + tag)) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path.string(); }
  std::string sub(const std::string& s) const {
    std::filesystem::create_directories(path / s);
    return (path / s).string();
  }
};

}  // namespace pb::reshard_testing
