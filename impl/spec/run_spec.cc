#include "impl/spec/run_spec.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "harness/io/config.h"
#include "harness/status.h"
#include "reference/train_config_io.h"

namespace pb::dp {

Shard parse_shard(std::string_view s, std::string_view field) {
  if (s == "none" || s == "ddp") return Shard::none;
  if (s == "zero1") return Shard::zero1;
  if (s == "zero2") return Shard::zero2;
  if (s == "zero3" || s == "fsdp") return Shard::zero3;
  if (s == "hsdp") return Shard::hsdp;
  if (s == "hzero") return Shard::hzero;
  throw InputError(std::string(field) + ": '" + std::string(s) +
                   "' is not one of none, zero1, zero2, zero3, hsdp, hzero");
}

std::string_view shard_name(Shard s) {
  constexpr std::string_view names[] = {"none", "zero1", "zero2", "zero3", "hsdp", "hzero"};
  return names[int(s)];
}

}  // namespace pb::dp

namespace pb::pipeline {

ScheduleKind parse_schedule_kind(std::string_view s, std::string_view field) {
  if (s == "gpipe") return ScheduleKind::gpipe;
  if (s == "1f1b") return ScheduleKind::one_f_one_b;
  if (s == "interleaved") return ScheduleKind::interleaved;
  if (s == "zb-h1") return ScheduleKind::zb_h1;
  if (s == "2bw") return ScheduleKind::pipedream_2bw;
  throw InputError(std::string(field) + ": unknown schedule '" + std::string(s) +
                   "' (expected gpipe, 1f1b, interleaved, zb-h1 or 2bw)");
}

std::string_view schedule_name(ScheduleKind k) {
  constexpr std::string_view names[] = {"gpipe", "1f1b", "interleaved", "zb-h1", "2bw"};
  return names[int(k)];
}

}  // namespace pb::pipeline

namespace pb {

namespace {

std::string quote(std::string_view s) {
  std::string q(1, '\'');
  q.append(s);
  q.push_back('\'');
  return q;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t b = 0;
  while (true) {
    const size_t e = s.find(sep, b);
    out.push_back(s.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b));
    if (e == std::string_view::npos) return out;
    b = e + 1;
  }
}

}  // namespace

std::string_view recompute_name(Recompute r) {
  return r == Recompute::none ? "none" : r == Recompute::selective ? "selective" : "full";
}

Recompute parse_recompute(std::string_view s, std::string_view field) {
  if (s == "none") return Recompute::none;
  if (s == "selective") return Recompute::selective;
  if (s == "full") return Recompute::full;
  throw InputError(std::string(field) + ": " + quote(s) + " is not one of none, selective, full");
}

std::string_view cp_algo_name(CpAlgo a) { return a == CpAlgo::ring ? "ring" : "ulysses"; }

CpAlgo parse_cp_algo(std::string_view s, std::string_view field) {
  if (s == "ring") return CpAlgo::ring;
  if (s == "ulysses") return CpAlgo::ulysses;
  throw InputError(std::string(field) + ": " + quote(s) + " is not one of ring, ulysses");
}

