#include "reference/trace_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "harness/io/config.h"
#include "harness/status.h"
#include "reference/data.h"
#include "reference/export.h"
#include "reference/train_config_io.h"

namespace pb {
namespace {

std::string q(const std::string& s) { return "'" + s + "'"; }

const std::string& meta(const SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  require(it != f.metadata().end(), f.name() + ": metadata key " + q(key) + " is missing");
  return it->second;
}

// Keys beyond `allowed` are refused, naming the first.
void only_keys(const SafetensorsFile& f, const std::set<std::string>& allowed) {
  for (const auto& [k, v] : f.metadata()) {
    if (allowed.count(k)) continue;
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    throw InputError(f.name() + ": unknown metadata key " + q(k) + " (format v1 has: " + list + ")");
  }
}

void expect_format(const SafetensorsFile& f, const char* want) {
  const std::string& got = meta(f, "format");
  require(got == want, f.name() + ": metadata 'format' is " + q(got) + ", expected " + q(want) +
                           (got == "parabench-golden-v1" ? " (an export of an older parabench: export again)" : ""));
}

int meta_int(const SafetensorsFile& f, const std::string& key, int lo, int hi) {
  const std::string& s = meta(f, key);
  long long v = 0;
  size_t used = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  require(used == s.size() && !s.empty() && v >= lo && v <= hi,
          f.name() + ": metadata " + q(key) + " is " + q(s) + ", expected an integer in [" + std::to_string(lo) +
              ", " + std::to_string(hi) + "]");
  return int(v);
}

// A name or label: 1 to 64 characters of [A-Za-z0-9._+:/-].
const std::string& meta_label(const SafetensorsFile& f, const std::string& key) {
  const std::string& s = meta(f, key);
  const bool ok = !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("._+:/-", c);
  });
  require(ok,
          f.name() + ": metadata " + q(key) + " must be 1 to 64 characters of letters, digits and ._+:/- (got " +
              std::to_string(s.size()) + " characters)");
  return s;
}

void expect_shape(const SafetensorsFile& f, const std::string& name, const Shape& want) {
  const TensorInfo& ti = f.info(name);
  require(ti.shape == want, f.name() + ": tensor " + q(name) + " has shape " + shape_str(ti.shape) + ", expected " +
                                shape_str(want));
}

// The values of a floating tensor of the given shape, widened exactly.
std::vector<double> read_float(const SafetensorsFile& f, const std::string& name, const Shape& want,
                               bool allow_bf16) {
  require(f.contains(name), f.name() + ": tensor " + q(name) + " is missing");
  expect_shape(f, name, want);
  const TensorInfo& ti = f.info(name);
  switch (ti.dtype) {
    case StDType::F64: return f.read<double>(name);
    case StDType::F32: {
      auto v = f.read<float>(name);
      return {v.begin(), v.end()};
    }
    case StDType::BF16:
      if (allow_bf16) {
        auto v = f.read<bf16>(name);
        std::vector<double> out(v.size());
        for (size_t i = 0; i < v.size(); ++i) out[i] = double(float(v[i]));
        return out;
      }
      break;
    default: break;
  }
  throw InputError(f.name() + ": tensor " + q(name) + " has dtype " + std::string(st_dtype_name(ti.dtype)) +
                   ", expected " + (allow_bf16 ? "F64, F32 or BF16" : "F64 or F32"));
}

std::vector<int64_t> read_counts(const SafetensorsFile& f, const std::string& name, int world) {
  expect_shape(f, name, {world});
  const TensorInfo& ti = f.info(name);
  require(ti.dtype == StDType::I64, f.name() + ": tensor " + q(name) + " has dtype " +
                                        std::string(st_dtype_name(ti.dtype)) + ", expected I64");
  auto v = f.read<int64_t>(name);
  for (size_t r = 0; r < v.size(); ++r)
    require(v[r] >= 0, f.name() + ": tensor " + q(name) + " is negative at rank " + std::to_string(r));
  return v;
}

