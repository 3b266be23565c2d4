#include "reference/export.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "harness/io/config.h"
#include "harness/io/output_file.h"
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

  std::vector<double> loss, norm, lr, aux;
  std::vector<int64_t> tokens;  // a mixture of experts (steps, MoE layers, experts)
  std::vector<T> grads1;
  for (int s = 0; s < cfg.steps; ++s) {
    StepStats st = t.step();
    loss.push_back(st.loss);
    norm.push_back(st.grad_norm);
    lr.push_back(st.lr);
    for (double c : st.moe_tokens) tokens.push_back(int64_t(c));
    aux.insert(aux.end(), st.moe_aux.begin(), st.moe_aux.end());
    if (s == 0) grads1.assign(t.grads(), t.grads() + l.total());
  }
  SafetensorsWriter trace;
  add_trace_meta(trace, cfg, hash);
  trace.add("loss", loss, {cfg.steps});
  trace.add("grad_norm", norm, {cfg.steps});
  trace.add("lr", lr, {cfg.steps});
  if (cfg.model.moe.experts > 0) {
    const int64_t Lm = cfg.model.moe_layers();
    trace.add(kMoeTokens, tokens, {cfg.steps, Lm, cfg.model.moe.experts});
    trace.add(kMoeAux, aux, {cfg.steps, Lm});
  }
  add_named(trace, l, "grads.", grads1.data());
  add_named(trace, l, "params.", t.params());
  paths.push_back((dir / "trace.safetensors").string());
  trace.write(paths.back());
  return paths;
}

namespace fs = std::filesystem;

constexpr const char* kFiles[] = {"init.safetensors", "batch.safetensors", "trace.safetensors"};

// The outermost of p's missing ancestors (p included); empty when p exists.
fs::path outermost_missing(fs::path p) {
  std::error_code ec;
  fs::path top;
  while (!p.empty() && !fs::exists(fs::symlink_status(p, ec))) {
    top = p;
    if (p.parent_path() == p) break;
    p = p.parent_path();
  }
  return top;
}

// A fresh directory NAME.XXXXXX in `parent`, created by mkdtemp (never an existing one).
fs::path fresh_dir(const fs::path& parent, const std::string& name, const std::string& dir) {
  std::string t = (parent / (name + ".XXXXXX")).string();
  require(::mkdtemp(t.data()) != nullptr, "export: cannot write --dir '" + dir + "': cannot create a directory in '" +
                                              parent.string() + "': " + std::strerror(errno));
  return t;
}

// Moves a staged file to its destination: a rename over a new name or a
// regular file; through write_output_file for a link, pipe or device there.
void commit(const fs::path& staged, const fs::path& to) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(to, ec);
  if (!fs::exists(st) || fs::is_regular_file(st)) {
    fs::rename(staged, to, ec);
    require(!ec, "export: cannot move '" + staged.string() + "' to '" + to.string() + "': " + ec.message());
    return;
  }
  std::ifstream in(staged, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  require(bool(in) || in.eof(), "export: cannot read back '" + staged.string() + "'");
  write_output_file(to.string(), bytes, "export --dir");
}

}  // namespace

double export_bytes(const TrainConfig& cfg) {
  const double tokens = double(cfg.steps) * cfg.batch * cfg.seq;
  const double params = double(cfg.model.num_params()) * double(dtype_size(storage_dtype(cfg.precision)));
  return 3 * 2 * 4 * tokens + 6 * params;
}

std::vector<std::string> export_golden(const TrainConfig& cfg, const std::string& dir,
                                       const std::string& config_toml) {
  std::error_code ec;
  const fs::path to(dir);
  const bool existed = fs::exists(fs::symlink_status(to, ec));
  require(!existed || fs::is_directory(to, ec), "export: --dir '" + dir + "' exists and is not a directory");
  if (existed)
    for (const char* f : kFiles) check_output_path((to / f).string(), "export --dir");
  // Missing parents are created, and removed again if the export fails.
  const fs::path parent = to.has_parent_path() ? to.parent_path() : fs::path(".");
  const fs::path first_new = outermost_missing(parent);
  fs::create_directories(parent, ec);
  require(!ec, "export: cannot create directory '" + parent.string() + "': " + ec.message());
  fs::path staging;
  try {
    std::string name(1, '.');  // a hidden NAME.export.XXXXXX beside a new directory
    name.append(to.filename().string()).append(".export");
    staging = existed ? fresh_dir(to, ".export", dir) : fresh_dir(parent, name, dir);
    if (!existed) {  // mkdtemp makes it 0700; the directory it becomes gets the usual mode
      const mode_t mask = ::umask(0);
      ::umask(mask);
      fs::permissions(staging, fs::perms(0777 & ~mask), ec);
    }
    dispatch_dtype(storage_dtype(cfg.precision), [&](auto t) {
      export_typed<decltype(t)>(cfg, staging, config_toml);
      return 0;
    });
    if (existed) {
      for (const char* f : kFiles) commit(staging / f, to / f);
      fs::remove(staging, ec);
    } else {
      fs::rename(staging, to, ec);
      require(!ec, "export: cannot move '" + staging.string() + "' to '" + dir + "': " + ec.message());
    }
  } catch (...) {
    if (!staging.empty()) fs::remove_all(staging, ec);
    if (!first_new.empty()) fs::remove_all(first_new, ec);
    throw;
  }
  std::vector<std::string> paths;
  for (const char* f : kFiles) paths.push_back((to / f).string());
  return paths;
}

}  // namespace pb
