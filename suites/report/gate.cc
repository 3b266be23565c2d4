// The regression gate (rules in gate.h). Rows are grouped by key; numeric
// metrics of a key are the mean over its ok rows, so repeats do not count as
// separate points.
#include "suites/report/gate.h"

#include "harness/io/csv_schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>

#include "harness/status.h"

namespace pb::report {
namespace {

enum class Role { throughput, memory, info };
struct Metric {
  const char* column;
  Role role;
};
struct KindRule {
  const char* kind;
  std::vector<const char*> key;  // besides backend, mesh, world
  std::vector<Metric> metrics;
};

const std::vector<KindRule>& rules() {
  static const std::vector<KindRule> r = {
      {"conformance", {"strategy", "precision", "quantity", "item", "step", "bitwise"}, {{"ratio", Role::info}, {"error", Role::info}}},
      {"sweep",
       {"strategy", "model", "precision", "scaling", "global_batch", "seq_len", "microbatches"},
       {{"tokens_per_s", Role::throughput}, {"mem_total", Role::memory}, {"mem_host_total", Role::memory},
        {"mem_params", Role::info}, {"mem_grads", Role::info}, {"mem_optimizer", Role::info},
        {"mem_activations", Role::info}, {"mem_comm", Role::info}, {"comm_dp_bytes", Role::info},
        {"comm_tp_bytes", Role::info}, {"comm_cp_bytes", Role::info}, {"comm_pp_bytes", Role::info},
        {"mfu", Role::info}, {"exposed_comm_s", Role::info}, {"bubble", Role::info}, {"step_time_cv", Role::info}}},
      {"collective", {"op", "bytes", "dtype", "redop", "inplace", "root"}, {{"busbw_gbps", Role::throughput},
                                                                            {"time_us", Role::info}}},
      {"train_step", {"config_hash", "step"}, {{"mem_total", Role::memory}, {"mem_host_total", Role::memory},
                                              {"loss", Role::info}}},
      {"plan",
       {"strategy", "model", "precision", "params", "global_batch", "seq_len", "microbatches"},
       {{"est_tokens_per_s", Role::throughput}, {"mem_total", Role::memory}, {"mem_host_total", Role::memory},
        {"mem_activations", Role::info}, {"comm_dp_bytes", Role::info}, {"comm_inter_node_bytes", Role::info}}},
  };
  return r;
}

const KindRule& rule_of(const std::string& kind, const std::string& where) {
  for (const KindRule& k : rules())
    if (kind == k.kind) return k;
  throw InputError(where + ": unknown kind '" + kind + "' (train_step, conformance, collective, sweep, plan)");
}

// One key's aggregate.
struct Point {
  std::string kind, key, status = "ok", reason;
  std::map<std::string, std::pair<double, int>> sums;  // metric -> (sum, n) over ok rows
  bool conformance_fail = false, wrong = false;
  std::string first_where;
  double mean(const std::string& m) const {
    auto it = sums.find(m);
    return it == sums.end() || it->second.second == 0 ? std::nan("") : it->second.first / it->second.second;
  }
};

double number(const std::string& text, const std::string& where) {
  if (text == "nan") return std::nan("");
  if (text == "inf") return std::numeric_limits<double>::infinity();
  double v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  require(ec == std::errc() && p == text.data() + text.size(), where + ": '" + text + "' is not a number");
  return v;
}

std::map<std::string, Point> collect(const std::vector<GateTable>& tables) {
  std::map<std::string, Point> points;
  for (const GateTable& t : tables) {
    const CsvTable& c = t.table;
    auto col = [&](const char* name) -> long {
      auto it = std::find(c.header.begin(), c.header.end(), name);
      return it == c.header.end() ? -1 : long(it - c.header.begin());
    };
    const long kind_col = col("kind"), status_col = col("status"), reason_col = col("reason");
    require(kind_col >= 0, t.name + ": no 'kind' column: not a results CSV (results/SCHEMA.md)");
    for (size_t i = 0; i < c.rows.size(); ++i) {
      const auto& row = c.rows[i];
      const std::string where = t.name + ":" + std::to_string(c.row_lines[i]);
      const KindRule& rule = rule_of(row[size_t(kind_col)], where);
      std::string key;
      // The point: backend, mesh (or world when no mesh) and the kind's columns.
      const long mesh = col("mesh");
      const bool has_mesh = mesh >= 0 && !row[size_t(mesh)].empty();
      auto add = [&](const char* k) {
        if (long j = col(k); j >= 0 && !row[size_t(j)].empty())
          key += std::string(key.empty() ? "" : " ") + k + "=" + row[size_t(j)];
      };
      add("backend");
      add(has_mesh ? "mesh" : "world");
      for (const char* k : rule.key) add(k);
      Point& p = points[std::string(rule.kind) + "|" + key];
      p.kind = rule.kind;
      p.key = key;
      if (p.first_where.empty()) p.first_where = where;
      const std::string status = status_col >= 0 ? row[size_t(status_col)] : "ok";
      if (status != "ok") {
        p.status = status;
        if (reason_col >= 0) p.reason = row[size_t(reason_col)];
      }
      if (rule.kind == std::string("conformance")) {
        const long pc = col("pass");
        p.conformance_fail |= status == "failed" || (status == "ok" && pc >= 0 && row[size_t(pc)] == "0");
      }
      if (long w = col("wrong"); rule.kind == std::string("collective") && w >= 0 && !row[size_t(w)].empty())
        p.wrong |= number(row[size_t(w)], where + " column wrong") > 0;
      if (status != "ok") continue;
      for (const Metric& m : rule.metrics) {
        const long j = col(m.column);
        if (j < 0 || row[size_t(j)].empty()) continue;
        auto& [sum, n] = p.sums[m.column];
        const double v = number(row[size_t(j)], where + " column " + m.column);
        // A gated figure must be a number to compare: nan would pass every
        // comparison in silence, inf fail or pass them all.
        require(m.role == Role::info || std::isfinite(v), where + " column " + m.column + ": '" + row[size_t(j)] +
                                                              "' is not a finite number, and the gate compares it");
        sum += v;
        ++n;
      }
    }
  }
  return points;
}

std::string num_text(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

std::vector<GateTable> load_gate_input(const std::string& file_or_dir) {
  namespace fs = std::filesystem;
  std::vector<GateTable> out;
  std::error_code ec;
  if (fs::is_directory(file_or_dir, ec)) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(file_or_dir))
      if (e.is_regular_file() && e.path().extension() == ".csv") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) {
      CsvTable t = read_csv(f);
      // Other CSVs (pipeline timelines, ...) hold no results rows.
      if (std::find(t.header.begin(), t.header.end(), "kind") != t.header.end()) out.push_back({f, std::move(t)});
    }
    require(!out.empty(), file_or_dir + ": no results CSV (with a 'kind' column) in this directory");
  } else {
    out.push_back({file_or_dir, read_csv(file_or_dir)});
  }
  // Every file is a results CSV of results/schema.json before anything is
  // compared: a missing required column, an empty required value or a value
  // of the wrong type would otherwise skip a check in silence.
  for (const GateTable& t : out) {
    const std::vector<std::string> problems = validate_csv_against_schema(t.name, ResultsSchema::builtin());
    if (problems.empty()) continue;
    std::string msg;
    for (size_t i = 0; i < problems.size() && i < 5; ++i) msg += (i ? "\n  " : "") + problems[i];
    if (problems.size() > 5) msg += "\n  (" + std::to_string(problems.size() - 5) + " more)";
    throw InputError(msg + "\n  (results/schema.json; `parabench validate FILE` lists every problem)");
  }
  collect(out);  // validates kinds and numbers now, so bad input is reported before any comparison
  return out;
}

