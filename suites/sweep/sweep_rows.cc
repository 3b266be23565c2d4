// A point's row: its rounds combined, its columns, metadata and config
// hash; and what --resume reads back (the points in the CSV, the rounds in
// the rounds file).
#include "suites/sweep/sweep.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "harness/io/csv.h"
#include "harness/io/csv_schema.h"
#include "harness/status.h"
#include "suites/sweep/reliability.h"
#include "suites/sweep/sweep_internal.h"

namespace pb::sweep {

using internal::median;
using internal::round_columns;
using internal::RowKey;

SweepConfig round_config(const SweepConfig& c) {
  SweepConfig one = c;
  one.steps = (c.steps + c.rounds - 1) / c.rounds;
  one.min_seconds = c.min_seconds / c.rounds;
  one.rounds = 1;
  return one;
}

size_t round_offset(int round, int rounds, size_t points) {
  if (round >= rounds - 1 || points == 0) return 0;
  return size_t(round + 1) * points / size_t(rounds) % points;
}

PointResult combine_rounds(const std::vector<PointResult>& rounds) {
  require(!rounds.empty(), "combine_rounds: no rounds");
  PointResult out = rounds.back();
  if (rounds.size() == 1) return out;
  std::vector<double> medians;
  double n = 0, sum = 0, bubble = 0, exposed = 0;
  for (const PointResult& r : rounds) {
    require(r.status == "ok" && r.measured_steps > 0 && r.step_time_s > 0,
            "combine_rounds: every round must be ok with measured steps");
    medians.push_back(r.step_time_s);
    out.step_time_min_s = std::min(out.step_time_min_s, r.step_time_min_s);
    out.step_time_max_s = std::max(out.step_time_max_s, r.step_time_max_s);
    n += r.measured_steps;
    sum += r.measured_steps * r.step_time_mean_s;
    bubble += r.measured_steps * r.bubble;
    exposed += r.measured_steps * r.exposed_comm_s;
  }
  const double mean = sum / n;
  double ss = 0;  // the pooled sum of squares: each round's own, plus its mean's offset
  for (const PointResult& r : rounds) {
    const double sd = r.step_time_cv * r.step_time_mean_s;
    ss += (r.measured_steps - 1) * sd * sd + r.measured_steps * (r.step_time_mean_s - mean) * (r.step_time_mean_s - mean);
  }
  const double t = median(medians);
  const double speed = rounds.back().step_time_s / t;  // the rates scale with 1 / step time
  out.step_time_s = t;
  out.tokens_per_s *= speed;
  out.model_flops_per_s *= speed;
  out.mfu *= speed;
  out.step_time_mean_s = mean;
  out.step_time_cv = n > 1 ? std::sqrt(ss / (n - 1)) / mean : 0;
  out.measured_steps = int(n);
  out.bubble = bubble / n;
  out.exposed_comm_s = exposed / n;
  return out;
}

CsvRecord to_record(const SweepPoint& p, const PointResult& r) {
  CsvRecord rec;
  rec.set("strategy", p.strategy()).set("model", p.model()).set("precision", p.precision()).set("device", r.device);
  rec.set("microbatches", p.microbatches).set("global_batch", r.global_batch).set("seq_len", r.seq);
  rec.set("scaling", p.scaling);
  if (r.status != "ok") return rec;
  rec.set("step_time_s", r.step_time_s).set("tokens_per_s", r.tokens_per_s);
  rec.set("step_time_min_s", r.step_time_min_s).set("step_time_max_s", r.step_time_max_s);
  rec.set("step_time_cv", r.step_time_cv).set("measured_steps", int64_t(r.measured_steps));
  rec.set("oversubscribed", r.oversubscribed).set("unreliable", unreliable(r));
  rec.set("model_flops_per_s", r.model_flops_per_s).set("peak_flops", r.peak_flops);
  if (r.peak_flops > 0) rec.set("mfu", r.mfu);
  static constexpr const char* kMemCols[6] = {"mem_params", "mem_grads", "mem_optimizer",
                                              "mem_activations", "mem_comm", "mem_workspace"};
  for (int t = 0; t < 6; ++t) rec.set(kMemCols[t], r.mem[t]);
  rec.set("mem_total", r.mem_total).set("mem_host_total", r.mem_host_total);
  rec.set("comm_dp_bytes", r.comm_dp_bytes).set("comm_tp_bytes", r.comm_tp_bytes);
  rec.set("comm_cp_bytes", r.comm_cp_bytes).set("comm_pp_bytes", r.comm_pp_bytes).set("comm_ep_bytes", r.comm_ep_bytes);
  rec.set("comm_inter_node_bytes", r.comm_inter_node_bytes);
  rec.set("exposed_comm_s", r.exposed_comm_s).set("bubble", r.bubble);
  rec.set("moe_dropped", r.moe_dropped).set("moe_load_max_mean", r.moe_load_max_mean);
  return rec;
}

std::string point_config_hash(const SweepConfig& c, const SweepPoint& p) {
  ConfigReader h;  // every setting that changes the point's figures, hashed
  h.set("strategy", p.strategy());
  h.set("mesh", p.mesh());
  h.set("model", p.model());
  h.set("precision", p.precision());
  h.set("world", int64_t(p.world()));
  h.set("microbatches", int64_t(p.microbatches));
  h.set("scaling", p.scaling);
  h.set("global_batch", point_global_batch(c, p));
  h.set("seq", int64_t(c.seq));
  h.set("steps", int64_t(c.steps));
  h.set("warmup", int64_t(c.warmup));
  if (c.min_seconds > 0) h.set("min_seconds", c.min_seconds);  // absent: the hash of earlier runs
  if (c.rounds > 1) h.set("rounds", int64_t(c.rounds));           // likewise
  if (c.device != Device::cpu) h.set("device", device_name(c.device));
  h.set("ranks_per_node", int64_t(c.ranks_per_node));
  h.set("peak_gflops", c.peak_gflops);
  return h.config_hash();
}

RunMeta point_meta(const SweepConfig& c, const SweepPoint& p, const PointResult& r, const RunMeta& base) {
  RunMeta m = base;
  m.timestamp = iso8601_utc(std::chrono::system_clock::now());
  m.world = p.world();
  m.mesh = p.mesh();
  m.status = r.status;
  m.reason = r.reason;
  m.config_hash = point_config_hash(c, p);
  return m;
}

std::set<std::string> done_keys(const std::string& csv_path, const SweepConfig& c) {
  // The file is a results CSV first: anything the schema refuses is refused
  // here too (a torn last row is the one thing a killed sweep leaves, and is
  // dropped below).
  const std::vector<std::string> problems = validate_csv_against_schema(csv_path, ResultsSchema::builtin());
  for (const std::string& e : problems)
    require(e.find("torn") != std::string::npos || e.find("no terminating newline") != std::string::npos,
            "--resume: " + e + (problems.size() > 1 ? " (and " + std::to_string(problems.size() - 1) + " more)" : ""));
  CsvTable t = read_csv(csv_path, {/*drop_partial_tail=*/true});
  std::map<std::string, std::string> hash_of;  // key -> the hash this config gives the point
  for (const SweepPoint& p : expand(c)) hash_of[p.key()] = point_config_hash(c, p);
  std::set<std::string> keys;
  try {
    const size_t ck = t.column("kind"), cs = t.column("strategy"), cm = t.column("model"),
                 cp = t.column("precision"), cw = t.column("mesh"), ch = t.column("config_hash");
    const RowKey key_of(t);
    for (size_t i = 0; i < t.rows.size(); ++i) {
      const auto& row = t.rows[i];
      const std::string where = csv_path + ":" + std::to_string(t.row_lines[i]);
      require(row[ck] == "sweep", where + ": not a sweep CSV (kind '" + row[ck] + "')");
      const std::string key = key_of(row);
      // A point this config also runs counts as done only if it was run
      // with the same settings (steps, warm-up, batch, seq, ...).
      const auto it = hash_of.find(key);
      require(it == hash_of.end() || it->second == row[ch],
              where + ": --resume: this point (" + row[cw] + " " + row[cs] + " " + row[cm] + " " + row[cp] +
                  ") was run with other settings than the config gives it now (config_hash " + row[ch] + ", now " +
                  (it == hash_of.end() ? "" : it->second) +
                  "; steps, warmup, batch, seq, ranks_per_node or peak_gflops differ): resume with the config "
                  "the sweep started with, or start a new run");
      keys.insert(key);
    }
  } catch (const std::out_of_range& e) {
    throw InputError(csv_path + ": not a sweep CSV: " + e.what());
  }
  return keys;
}

namespace internal {

const std::vector<std::string>& round_columns() {
  static const std::vector<std::string> cols = {
      "key", "config_hash", "round", "step_time_s", "step_time_min_s", "step_time_max_s", "step_time_mean_s",
      "step_time_cv", "measured_steps", "bubble", "exposed_comm_s"};
  return cols;
}

std::vector<std::string> round_row(const SweepConfig& c, const SweepPoint& p, int round, const PointResult& r) {
  return {p.key(), point_config_hash(c, p), std::to_string(round), csv_number(r.step_time_s),
          csv_number(r.step_time_min_s), csv_number(r.step_time_max_s), csv_number(r.step_time_mean_s),
          csv_number(r.step_time_cv), std::to_string(r.measured_steps), csv_number(r.bubble),
          csv_number(r.exposed_comm_s)};
}

}  // namespace internal

namespace {

// A finite number >= 0 in cell `col` of a rounds-file row (InputError naming where).
double round_cell(const std::vector<std::string>& row, size_t col, const std::string& where) {
  const std::string& text = row[col];
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  require(ec == std::errc() && end == text.data() + text.size() && std::isfinite(v) && v >= 0,
          where + ": " + round_columns()[col] + " '" + text + "' is not a finite number >= 0");
  return v;
}

}  // namespace

std::map<std::string, std::vector<PointResult>> done_rounds(const std::string& rounds_path, const SweepConfig& c) {
  std::map<std::string, std::vector<PointResult>> out;
  if (!std::filesystem::exists(rounds_path)) return out;
  const CsvTable t = read_csv(rounds_path, {/*drop_partial_tail=*/true});
  require(t.header == round_columns(), rounds_path + ": not a sweep rounds file (its header is not " +
                                           csv_format_row(round_columns()).substr(0, 200) + ")");
  std::map<std::string, std::string> hash_of;
  for (const SweepPoint& p : expand(c)) hash_of[p.key()] = point_config_hash(c, p);
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const auto& row = t.rows[i];
    const std::string where = rounds_path + ":" + std::to_string(t.row_lines[i]);
    const auto it = hash_of.find(row[0]);
    if (it == hash_of.end()) continue;  // a point this config does not run
    require(it->second == row[1], where + ": --resume: point " + row[0] +
                                      " was run with other settings than the config gives it now (config_hash " +
                                      row[1] + ", now " + it->second + "): resume with the config the sweep "
                                      "started with, or start a new run");
    const double round = round_cell(row, 2, where), steps = round_cell(row, 8, where);
    require(round < SweepConfig::kMaxRounds && round == std::floor(round), where + ": round '" + row[2] +
                                                                               "' is not a round number below " +
                                                                               std::to_string(SweepConfig::kMaxRounds));
    require(steps >= 1 && steps <= INT32_MAX && steps == std::floor(steps),
            where + ": measured_steps '" + row[8] + "' is not a positive whole number");
    PointResult r;
    r.step_time_s = round_cell(row, 3, where);
    r.step_time_min_s = round_cell(row, 4, where);
    r.step_time_max_s = round_cell(row, 5, where);
    r.step_time_mean_s = round_cell(row, 6, where);
    r.step_time_cv = round_cell(row, 7, where);
    r.measured_steps = int(steps);
    r.bubble = round_cell(row, 9, where);
    r.exposed_comm_s = round_cell(row, 10, where);
    require(r.step_time_s > 0 && r.step_time_mean_s > 0 && r.step_time_min_s <= r.step_time_s &&
                r.step_time_s <= r.step_time_max_s,
            where + ": the step times are not positive with min <= median <= max");
    std::vector<PointResult>& rounds = out[row[0]];
    if (size_t(round) == rounds.size()) rounds.push_back(r);  // after a gap or a repeat: not the next round
  }
  return out;
}

}  // namespace pb::sweep