// The optional MoE quantities (trace_format.h): only for a mixture-of-experts
// export, (steps, MoE layers, experts) I64 counts whose experts sum to the
// step's choices (tokens x top-k) in every layer, and (steps, MoE layers)
// floats. A dense export's trace naming them is refused as unknown.
void read_moe(const SafetensorsFile& f, const ExportDir& e, ForeignTrace& t, std::set<std::string>& known) {
  const ModelConfig& m = e.cfg.model;
  if (m.moe.experts == 0) return;
  known.insert(kMoeTokens);
  known.insert(kMoeAux);
  const int64_t S = e.cfg.steps, Lm = m.moe_layers(), E = m.moe.experts;
  const std::string dims = " (steps " + std::to_string(S) + ", MoE layers " + std::to_string(Lm) + ", experts " +
                           std::to_string(E) + " of " + q(m.name) + ")";
  if (f.contains(kMoeTokens)) {
    const TensorInfo& ti = f.info(kMoeTokens);
    require(ti.shape == Shape{S, Lm, E}, f.name() + ": tensor " + q(kMoeTokens) + " has shape " +
                                             shape_str(ti.shape) + ", expected " + shape_str(Shape{S, Lm, E}) + dims);
    require(ti.dtype == StDType::I64, f.name() + ": tensor " + q(kMoeTokens) + " has dtype " +
                                          std::string(st_dtype_name(ti.dtype)) + ", expected I64");
    const auto v = f.read<int64_t>(kMoeTokens);
    const int64_t choices = e.cfg.tokens_per_step() * m.moe.top_k;
    for (int64_t s = 0; s < S; ++s) {
      std::vector<double> step;
      for (int64_t l = 0; l < Lm; ++l) {
        int64_t sum = 0;
        for (int64_t x = 0; x < E; ++x) {
          const int64_t c = v[size_t((s * Lm + l) * E + x)];
          require(c >= 0 && c <= choices, f.name() + ": tensor " + q(kMoeTokens) + " at step " +
                                              std::to_string(s + 1) + ", MoE layer " + std::to_string(l) +
                                              ", expert " + std::to_string(x) + " is " + std::to_string(c) +
                                              ", not a count of at most " + std::to_string(choices) + " choices");
          sum += c;
          step.push_back(double(c));
        }
        require(sum == choices, f.name() + ": tensor " + q(kMoeTokens) + " at step " + std::to_string(s + 1) +
                                    ", MoE layer " + std::to_string(l) + " sums to " + std::to_string(sum) +
                                    ", but the step routes " + std::to_string(e.cfg.tokens_per_step()) +
                                    " tokens x top-" + std::to_string(m.moe.top_k) + " = " +
                                    std::to_string(choices) + " choices");
      }
      t.moe_tokens.push_back(std::move(step));
    }
  }
  if (f.contains(kMoeAux)) {
    const TensorInfo& ti = f.info(kMoeAux);
    require(ti.shape == Shape{S, Lm}, f.name() + ": tensor " + q(kMoeAux) + " has shape " + shape_str(ti.shape) +
                                          ", expected " + shape_str(Shape{S, Lm}) + dims);
    const auto v = read_float(f, kMoeAux, Shape{S, Lm}, false);
    for (int64_t s = 0; s < S; ++s) t.moe_aux.emplace_back(v.begin() + s * Lm, v.begin() + (s + 1) * Lm);
  }
}

// The reference's layout of the exported model, in the export's order.
ParamLayout layout_of(const TrainConfig& cfg) { return ParamLayout(cfg.model); }

void check_init(const ExportDir& e, const SafetensorsFile& init) {
  auto t = make_reference_trainer(e.cfg);
  const ParamLayout& l = t->layout();
  const std::vector<double> ref = t->params_f64();
  std::set<std::string> names;
  for (const auto& p : l.params()) {
    names.insert(p.name);
    const std::vector<double> v = read_float(init, p.name, Shape(p.shape), true);
    for (size_t i = 0; i < v.size(); ++i)
      require(std::memcmp(&v[i], &ref[size_t(p.offset) + i], sizeof(double)) == 0,
              init.name() + ": tensor " + q(p.name) + " differs from the reference's init at element " +
                  std::to_string(i) + " (" + std::to_string(v[i]) + " vs " + std::to_string(ref[size_t(p.offset) + i]) +
                  "): the export was altered or written by another config");
  }
  for (const auto& ti : init.tensors())
    require(names.count(ti.name), init.name() + ": unknown tensor " + q(ti.name) + " (not a parameter of " +
                                      e.cfg.model.name + ")");
}

void check_batches(const ExportDir& e, const SafetensorsFile& batch) {
  const TrainConfig& c = e.cfg;
  const Shape shape{c.steps, c.batch, c.seq};
  for (const auto& ti : batch.tensors())
    require(ti.name == "inputs" || ti.name == "targets",
            batch.name() + ": unknown tensor " + q(ti.name) + " (format v1 has inputs and targets)");
  // Shapes and dtypes first: the file's size then bounds what is regenerated
  // (a forged config of 1e8 steps beside a small batch file costs nothing).
  for (const char* name : {"inputs", "targets"}) {
    require(batch.contains(name), batch.name() + ": tensor " + q(name) + " is missing");
    expect_shape(batch, name, shape);
    require(batch.info(name).dtype == StDType::I32, batch.name() + ": tensor " + q(name) + " has dtype " +
                                                        std::string(st_dtype_name(batch.info(name).dtype)) +
                                                        ", expected I32");
  }
  const size_t per = size_t(c.batch) * size_t(c.seq);
  std::vector<int32_t> in(per * size_t(c.steps)), tg(in.size());
  MarkovSource src(c.model.V, c.data.seed, c.data.branching, c.data.mix);
  for (int s = 0; s < c.steps; ++s) src.batch(s, 0, c.batch, c.seq, in.data() + s * per, tg.data() + s * per);
  for (const auto& [name, want] : {std::pair{"inputs", &in}, std::pair{"targets", &tg}}) {
    const auto got = batch.read<int32_t>(name);
    const auto diff = std::mismatch(got.begin(), got.end(), want->begin());
    require(diff.first == got.end(), batch.name() + ": tensor " + q(name) + " differs from the config's data at element " +
                                         std::to_string(diff.first - got.begin()) +
                                         ": the export was altered or written by another config");
  }
}

}  // namespace

