// What the sweep's parts share inside suites/sweep (not an API): the median
// of a point's step times, a sweep CSV row's point key, and the rounds
// file's columns.
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "harness/io/csv.h"
#include "suites/sweep/sweep.h"

namespace pb::sweep::internal {

// The median (of the two middle ones, the mean).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A sweep CSV row's point key, as SweepPoint::key() spells it (an empty
// microbatches cell is 1).
struct RowKey {
  size_t strategy, mesh, model, precision, microbatches, scaling;
  explicit RowKey(const CsvTable& t)
      : strategy(t.column("strategy")), mesh(t.column("mesh")), model(t.column("model")),
        precision(t.column("precision")), microbatches(t.column("microbatches")), scaling(t.column("scaling")) {}
  std::string operator()(const std::vector<std::string>& row) const {
    return row[strategy] + "|" + row[mesh] + "|" + row[model] + "|" + row[precision] + "|" +
           (row[microbatches].empty() ? "1" : row[microbatches]) + "|" + row[scaling];
  }
};

// The rounds file's columns (SweepRun::rounds_csv_path): a point's key and
// config_hash, the round (0-based), and the figures combine_rounds pools.
const std::vector<std::string>& round_columns();
// Round `round` of point p as a rounds-file row.
std::vector<std::string> round_row(const SweepConfig& c, const SweepPoint& p, int round, const PointResult& r);

// The measured steps: c.steps, or under c.min_seconds as many as the slowest
// rank's last warm-up step says fill it (every rank takes the same max).
int measured_steps(const SweepConfig& c, Communicator& world, double last_warmup_s);

}  // namespace pb::sweep::internal