namespace {

bool parse_bool(std::string_view s, std::string_view field) {
  if (s == "on" || s == "true") return true;
  if (s == "off" || s == "false") return false;
  throw InputError(std::string(field) + ": " + quote(s) + " is not on or off");
}

int64_t bucket_bytes_of(double mb, std::string_view field) {
  const double bytes = mb * double(1 << 20);
  require(std::isfinite(mb) && mb > 0 && bytes >= 1 && bytes <= 9.0e15 && bytes == std::floor(bytes),
          std::string(field) + ": must be > 0 and a whole number of bytes (bucket_mb x 2^20), got " +
              std::to_string(mb));
  return int64_t(bytes);
}

std::string num_text(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

constexpr const char* kKeys =
    "shard, offload, bucket_mb, overlap, prefetch, reshard_after_forward, shard_group, sp, recompute, cp_algo, zigzag, "
    "schedule, virtual_stages, faults";

}  // namespace

std::string strategy_text(const RunSpec& s) {
  const RunSpec d;
  std::vector<std::string> kv;
  auto add = [&](bool differs, const char* key, const std::string& v) {
    if (differs) kv.push_back(std::string(key) + "=" + v);
  };
  auto onoff = [](bool b) { return std::string(b ? "on" : "off"); };
  add(true, "shard", std::string(dp::shard_name(s.data.shard)));  // always: the text is never empty
  add(s.data.offload != d.data.offload, "offload", s.data.offload == dp::Offload::optimizer ? "optimizer" : "none");
  add(s.data.bucket_bytes != d.data.bucket_bytes, "bucket_mb", num_text(double(s.data.bucket_bytes) / double(1 << 20)));
  add(s.data.overlap != d.data.overlap, "overlap", onoff(s.data.overlap));
  add(s.data.prefetch != d.data.prefetch, "prefetch", std::to_string(s.data.prefetch));
  add(s.data.reshard_after_forward != d.data.reshard_after_forward, "reshard_after_forward",
      onoff(s.data.reshard_after_forward));
  add(s.data.shard_group != d.data.shard_group, "shard_group", std::to_string(s.data.shard_group));
  add(s.tensor.sp != d.tensor.sp, "sp", onoff(s.tensor.sp));
  add(s.tensor.recompute != d.tensor.recompute, "recompute", std::string(recompute_name(s.tensor.recompute)));
  add(s.context.algo != d.context.algo, "cp_algo", std::string(cp_algo_name(s.context.algo)));
  add(s.context.zigzag != d.context.zigzag, "zigzag", onoff(s.context.zigzag));
  add(s.pipe.schedule.has_value(), "schedule",
      s.pipe.schedule ? std::string(pipeline::schedule_name(*s.pipe.schedule)) : "");
  add(s.pipe.virtual_stages != d.pipe.virtual_stages, "virtual_stages", std::to_string(s.pipe.virtual_stages));
  add(!s.faults.empty(), "faults", faults_text(s.faults));
  std::string out;
  for (const auto& x : kv) out += (out.empty() ? "" : ",") + x;
  return out;
}

void apply_strategy_text(RunSpec& s, std::string_view text, FaultCatalogue faults, std::string_view field) {
  if (text.empty()) return;
  for (std::string_view item : split(text, ',')) {
    const size_t eq = item.find('=');
    require(eq != std::string_view::npos && eq > 0,
            std::string(field) + ": " + quote(item) + " is not key=value (keys: " + kKeys + ")");
    const std::string key(item.substr(0, eq));
    const std::string_view v = item.substr(eq + 1);
    const std::string f = std::string(field) + "." + key;
    if (key == "shard") s.data.shard = dp::parse_shard(v, f);
    else if (key == "offload") {
      require(v == "none" || v == "optimizer", f + ": " + quote(v) + " is not one of none, optimizer");
      s.data.offload = v == "optimizer" ? dp::Offload::optimizer : dp::Offload::none;
    } else if (key == "bucket_mb") {
      double mb = 0;
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), mb);
      require(!v.empty() && ec == std::errc() && p == v.data() + v.size(),
              f + ": " + quote(v) + " is not a number");
      s.data.bucket_bytes = bucket_bytes_of(mb, f);
    } else if (key == "overlap") s.data.overlap = parse_bool(v, f);
    else if (key == "prefetch") s.data.prefetch = parse_int(v, f, 0, 4);
    else if (key == "reshard_after_forward") s.data.reshard_after_forward = parse_bool(v, f);
    else if (key == "shard_group") s.data.shard_group = parse_int(v, f, 0, INT32_MAX);
    else if (key == "sp") s.tensor.sp = parse_bool(v, f);
    else if (key == "recompute") s.tensor.recompute = parse_recompute(v, f);
    else if (key == "cp_algo") s.context.algo = parse_cp_algo(v, f);
    else if (key == "zigzag") s.context.zigzag = parse_bool(v, f);
    else if (key == "schedule") s.pipe.schedule = pipeline::parse_schedule_kind(v, f);
    else if (key == "virtual_stages") s.pipe.virtual_stages = parse_int(v, f, 1, INT32_MAX);
    else if (key == "faults") {
      s.faults = parse_faults(faults, v, f);
    } else {
      throw InputError(std::string(field) + ": unknown key " + quote(key) + " (keys: " + kKeys + ")");
    }
  }
}

std::string spec_label(const RunSpec& s) {
  const std::string st = strategy_text(s);
  return mesh_text(s.mesh) + (st.empty() ? "" : " " + st);
}

