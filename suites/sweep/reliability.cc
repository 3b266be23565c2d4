// A sweep row's reliability and the host's load (reliability.h).
#include "suites/sweep/reliability.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace pb::sweep {

bool unreliable(const PointResult& r) {
  return r.status == "ok" && !(r.step_time_cv <= kMaxReliableCv);  // a NaN cv is unreliable too
}

namespace {

// The first line of a small /proc file (empty when absent).
std::string read_proc(const char* path) {
  std::ifstream in(path);
  std::string text, line;
  for (int i = 0; i < 4 && std::getline(in, line); ++i) text += line + "\n";  // stat: its first line is the total
  return text;
}

}  // namespace

HostLoad parse_host_load(std::string_view loadavg, std::string_view stat) {
  HostLoad h;
  {
    // "0.52 0.58 0.59 3/1234 5678": 1, 5, 15 minutes, runnable/total, last pid.
    std::istringstream in{std::string(loadavg)};
    double l1 = 0, l5 = 0, l15 = 0;
    int64_t run = 0, all = 0;
    char slash = 0;
    if (in >> l1 >> l5 >> l15 >> run >> slash >> all && slash == '/' && std::isfinite(l1) && l1 >= 0 && run >= 0) {
      h.has_loadavg = true;
      h.load1 = l1;
      h.runnable = run;
    }
  }
  {
    // "cpu  user nice system idle iowait irq softirq steal guest guest_nice"
    // (guest time is counted in user already: the total is the first eight).
    std::istringstream in{std::string(stat)};
    std::string cpu;
    uint64_t v[8] = {};
    int n = 0;
    if (in >> cpu && cpu == "cpu")
      while (n < 8 && in >> v[n]) ++n;
    if (n == 8) {
      h.has_stat = true;
      for (uint64_t x : v) h.total += x;
      h.steal = v[7];
    }
  }
  return h;
}

HostLoad sample_host_load() { return parse_host_load(read_proc("/proc/loadavg"), read_proc("/proc/stat")); }

std::string describe_load(const HostLoad& before, const HostLoad& after, int cores) {
  std::string out;
  char buf[200];
  if (before.has_loadavg && after.has_loadavg) {
    std::snprintf(buf, sizeof buf, "load average %.2f at the start, %.2f at the end, %lld tasks runnable at the end",
                  before.load1, after.load1, (long long)after.runnable);
    out = buf;
  } else if (after.has_loadavg) {
    std::snprintf(buf, sizeof buf, "load average %.2f at the end, %lld tasks runnable", after.load1,
                  (long long)after.runnable);
    out = buf;
  }
  if (!out.empty()) out += ", on " + std::to_string(cores) + " cores";
  if (before.has_stat && after.has_stat && after.total > before.total && after.steal >= before.steal) {
    std::snprintf(buf, sizeof buf, "steal %.1f%% of CPU time during the sweep",
                  100.0 * double(after.steal - before.steal) / double(after.total - before.total));
    out += (out.empty() ? "" : "; ") + std::string(buf);
  }
  return out;
}

std::string unreliable_warning(const std::vector<UnreliableRow>& rows, int of_rows, const HostLoad& before,
                               const HostLoad& after, int cores) {
  if (rows.empty()) return "";
  char head[200];
  std::snprintf(head, sizeof head,
                "warning: %zu of %d rows have a step-time spread above the bound (cv > %g) and are marked "
                "unreliable (column `unreliable`; the report leaves them out of the planner's error):",
                rows.size(), of_rows, kMaxReliableCv);
  std::string out = head;
  constexpr size_t kNamed = 20;  // past that, a count: the CSV has them all
  for (size_t i = 0; i < rows.size() && i < kNamed; ++i) {
    char cv[32];
    std::snprintf(cv, sizeof cv, "%.2f", rows[i].cv);
    out += "\n  " + rows[i].label + " (cv " + cv + ")";
  }
  if (rows.size() > kNamed) out += "\n  ... and " + std::to_string(rows.size() - kNamed) + " more";
  const std::string load = describe_load(before, after, cores);
  out += "\n  the host: " + (load.empty() ? std::string("load not readable (/proc/loadavg, /proc/stat)") : load);
  out += "\n  another job likely shared the cores: their figures are kept, marked; measure them again on a "
         "quieter machine";
  return out;
}

}  // namespace pb::sweep
