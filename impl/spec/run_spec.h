// The run description: one typed value for a whole run — the training
// configuration (model, precision, batch, steps, microbatches), the mesh
// (dp, tp, cp, pp, ep, ranks per node) and the options of every axis
// (DESIGN.md's product-space table) — parsed and validated once at the
// CLI/config boundary and passed down. Every axis, the engine, the sweep and
// the planner read this value; nothing below the CLI parses strategy text.
//
// One text form everywhere (CLI --mesh/--strategy flags, TOML [strategy], the
// CSV `mesh` and `strategy` columns, plan rows, report labels):
//   mesh      "dp2.tp2.pp2"           axes in the fixed order dp tp cp ep pp,
//                                     size-1 axes left out ("dp1" when all
//                                     are 1), ".rpn2" for 2 ranks per node
//   strategy  "shard=zero3,prefetch=2,schedule=1f1b,virtual_stages=2"
//                                     shard always (so DDP is "shard=none"),
//                                     then key=value for every option that
//                                     differs from its default, in a fixed key
//                                     order; faults joined by '+'
//                                     ("faults=skip_bucket+drop_w")
// Keys are the TOML [strategy] keys and, with '_' -> '-', the CLI flags.
// Invariant: parse(print(x)) == x for every value (tested over every option).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/mesh.h"
#include "impl/spec/fault.h"
#include "reference/train_config.h"

namespace pb {
class ConfigReader;
}

namespace pb::dp {
enum class Shard : uint8_t { none, zero1, zero2, zero3, hsdp, hzero };
enum class Offload : uint8_t { none, optimizer };
// "none"/"ddp", "zero1", "zero2", "zero3"/"fsdp", "hsdp", "hzero"; InputError
// naming `field` and the allowed values otherwise.
Shard parse_shard(std::string_view s, std::string_view field = "shard");
std::string_view shard_name(Shard s);
}  // namespace pb::dp

namespace pb::pipeline {
enum class ScheduleKind : uint8_t { gpipe, one_f_one_b, interleaved, zb_h1, pipedream_2bw };
// "gpipe", "1f1b", "interleaved", "zb-h1", "2bw"; InputError naming `field`.
ScheduleKind parse_schedule_kind(std::string_view s, std::string_view field = "schedule");
std::string_view schedule_name(ScheduleKind k);
}  // namespace pb::pipeline

namespace pb {

enum class CpAlgo : uint8_t { ring, ulysses };
std::string_view cp_algo_name(CpAlgo a);
CpAlgo parse_cp_algo(std::string_view s, std::string_view field = "cp_algo");

// Activation recomputation (Korthikanti et al. 2022): none; selective = the
// attention core (softmax probabilities) recomputed in backward; full = every
// block's forward rerun from its stored input.
enum class Recompute : uint8_t { none, selective, full };
// "none", "selective", "full"; InputError naming `field` otherwise.
Recompute parse_recompute(std::string_view s, std::string_view field = "recompute");
std::string_view recompute_name(Recompute r);

// The data axis (size mesh.dp).
struct DataOptions {
  dp::Shard shard = dp::Shard::none;
  dp::Offload offload = dp::Offload::none;
  int64_t bucket_bytes = 25 << 20;    // DDP bucket (PyTorch's 25 MiB); text/TOML: bucket_mb
  bool overlap = true;                // DDP: all-reduce buckets during backward
  int prefetch = 1;                   // ZeRO-3 family: units gathered ahead, [0, 4]
  bool reshard_after_forward = true;  // ZeRO-3 family
  int shard_group = 0;                // HSDP: F ranks per shard group (0: ranks per node)
  bool operator==(const DataOptions&) const = default;
};

// The tensor axis (size mesh.tp).
struct TensorOptions {
  bool sp = false;  // Megatron sequence parallel
  Recompute recompute = Recompute::none;
  bool operator==(const TensorOptions&) const = default;
};

// The context axis (size mesh.cp).
struct ContextOptions {
  CpAlgo algo = CpAlgo::ring;  // text/TOML: cp_algo
  bool zigzag = true;          // causal load balancing
  bool operator==(const ContextOptions&) const = default;
};

// The pipeline axis (size mesh.pp).
struct PipelineOptionsSpec {
  // Named: the pipeline executor runs (at pp = 1 too: one stage, microbatches
  // through the schedule). Unset: 1f1b when pp > 1, no pipeline otherwise.
  std::optional<pipeline::ScheduleKind> schedule;
  int virtual_stages = 1;
  bool operator==(const PipelineOptionsSpec&) const = default;
};

struct RunSpec {
  TrainConfig train;  // model, precision, steps, batch, seq, microbatches, optimizer, data
  MeshShape mesh;
  DataOptions data;
  TensorOptions tensor;
  ContextOptions context;
  PipelineOptionsSpec pipe;
  // Injected faults (test-only), sorted by name, unique: declared rows
  // (fault.h), resolved from their names by the parser; impl/registry.h
  // strategy_for checks that the strategy declares each; each axis reads its
  // own as typed values (fault_values).
  Faults faults;

  int world() const { return world_size(mesh); }
};

// ---- the text form (the mesh's: harness/mesh.h mesh_text, parse_mesh) -----
// The strategy options of `s` (everything but the train config and the mesh).
std::string strategy_text(const RunSpec& s);
// Applies "key=value,..." to `s` (keys as strategy_text prints them), fault
// names resolved against `faults` (impl/registry.h fault_catalogue()).
// InputError naming `field`, the key, and the allowed keys or values (for a
// fault: every declared one, by axis).
void apply_strategy_text(RunSpec& s, std::string_view text, FaultCatalogue faults,
                         std::string_view field = "strategy");

// "<mesh> <strategy>": report labels.
std::string spec_label(const RunSpec& s);

// ---- TOML ([strategy] table; the train config in its own tables) ------------
// Reads [model], [train], [optim], [data] and [strategy] (mesh = "dp2.pp2" and
// the option keys), validates, and returns the spec; fault names resolved
// against `faults` as apply_strategy_text does. Keys it does not know are
// left for the caller's check_no_unknown_keys().
RunSpec read_run_spec(ConfigReader& r, FaultCatalogue faults);
// Writes every field back (canonical TOML, for dumps and config hashes).
void write_run_spec(const RunSpec& s, ConfigReader& r);

// Rules that hold for every axis: train config valid, mesh valid, batch
// divisible into dp x microbatches, option ranges. Axis-specific rules live
// with the axis (validated when its rank is built, before any communication).
void validate(const RunSpec& s);

// Equality over every field (the train config included).
bool operator==(const RunSpec& a, const RunSpec& b);

}  // namespace pb