ExportDir read_export(const std::string& dir, const std::function<void(const TrainConfig&)>& before_checks) {
  namespace fs = std::filesystem;
  std::error_code ec;
  require(fs::is_directory(dir, ec), "verify: --export " + q(dir) + " is not a directory (write one with parabench export)");
  const std::string init_path = (fs::path(dir) / "init.safetensors").string();
  const std::string batch_path = (fs::path(dir) / "batch.safetensors").string();
  for (const auto& p : {init_path, batch_path})
    require(fs::is_regular_file(p, ec), "verify: " + q(p) + " is missing (write the export with parabench export)");
  const SafetensorsFile init = SafetensorsFile::open(init_path);
  const SafetensorsFile batch = SafetensorsFile::open(batch_path);
  ExportDir e;
  e.dir = dir;
  for (const SafetensorsFile* f : {&init, &batch}) {
    expect_format(*f, kExportFormat);
    only_keys(*f, {"format", "layout", "precision", "entropy_floor_nats", "config", "config_hash"});
  }
  e.config_toml = meta(init, "config");
  try {
    ConfigReader r = ConfigReader::from_string(e.config_toml, init.name() + " config");
    e.config_hash = r.config_hash();  // as the export hashed it: the text it wrote
    e.cfg = read_train_config(r);
    r.check_no_unknown_keys();
  } catch (const InputError& err) {
    throw InputError(init.name() + ": metadata 'config' does not read: " + err.what());
  }
  require(meta(batch, "config") == e.config_toml, batch.name() + ": its config differs from init.safetensors'");
  for (const SafetensorsFile* f : {&init, &batch}) {
    require(meta(*f, "config_hash") == e.config_hash,
            f->name() + ": metadata 'config_hash' is " + q(meta(*f, "config_hash")) + ", its config hashes to " +
                q(e.config_hash));
    require(meta(*f, "precision") == precision_name(e.cfg.precision),
            f->name() + ": metadata 'precision' is " + q(meta(*f, "precision")) + ", its config says " +
                q(precision_name(e.cfg.precision)));
  }
  if (before_checks) before_checks(e.cfg);
  check_init(e, init);
  check_batches(e, batch);
  return e;
}

bool trace_precision_allowed(Precision exported, Precision trace) {
  return trace == exported || (exported == Precision::fp32 && trace == Precision::bf16_mixed);
}

ForeignTrace read_trace(const std::string& path, const ExportDir& e) {
  std::error_code ec;
  require(std::filesystem::is_regular_file(path, ec), "verify: --trace " + q(path) + " is not a file");
  ForeignTrace t = read_trace(SafetensorsFile::open(path), e);
  t.path = path;
  return t;
}