GateResult run_gate(const std::vector<GateTable>& baseline, const std::vector<GateTable>& current,
                    const GateOptions& o) {
  require(o.max_throughput_drop >= 0 && o.max_throughput_drop < 1, "--max-throughput-drop: must be in [0, 1)");
  require(o.max_memory_rise >= 0, "--max-memory-rise: must be >= 0");
  const auto base = collect(baseline), cur = collect(current);
  GateResult r;
  r.baseline_points = int(base.size());
  r.current_points = int(cur.size());
  auto fail = [&](GateLine l, std::string why) {
    l.verdict = "FAIL";
    l.why = std::move(why);
    r.lines.push_back(std::move(l));
    ++r.failures;
  };
  for (const auto& [id, c] : cur) {
    if (c.conformance_fail) fail({c.kind, c.key, "pass", "", "0", 0, "", ""}, "conformance check failed");
    if (c.wrong) fail({c.kind, c.key, "wrong", "", ">0", 0, "", ""}, "collective result wrong");
    if (!base.count(id)) r.lines.push_back({c.kind, c.key, "(point)", "", c.status, 0, "new", ""});
    else if (c.kind == "conformance" && !c.conformance_fail)
      r.unchanged.push_back({c.kind, c.key, "pass", "", "1", 0, "ok", ""});
    else if (c.kind == "collective" && !c.wrong)
      r.unchanged.push_back({c.kind, c.key, "wrong", "", "0", 0, "ok", ""});
  }
  for (const auto& [id, b] : base) {
    auto it = cur.find(id);
    if (it == cur.end()) {
      fail({b.kind, b.key, "(point)", b.status, "", 0, "", ""}, "missing from current");
      continue;
    }
    const Point& c = it->second;
    if (b.status == "ok" && c.status != "ok") {
      fail({b.kind, b.key, "status", "ok", c.status, 0, "", ""}, "now " + c.status + ": " + c.reason);
      continue;
    }
    for (const Metric& m : rule_of(b.kind, b.first_where).metrics) {
      const double bv = b.mean(m.column), cv = c.mean(m.column);
      if (std::isnan(bv) || std::isnan(cv)) continue;
      if (bv == cv) {
        if (m.role != Role::info) r.unchanged.push_back({b.kind, b.key, m.column, num_text(bv), num_text(cv), 0, "ok", ""});
        continue;
      }
      const double change = bv != 0 ? (cv - bv) / std::fabs(bv) : std::numeric_limits<double>::infinity();
      GateLine l{b.kind, b.key, m.column, num_text(bv), num_text(cv), change, "ok", ""};
      // Throughput is held to the threshold plus twice the measured spread
      // of both runs (their step-time coefficients of variation, combined):
      // noise does not fail CI, a drop beyond it still does. The spread's
      // allowance is capped at kMaxNoiseAllowance: a cv from a few noisy steps
      // (0.7 is possible from two) must not hide a halving.
      constexpr double kMaxNoiseAllowance = 0.5;
      double noise = 0;
      if (m.role == Role::throughput) {
        const double nb = b.mean("step_time_cv"), nc = c.mean("step_time_cv");
        noise = std::hypot(std::isfinite(nb) ? nb : 0, std::isfinite(nc) ? nc : 0);
      }
      const double allowed = o.max_throughput_drop + std::min(2 * noise, kMaxNoiseAllowance);
      if (m.role == Role::throughput && bv > 0 && -change > allowed)
        fail(l, "throughput drop beyond " + num_text(100 * o.max_throughput_drop) + "%" +
                    (noise > 0 ? " + 2 x the measured spread (cv " + num_text(100 * noise) + "%" +
                                     (2 * noise > kMaxNoiseAllowance ? ", allowance capped at 50%" : "") + ")"
                               : ""));
      else if (m.role == Role::memory && change > o.max_memory_rise)
        fail(l, "memory rise beyond " + num_text(100 * o.max_memory_rise) + "%");
      else {
        l.verdict = m.role == Role::info ? "info" : "ok";
        r.lines.push_back(std::move(l));
      }
    }
  }
  auto rank = [](const GateLine& l) { return l.verdict == "FAIL" ? 0 : l.verdict == "ok" ? 1 : l.verdict == "new" ? 3 : 2; };
  std::stable_sort(r.lines.begin(), r.lines.end(), [&](const GateLine& a, const GateLine& b) { return rank(a) < rank(b); });
  return r;
}

