// When a sweep's figures can be trusted: a point whose measured steps spread
// too widely (another job took the cores: issue #50 saw step-time cvs of 0.3
// to 3.4 on a busy machine, and a plan comparison of 174% where a quiet run
// says 5-7%) is marked unreliable in its row (the `unreliable` column), left
// out of the report's planner-error figures, and named in a warning at the
// end of the run with the load the host showed (/proc/loadavg, /proc/stat).
// The bound and why: docs/sweep-and-report.md#reliable-rows.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "suites/sweep/sweep.h"

namespace pb::sweep {

// A row is unreliable when the coefficient of variation of its measured
// steps (PointResult::step_time_cv: every step of every round pooled) is
// above this, or is not a number.
inline constexpr double kMaxReliableCv = 0.25;

// Whether ok result r is unreliable (false for a row that is not ok: it has
// no step times).
bool unreliable(const PointResult& r);

// One look at the host's load. Each part is absent (has_* false) where the
// file is missing or does not parse (not Linux, a container hiding /proc).
struct HostLoad {
  bool has_loadavg = false;
  double load1 = 0;   // 1-minute load average
  int64_t runnable = 0;  // tasks runnable at that moment (the run queue; this process's included)
  bool has_stat = false;
  uint64_t steal = 0, total = 0;  // jiffies of every CPU: stolen by the hypervisor, and all
};

// The load from the texts of /proc/loadavg and /proc/stat (either may be
// empty or malformed: that part is absent).
HostLoad parse_host_load(std::string_view loadavg, std::string_view stat);
// The load now.
HostLoad sample_host_load();

// What the host showed between two samples, in words ("load average 0.4 at
// the start, 5.2 at the end, 7 tasks runnable at the end, 2 cores; steal 3.1%
// of CPU time"); empty when neither part was readable.
std::string describe_load(const HostLoad& before, const HostLoad& after, int cores);

// The warning at the end of a sweep with unreliable rows, naming each (its
// point label and cv) and the load; empty when `rows` is empty.
struct UnreliableRow {
  std::string label;
  double cv = 0;
};
std::string unreliable_warning(const std::vector<UnreliableRow>& rows, int of_rows, const HostLoad& before,
                               const HostLoad& after, int cores);

}  // namespace pb::sweep
