#include "reference/export.h"

#include <filesystem>
#include <system_error>

#include "harness/io/config.h"
#include "harness/io/safetensors.h"
#include "harness/status.h"
#include "reference/data.h"
#include "reference/init.h"
#include "reference/trainer.h"

namespace pb {
namespace {

template <class T>
void add_named(SafetensorsWriter& w, const ParamLayout& l, const std::string& prefix, const T* flat) {
  for (const auto& p : l.params()) w.add(prefix + p.name, flat + p.offset, Shape(p.shape));
}

void add_meta(SafetensorsWriter& w, const TrainConfig& cfg, const std::string& toml, const std::string& hash,
              double floor) {
  w.set_metadata("format", kExportFormat);
  w.set_metadata("layout", cfg.model.llama() ? "Linear (out, in); Hugging Face Llama names; lm_head untied; RoPE "
                                                "rotate-half (results/TRACE.md)"
                                              : "Linear (out, in); lm_head tied to wte");
  w.set_metadata("precision", precision_name(cfg.precision));
  w.set_metadata("entropy_floor_nats", std::to_string(floor));
  w.set_metadata("config", toml);
  w.set_metadata("config_hash", hash);
}

// The reference's own trace, in the format a framework writes for verify.
void add_trace_meta(SafetensorsWriter& w, const TrainConfig& cfg, const std::string& hash) {
  w.set_metadata("format", kTraceFormat);
  w.set_metadata("export_hash", hash);
  w.set_metadata("precision", precision_name(cfg.precision));
  w.set_metadata("framework", "parabench");
  w.set_metadata("strategy", "reference");
  w.set_metadata("mesh", "dp1");
  w.set_metadata("microbatches", std::to_string(cfg.microbatches));
}

template <class T>
std::vector<std::string> export_typed(const TrainConfig& cfg, const std::filesystem::path& dir,
                                      const std::string& toml) {
  const std::string hash = ConfigReader::from_string(toml, "export config").config_hash();
  ReferenceTrainer<T> t(cfg, SplitPlan{1, cfg.microbatches, false, {}});
  const ParamLayout& l = t.layout();
  MarkovSource src(cfg.model.V, cfg.data.seed, cfg.data.branching, cfg.data.mix);
  std::vector<std::string> paths;

  SafetensorsWriter init;
  add_meta(init, cfg, toml, hash, src.entropy_rate());
  add_named(init, l, "", t.params());
  paths.push_back((dir / "init.safetensors").string());
  init.write(paths.back());

  const size_t per = size_t(cfg.batch) * cfg.seq;
  std::vector<int32_t> inputs(per * cfg.steps), targets(per * cfg.steps);
  for (int s = 0; s < cfg.steps; ++s)
    src.batch(s, 0, cfg.batch, cfg.seq, inputs.data() + s * per, targets.data() + s * per);
  SafetensorsWriter batch;
  add_meta(batch, cfg, toml, hash, src.entropy_rate());
  batch.add("inputs", inputs, {cfg.steps, cfg.batch, cfg.seq});
  batch.add("targets", targets, {cfg.steps, cfg.batch, cfg.seq});
  paths.push_back((dir / "batch.safetensors").string());
  batch.write(paths.back());

  std::vector<double> loss, norm, lr;
  std::vector<T> grads1;
  for (int s = 0; s < cfg.steps; ++s) {
    StepStats st = t.step();
    loss.push_back(st.loss);
    norm.push_back(st.grad_norm);
    lr.push_back(st.lr);
    if (s == 0) grads1.assign(t.grads(), t.grads() + l.total());
  }
  SafetensorsWriter trace;
  add_trace_meta(trace, cfg, hash);
  trace.add("loss", loss, {cfg.steps});
  trace.add("grad_norm", norm, {cfg.steps});
  trace.add("lr", lr, {cfg.steps});
  add_named(trace, l, "grads.", grads1.data());
  add_named(trace, l, "params.", t.params());
  paths.push_back((dir / "trace.safetensors").string());
  trace.write(paths.back());
  return paths;
}

}  // namespace

std::vector<std::string> export_golden(const TrainConfig& cfg, const std::string& dir,
                                       const std::string& config_toml) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  require(!ec, "export: cannot create directory '" + dir + "': " + ec.message());
  return dispatch_dtype(storage_dtype(cfg.precision), [&](auto t) {
    return export_typed<decltype(t)>(cfg, dir, config_toml);
  });
}

}  // namespace pb