ForeignTrace read_trace(const SafetensorsFile& f, const ExportDir& e) {
  // First: a file of another kind is named as such. v1 (the format before the
  // MoE quantities) is read as v2 without them (results/TRACE.md#versioning).
  const bool v1 = meta(f, "format") == kTraceFormatV1;
  if (!v1) expect_format(f, kTraceFormat);
  only_keys(f, {"format", "export_hash", "precision", "framework", "strategy", "mesh", "microbatches", "note"});
  require(meta(f, "export_hash") == e.config_hash,
          f.name() + ": metadata 'export_hash' is " + q(meta(f, "export_hash")) + ", but the export in " + q(e.dir) +
              " has config hash " + q(e.config_hash) + ": the trace was trained from another export");
  ForeignTrace t;
  t.path = f.name();
  try {
    t.precision = parse_precision(meta(f, "precision"));
  } catch (const InputError& err) {
    throw InputError(f.name() + ": metadata 'precision': " + err.what());
  }
  require(trace_precision_allowed(e.cfg.precision, t.precision),
          f.name() + ": a " + precision_name(t.precision) + " trace cannot be judged against a " +
              precision_name(e.cfg.precision) + " export (its init is stored at that precision); export at " +
              (t.precision == Precision::bf16_mixed ? "fp32 or bf16-mixed" : precision_name(t.precision)));
  t.framework = meta_label(f, "framework");
  t.strategy = meta_label(f, "strategy");
  if (f.metadata().count("note")) {
    t.note = meta(f, "note");
    require(t.note.size() <= 1024, f.name() + ": metadata 'note' is longer than 1024 characters");
  }
  try {
    t.mesh = parse_mesh(meta(f, "mesh"), "mesh");
  } catch (const InputError& err) {
    throw InputError(f.name() + ": metadata 'mesh': " + err.what());
  }
  t.world = world_size(t.mesh);
  // A mesh the exported model cannot have was not run: refused, so no PASS
  // row names it. Tensor parallel splits the heads, pipeline parallel the
  // layers, context parallel the sequence; format v1 models are dense (ep 1).
  const ModelConfig& m = e.cfg.model;
  const std::string bad_mesh = f.name() + ": metadata 'mesh' is " + q(mesh_text(t.mesh)) + ": ";
  require(m.NH % t.mesh.tp == 0, bad_mesh + "tp" + std::to_string(t.mesh.tp) + " does not divide the model's " +
                                     std::to_string(m.NH) + " heads");
  require(t.mesh.pp <= m.L, bad_mesh + "pp" + std::to_string(t.mesh.pp) + " is more stages than the model's " +
                                std::to_string(m.L) + " layers");
  require(t.mesh.cp <= e.cfg.seq, bad_mesh + "cp" + std::to_string(t.mesh.cp) + " is more parts than the " +
                                      std::to_string(e.cfg.seq) + " tokens of a sequence");
  require(t.mesh.ep == 1 || m.moe.experts > 0,
          bad_mesh + "ep" + std::to_string(t.mesh.ep) + " needs a mixture-of-experts model; the export's is dense");
  require(m.moe.experts == 0 || m.moe.experts % t.mesh.ep == 0,
          bad_mesh + "ep" + std::to_string(t.mesh.ep) + " does not divide the model's " +
              std::to_string(m.moe.experts) + " experts");
  const int dp = t.mesh.dp;
  t.microbatches = f.metadata().count("microbatches") ? meta_int(f, "microbatches", 1, e.cfg.batch)
                                                      : e.cfg.microbatches;
  require(int64_t(dp) * t.microbatches <= e.cfg.batch && e.cfg.batch % (dp * t.microbatches) == 0,
          f.name() + ": " + std::to_string(dp) + " data replicas x " + std::to_string(t.microbatches) +
              " microbatches do not divide the export's batch of " + std::to_string(e.cfg.batch));

  const Shape steps{e.cfg.steps};
  std::set<std::string> known = {"loss", "grad_norm", "lr", "rank.peak_memory_bytes", "rank.comm_bytes"};
  t.loss = read_float(f, "loss", steps, false);
  t.grad_norm = read_float(f, "grad_norm", steps, false);
  if (f.contains("lr")) t.lr = read_float(f, "lr", steps, false);
  if (f.contains("rank.peak_memory_bytes")) t.peak_memory = read_counts(f, "rank.peak_memory_bytes", t.world);
  if (f.contains("rank.comm_bytes")) t.comm_bytes = read_counts(f, "rank.comm_bytes", t.world);
  require(!v1 || (!f.contains(kMoeTokens) && !f.contains(kMoeAux)),
          f.name() + ": format " + q(kTraceFormatV1) + " has no MoE quantities (" + q(kMoeTokens) + ", " +
              q(kMoeAux) + "): a trace that writes them is " + q(kTraceFormat));
  read_moe(f, e, t, known);
  const ParamLayout l = layout_of(e.cfg);
  t.grads1.assign(size_t(l.total()), 0.0);
  t.params.assign(size_t(l.total()), 0.0);
  for (const auto& p : l.params()) {
    for (auto [prefix, dst] : {std::pair{"grads.", &t.grads1}, std::pair{"params.", &t.params}}) {
      const std::string name = prefix + p.name;
      known.insert(name);
      const auto v = read_float(f, name, Shape(p.shape), true);
      std::copy(v.begin(), v.end(), dst->begin() + p.offset);
    }
  }
  for (const auto& ti : f.tensors())
    require(known.count(ti.name), f.name() + ": unknown tensor " + q(ti.name) +
                                      " (format v1: loss, grad_norm, lr, grads.<param>, params.<param>, "
                                      "rank.peak_memory_bytes, rank.comm_bytes, and for a mixture of experts " +
                                      kMoeTokens + ", " + kMoeAux + "; parameters of " +
                                      e.cfg.model.name + ")");
  return t;
}

SplitPlan split_of(const ForeignTrace& t, const TrainConfig& cfg) {
  SplitPlan p;
  p.groups = t.mesh.dp;
  p.micro = t.microbatches;
  p.moe_joint = cfg.model.moe.experts > 0 && cfg.model.moe.capacity == MoeCapacity::global && p.groups > 1;
  return p;
}

}  // namespace pb
