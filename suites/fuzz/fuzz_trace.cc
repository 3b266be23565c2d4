// Fuzz target: the trace reader of parabench verify (reference/trace_format.h),
// which reads files written by other frameworks. Input: a safetensors file,
// read as a trace against a fixed small export (tiny shrunk to 1 layer of 4
// channels, vocabulary 8, 2 steps: the config below, as `parabench export`
// writes it; corpus/trace holds that export's own trace). Only pb::InputError
// may leave the readers. Invariants of an accepted trace: every per-step
// tensor has the export's steps, every parameter is there (the flat vectors
// have the layout's size), the world is the mesh's product and the split
// divides the batch.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/io/config.h"
#include "harness/io/safetensors.h"
#include "harness/status.h"
#include "reference/layout.h"
#include "reference/trace_format.h"
#include "reference/train_config_io.h"
#include "suites/fuzz/fuzz_check.h"

namespace {

const char* const kConfig = R"toml([data]
branching = 3
mix = 0.02
seed = 7

[model]
channels = 4
context = 4
heads = 1
layers = 1
name = "tiny"
vocab = 8

[moe]
aux_loss_coef = 0.01
capacity = "global"
capacity_factor = 1.0
every = 1
experts = 0
top_k = 1

[optim]
beta1 = 0.9
beta2 = 0.95
clip = 1.0
eps = 1e-08
lr = 0.001
min_lr = 0.0001
schedule = "cosine"
warmup = 0
weight_decay = 0.1

[train]
batch = 2
microbatches = 1
precision = "fp32"
seed = 1234
seq = 4
steps = 2
threads = 1
)toml";

const pb::ExportDir& the_export() {
  static const pb::ExportDir e = [] {
    pb::ExportDir d;
    d.dir = "<fuzz export>";
    d.config_toml = kConfig;
    pb::ConfigReader r = pb::ConfigReader::from_string(d.config_toml, "fuzz export");
    d.config_hash = r.config_hash();
    d.cfg = pb::read_train_config(r);
    return d;
  }();
  return e;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const pb::ExportDir& e = the_export();
  try {
    const pb::SafetensorsFile f =
        pb::SafetensorsFile::parse(std::vector<char>(data, data + size), "fuzz.safetensors");
    const pb::ForeignTrace t = pb::read_trace(f, e);
    const size_t steps = size_t(e.cfg.steps);
    PB_FUZZ_CHECK(t.loss.size() == steps && t.grad_norm.size() == steps, "per-step tensors");
    PB_FUZZ_CHECK(t.lr.empty() || t.lr.size() == steps, "lr");
    const pb::ParamLayout l(e.cfg.model);
    PB_FUZZ_CHECK(t.grads1.size() == size_t(l.total()) && t.params.size() == size_t(l.total()), "flat sizes");
    PB_FUZZ_CHECK(t.world == pb::world_size(t.mesh), pb::mesh_text(t.mesh));
    PB_FUZZ_CHECK(e.cfg.batch % (t.mesh.dp * t.microbatches) == 0, "split");
    PB_FUZZ_CHECK(t.peak_memory.empty() || t.peak_memory.size() == size_t(t.world), "peak memory per rank");
    PB_FUZZ_CHECK(pb::trace_precision_allowed(e.cfg.precision, t.precision), "precision");
  } catch (const pb::InputError&) {
  }
  return 0;
}
