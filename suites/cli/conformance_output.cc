#include "suites/cli/conformance_output.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "reference/train_config_io.h"
#include "suites/cli/common.h"

namespace pb::cli {

const char* const kRatioLegend =
    "ratios: worst error / noise floor (pass <= 8); bitwise: yes = bit-equal to the reference "
    "replaying its order, rule = held to the ratio only, fp64 = held to the ratio here and again run at fp64";

namespace {
double worst_ratio(const std::vector<QuantityCheck>& v, const std::string& q) {
  double r = 0;
  for (const auto& c : v)
    if (c.quantity == q) r = std::max(r, c.ratio);
  return r;
}
}  // namespace

void print_result_header() {
  std::printf("%-12s %-40s %-10s %5s %8s %9s %9s %9s %11s %7s %6s %s\n", "mesh", "strategy", "precision", "world",
              "bitwise", "loss", "grads", "params", "state/rank", "memory", "comm", "result");
}

void print_result_row(const ConformanceResult& r) {
  bool mem_ok = true, comm_ok = true;
  double state = 0;  // measured model-state bytes of rank 0, device + host
  for (const auto& e : r.exact) {
    const bool mem = e.what.rfind("mem.", 0) == 0;
    (mem ? mem_ok : comm_ok) &= e.pass;
    if (mem && e.what != "mem.comm") state += double(e.measured);  // model states only
  }
  std::string bits = r.bitwise_declared ? (all_pass(r.bits) ? "yes" : "BROKEN")
                     : r.fp64.empty()   ? "rule"
                     : all_pass(r.fp64) ? "fp64"
                                        : "FP64 BAD";
  // A foreign trace (parabench verify) declares no costs: nothing to compare.
  const bool costs = r.backend != "foreign";
  std::printf("%-12s %-40s %-10s %5d %8s %9.3f %9.3f %9.3f %11s %7s %6s %s\n", r.mesh.c_str(), r.strategy.c_str(),
              precision_name(r.precision).c_str(), r.world, bits.c_str(), worst_ratio(r.rule, "loss"),
              worst_ratio(r.rule, "grads"), worst_ratio(r.rule, "params"), costs ? human_bytes(state).c_str() : "-",
              !costs ? "-" : mem_ok ? "exact" : "DIFF", !costs ? "-" : comm_ok ? "exact" : "DIFF",
              r.pass() ? "PASS" : "FAIL");
}

void write_conformance_rows(ResultWriter& csv, RunMeta meta, const ConformanceResult& r, int steps) {
  // Bitwise and exact checks have no floor or ratio: those columns stay empty.
  auto row = [&](const std::string& quantity, int step, double err, double threshold, bool bitwise, bool pass) {
    CsvRecord rec;
    rec.set("strategy", r.strategy).set("precision", precision_name(r.precision));
    rec.set("quantity", quantity).set("step", step).set("error", err);
    rec.set("threshold", threshold).set("bitwise", bitwise).set("pass", pass);
    return rec;
  };
  auto write = [&](const CsvRecord& rec) {
    meta.timestamp = iso8601_utc(std::chrono::system_clock::now());
    csv.write(meta, rec);
  };
  for (const auto& c : r.rule) {
    CsvRecord rec = row(c.quantity, c.step, c.error, c.threshold, false, c.pass);
    rec.set("floor", c.floor).set("ratio", c.ratio);
    write(rec);
  }
  for (const auto& c : r.bits) write(row(c.quantity, c.step, c.error, 0, true, c.pass));
  for (const auto& c : r.fp64) {  // the same strategy at fp64 (engine.h)
    CsvRecord rec = row(c.quantity, c.step, c.error, c.threshold, false, c.pass);
    rec.set("item", "fp64").set("floor", c.floor).set("ratio", c.ratio);
    write(rec);
  }
  for (const auto& e : r.exact) {
    // e.what: "mem.<tag>" or "comm.<group>.<op>"
    const bool mem = e.what.rfind("mem.", 0) == 0;
    const double diff = std::abs(double(e.measured) - double(e.declared));
    CsvRecord rec = row(mem ? "memory" : "comm", steps, e.declared ? diff / double(e.declared) : diff, 0, true, e.pass);
    rec.set("item", e.what.substr(e.what.find('.') + 1)).set("measured", e.measured).set("declared", e.declared);
    write(rec);
  }
}

void add_junit_cases(const ConformanceResult& r, double seconds, JunitSuite* suite) {
  const std::string cls = r.mesh + " " + r.strategy + " " + precision_name(r.precision);
  std::vector<JunitCase> cases;
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return std::string(buf);
  };
  // Rule checks, grouped by quantity: the failing step with the worst ratio,
  // or the worst step when all pass.
  auto quantities = [](const std::vector<QuantityCheck>& v) {  // in first-seen order
    std::vector<std::string> order;
    for (const auto& c : v)
      if (std::find(order.begin(), order.end(), c.quantity) == order.end()) order.push_back(c.quantity);
    return order;
  };
  auto rule_cases = [&](const std::vector<QuantityCheck>& v, const std::string& suffix, const std::string& what) {
    for (const auto& q : quantities(v)) {
      const QuantityCheck* worst = nullptr;
      bool failed = false;
      std::string detail;
      for (const auto& c : v) {
        if (c.quantity != q) continue;
        if (!c.pass) {
          failed = true;
          detail += q + " step " + std::to_string(c.step) + ": error " + num(c.error) + ", floor " + num(c.floor) +
                    ", ratio " + num(c.ratio) + " > " + num(c.threshold) + "\n";
        }
        if (!worst || (!c.pass && worst->pass) || (c.pass == worst->pass && c.ratio > worst->ratio)) worst = &c;
      }
      JunitCase jc{cls, q + suffix, 0, failed, false, "", ""};
      if (failed)
        jc.message = q + " " + what + ": ratio " + num(worst->ratio) + " > " + num(worst->threshold) + " at step " +
                     std::to_string(worst->step) + " (error " + num(worst->error) + ", noise floor " +
                     num(worst->floor) + "): does not train like one device";
      jc.detail = detail;
      cases.push_back(std::move(jc));
    }
  };
  rule_cases(r.rule, "", "against the fp64 single-device truth");
  rule_cases(r.fp64, "@fp64", "run again at fp64");
  for (const auto& q : quantities(r.bits)) {
    JunitCase jc{cls, q + " bitwise", 0, false, false, "", ""};
    for (const auto& c : r.bits)
      if (c.quantity == q && !c.pass) {
        if (!jc.failed)
          jc.message = q + " not bit-equal to the reference replaying its order at step " + std::to_string(c.step) +
                       " (difference " + num(c.error) + ")";
        jc.failed = true;
        jc.detail += q + " step " + std::to_string(c.step) + ": difference " + num(c.error) + "\n";
      }
    cases.push_back(std::move(jc));
  }
  for (const auto& e : r.exact) {
    JunitCase jc{cls, e.what, 0, !e.pass, false, "", ""};
    if (!e.pass)
      jc.message = e.what + ": measured " + std::to_string(e.measured) + " bytes, declared " +
                   std::to_string(e.declared) + " (" + (e.what.rfind("mem.", 0) == 0 ? "memory" : "communication") +
                   " differs from what the strategy declares)";
    cases.push_back(std::move(jc));
  }
  for (auto& c : cases) {
    c.seconds = seconds / double(cases.size());
    suite->cases.push_back(std::move(c));
  }
  suite->seconds += seconds;
}

std::string config_hash_of(const StrategyRun& s) {
  ConfigReader r;
  write_run_spec(s.spec, r);
  return r.config_hash();
}

}  // namespace pb::cli