JunitSuite gate_junit(const GateResult& r) {
  JunitSuite s{"parabench gate", 0, {}};
  auto add = [&](const GateLine& l) {
    if (l.verdict == "info") return;
    JunitCase c{l.kind + " " + l.key, l.metric, 0, l.verdict == "FAIL", l.verdict == "new", "", ""};
    if (c.failed)
      c.message = l.metric + ": baseline " + (l.baseline.empty() ? "(none)" : l.baseline) + ", current " +
                  (l.current.empty() ? "(none)" : l.current) + ": " + l.why;
    if (c.skipped) c.message = "new point, not in the baseline";
    s.cases.push_back(std::move(c));
  };
  for (const auto& l : r.lines) add(l);
  for (const auto& l : r.unchanged) add(l);
  return s;
}

std::string format_gate_table(const GateResult& r, const GateOptions& o) {
  std::string s;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "parabench gate: %d baseline points, %d current points; fail on throughput drop > %s%%, "
                "memory rise > %s%%\n",
                r.baseline_points, r.current_points, num_text(100 * o.max_throughput_drop).c_str(),
                num_text(100 * o.max_memory_rise).c_str());
  s += buf;
  if (r.lines.empty()) return s + "nothing moved\n";
  std::snprintf(buf, sizeof buf, "%-7s %-11s %-18s %14s %14s %9s  %s\n", "verdict", "kind", "metric", "baseline",
                "current", "change", "point / reason");
  s += buf;
  for (const GateLine& l : r.lines) {
    char pct[32] = "";
    if (l.change != 0) std::snprintf(pct, sizeof pct, std::isinf(l.change) ? "+inf" : "%+.1f%%", 100 * l.change);
    const std::string change = pct;
    std::snprintf(buf, sizeof buf, "%-7s %-11s %-18s %14s %14s %9s  ", l.verdict.c_str(), l.kind.c_str(),
                  l.metric.c_str(), l.baseline.c_str(), l.current.c_str(), change.c_str());
    s += buf + l.key + (l.why.empty() ? "" : "  <- " + l.why) + "\n";
  }
  std::snprintf(buf, sizeof buf, "%s: %d failure%s\n", r.passed() ? "PASS" : "FAIL", r.failures,
                r.failures == 1 ? "" : "s");
  return s + buf;
}

}  // namespace pb::report