RunSpec read_run_spec(ConfigReader& r, FaultCatalogue faults) {
  RunSpec s;
  s.train = read_train_config(r);
  s.mesh = parse_mesh(r.get<std::string>("strategy.mesh", "dp1"), "strategy.mesh");
  DataOptions& d = s.data;
  d.shard = dp::parse_shard(r.get<std::string>("strategy.shard", "none"), "strategy.shard");
  d.offload = r.get_enum("strategy.offload", "none", {"none", "optimizer"}) == "optimizer" ? dp::Offload::optimizer
                                                                                             : dp::Offload::none;
  d.bucket_bytes = bucket_bytes_of(r.get<double>("strategy.bucket_mb", double(d.bucket_bytes) / double(1 << 20),
                                                 Bounds::positive()),
                                   "strategy.bucket_mb");
  d.overlap = r.get<bool>("strategy.overlap", d.overlap);
  d.prefetch = r.get<int>("strategy.prefetch", d.prefetch, Bounds::closed(0, 4));
  d.reshard_after_forward = r.get<bool>("strategy.reshard_after_forward", d.reshard_after_forward);
  d.shard_group = r.get<int>("strategy.shard_group", d.shard_group, Bounds::non_negative());
  s.tensor.sp = r.get<bool>("strategy.sp", false);
  s.tensor.recompute = parse_recompute(
      r.get_enum("strategy.recompute", "none", {"none", "selective", "full"}), "strategy.recompute");
  s.context.algo = parse_cp_algo(r.get_enum("strategy.cp_algo", "ring", {"ring", "ulysses"}), "strategy.cp_algo");
  s.context.zigzag = r.get<bool>("strategy.zigzag", true);
  if (r.has("strategy.schedule"))
    s.pipe.schedule = pipeline::parse_schedule_kind(r.get<std::string>("strategy.schedule", ""), "strategy.schedule");
  s.pipe.virtual_stages = r.get<int>("strategy.virtual_stages", 1, Bounds::at_least(1));
  for (const std::string& f : r.get<std::vector<std::string>>("strategy.faults", {}))
    s.faults.push_back(&parse_fault(faults, f, "strategy.faults"));
  normalize_faults(s.faults);
  validate(s);
  return s;
}

void write_run_spec(const RunSpec& s, ConfigReader& r) {
  write_train_config(s.train, r);
  r.set("strategy.mesh", mesh_text(s.mesh));
  r.set("strategy.shard", std::string(dp::shard_name(s.data.shard)));
  r.set("strategy.offload", std::string(s.data.offload == dp::Offload::optimizer ? "optimizer" : "none"));
  r.set("strategy.bucket_mb", double(s.data.bucket_bytes) / double(1 << 20));
  r.set("strategy.overlap", s.data.overlap);
  r.set("strategy.prefetch", int64_t(s.data.prefetch));
  r.set("strategy.reshard_after_forward", s.data.reshard_after_forward);
  r.set("strategy.shard_group", int64_t(s.data.shard_group));
  r.set("strategy.sp", s.tensor.sp);
  r.set("strategy.recompute", std::string(recompute_name(s.tensor.recompute)));
  r.set("strategy.cp_algo", std::string(cp_algo_name(s.context.algo)));
  r.set("strategy.zigzag", s.context.zigzag);
  if (s.pipe.schedule) r.set("strategy.schedule", std::string(pipeline::schedule_name(*s.pipe.schedule)));
  r.set("strategy.virtual_stages", int64_t(s.pipe.virtual_stages));
  Faults sorted = s.faults;
  normalize_faults(sorted);
  std::vector<std::string> names;
  for (const FaultDecl* d : sorted) names.emplace_back(d->name);
  r.set("strategy.faults", names);
}

void validate(const RunSpec& s) {
  s.train.validate();
  try {
    validate(s.mesh);
  } catch (const InputError& e) {
    throw InputError("strategy.mesh: " + mesh_text(s.mesh) + ": " + e.what());
  }
  // On a device: every mesh axis (the data-parallel family with optimizer
  // offload, tensor, context and expert parallel, the pipeline schedules),
  // dense and MoE models (train.validate() refuses fp64 there).
  const int dp = s.mesh.dp;
  require(s.train.batch % dp == 0, "train.batch: " + std::to_string(s.train.batch) +
                                       " sequences do not split over mesh dp" + std::to_string(dp));
  const int per_rank = s.train.batch / dp;
  require(per_rank % s.train.microbatches == 0,
          "train.microbatches: " + std::to_string(s.train.microbatches) + " does not divide the " +
              std::to_string(per_rank) + " sequences per dp rank");
  require(s.data.bucket_bytes > 0, "strategy.bucket_mb: must be > 0");
  require(s.data.prefetch >= 0 && s.data.prefetch <= 4,
          "strategy.prefetch: must be in [0, 4], got " + std::to_string(s.data.prefetch));
  require(s.data.shard_group >= 0, "strategy.shard_group: must be >= 0, got " + std::to_string(s.data.shard_group));
  require(s.pipe.virtual_stages >= 1,
          "strategy.virtual_stages: must be >= 1, got " + std::to_string(s.pipe.virtual_stages));
  // The llama family runs on every mesh axis GPT-2 does (docs/models.md; on
  // the CPU only: train.validate()), tiny-mixtral wherever GPT-2's MoE does.
  // Mixture of experts runs under data, expert, pipeline, tensor and context
  // parallel (experts split over tp; ep folded over dp x cp, Megatron-core's
  // expert rank generator: harness/mesh.h), in and outside pipelines, with
  // sequence parallel and recompute: no mesh axis refuses it here.
}

bool operator==(const RunSpec& a, const RunSpec& b) {
  return a.train == b.train && a.mesh == b.mesh && a.data == b.data && a.tensor == b.tensor &&
         a.context == b.context && a.pipe == b.pipe && faults_text(a.faults) == faults_text(b.faults);
}

}  // namespace pb
