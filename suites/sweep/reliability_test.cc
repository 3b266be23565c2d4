// The sweep's reliability judgement on injected step times and /proc texts
// (deterministic: no timing), and the end-to-end path of an injected
// unreliable row: its CSV column, the warning and the summary's count.
#include "suites/sweep/reliability.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <unistd.h>
#include <limits>
#include <string>
#include <vector>

#include "harness/io/csv.h"
#include "harness/io/config.h"
#include "suites/sweep/sweep.h"

namespace pb::sweep {
namespace {

// A point's result as one round measured it: these step times' median, mean
// and sample cv (as run_point computes them).
PointResult measured(const std::vector<double>& steps) {
  PointResult r;
  double sum = 0;
  for (double t : steps) sum += t;
  const double mean = sum / double(steps.size());
  double ss = 0;
  for (double t : steps) ss += (t - mean) * (t - mean);
  std::vector<double> s = steps;
  std::sort(s.begin(), s.end());
  r.step_time_s = s[s.size() / 2];
  r.step_time_mean_s = mean;
  r.step_time_min_s = s.front();
  r.step_time_max_s = s.back();
  r.step_time_cv = std::sqrt(ss / double(steps.size() - 1)) / mean;
  r.measured_steps = int(steps.size());
  return r;
}

TEST(Reliability, TheSpreadBoundJudgesARow) {
  // A quiet run's steps: a few percent apart.
  EXPECT_FALSE(unreliable(measured({1.00e-3, 1.02e-3, 0.99e-3, 1.01e-3, 1.03e-3})));
  // Steps another job preempted: a third of them 3-10x longer (cv about 1.4).
  const PointResult busy = measured({1e-3, 1e-3, 10e-3, 1e-3, 3e-3, 1e-3});
  EXPECT_GT(busy.step_time_cv, kMaxReliableCv);
  EXPECT_TRUE(unreliable(busy));
  // The bound itself is reliable; just past it is not.
  PointResult at = busy;
  at.step_time_cv = kMaxReliableCv;
  EXPECT_FALSE(unreliable(at));
  at.step_time_cv = std::nextafter(kMaxReliableCv, 1.0);
  EXPECT_TRUE(unreliable(at));
  at.step_time_cv = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(unreliable(at));
  // A row that did not run has no steps to judge.
  PointResult rejected = busy;
  rejected.status = "rejected";
  EXPECT_FALSE(unreliable(rejected));
  // Rounds pool their steps: two quiet rounds far apart (a slow spell took
  // one whole window) make the row's spread too.
  const PointResult r1 = measured({1e-3, 1.01e-3, 0.99e-3, 1e-3});
  const PointResult r2 = measured({3e-3, 3.02e-3, 2.98e-3, 3e-3});
  EXPECT_FALSE(unreliable(r1));
  EXPECT_FALSE(unreliable(r2));
  EXPECT_TRUE(unreliable(combine_rounds({r1, r2})));
  EXPECT_FALSE(unreliable(combine_rounds({r1, r1})));
}

TEST(Reliability, TheRowCarriesTheMark) {
  const SweepPoint p = make_point("shard=none", "dp1", "tiny", "fp32", "weak", 1);
  auto column = [&](const PointResult& r) {
    const CsvRecord rec = to_record(p, r);
    for (const auto& [name, value] : rec.fields())
      if (name == "unreliable") return value;
    return std::string("(absent)");
  };
  EXPECT_EQ(column(measured({1e-3, 1e-3, 10e-3, 1e-3})), "1");
  EXPECT_EQ(column(measured({1e-3, 1.01e-3, 1e-3, 1e-3})), "0");
  PointResult rejected;
  rejected.status = "rejected";
  EXPECT_EQ(column(rejected), "(absent)");  // no figures, no mark
}

TEST(Reliability, HostLoadIsReadFromProc) {
  const std::string stat = "cpu  100 5 50 800 10 1 2 32 0 0\ncpu0 50 2 25 400 5 0 1 16 0 0\n";
  const HostLoad a = parse_host_load("0.52 0.58 0.59 3/1234 5678\n", stat);
  EXPECT_TRUE(a.has_loadavg);
  EXPECT_DOUBLE_EQ(a.load1, 0.52);
  EXPECT_EQ(a.runnable, 3);
  EXPECT_TRUE(a.has_stat);
  EXPECT_EQ(a.total, 1000u);
  EXPECT_EQ(a.steal, 32u);
  const HostLoad b = parse_host_load("5.25 2.00 1.00 9/1240 5690\n", "cpu  300 5 150 1400 10 1 2 132 0 0\n");
  // 100 of the 1000 jiffies between the two samples were stolen.
  EXPECT_EQ(describe_load(a, b, 2),
            "load average 0.52 at the start, 5.25 at the end, 9 tasks runnable at the end, on 2 cores; "
            "steal 10.0% of CPU time during the sweep");
  // What cannot be read is left out, never invented.
  const HostLoad none = parse_host_load("", "");
  EXPECT_FALSE(none.has_loadavg);
  EXPECT_FALSE(none.has_stat);
  EXPECT_EQ(describe_load(none, none, 2), "");
  EXPECT_FALSE(parse_host_load("garbage", "intr 1 2 3").has_loadavg);
  EXPECT_FALSE(parse_host_load("1 2 3 4-5 6", "cpu 1 2 3").has_stat);
  EXPECT_EQ(describe_load(none, b, 2), "load average 5.25 at the end, 9 tasks runnable, on 2 cores");
  // The machine this runs on: Linux has both files.
  const HostLoad now = sample_host_load();
  EXPECT_TRUE(now.has_loadavg);
  EXPECT_TRUE(now.has_stat);
  EXPECT_GT(now.total, 0u);
}

TEST(Reliability, TheWarningNamesTheRowsAndTheLoad) {
  const HostLoad a = parse_host_load("0.50 0.5 0.5 1/100 1\n", "cpu  100 0 0 900 0 0 0 0 0 0\n");
  const HostLoad b = parse_host_load("4.00 1 1 6/100 1\n", "cpu  600 0 0 1400 0 0 0 0 0 0\n");
  EXPECT_EQ(unreliable_warning({}, 4, a, b, 2), "");
  const std::string w =
      unreliable_warning({{"dp2 shard=none tiny fp32 mb1 weak", 0.83}, {"dp4 shard=zero3 tiny fp32 mb1 weak", 3.4}},
                         6, a, b, 2);
  EXPECT_NE(w.find("2 of 6 rows"), std::string::npos) << w;
  EXPECT_NE(w.find("cv > 0.25"), std::string::npos) << w;
  EXPECT_NE(w.find("dp2 shard=none tiny fp32 mb1 weak (cv 0.83)"), std::string::npos) << w;
  EXPECT_NE(w.find("dp4 shard=zero3 tiny fp32 mb1 weak (cv 3.40)"), std::string::npos) << w;
  EXPECT_NE(w.find("load average 0.50 at the start, 4.00 at the end, 6 tasks runnable"), std::string::npos) << w;
  EXPECT_NE(w.find("steal 0.0%"), std::string::npos) << w;
  std::vector<UnreliableRow> many(25, {"p", 1.0});
  EXPECT_NE(unreliable_warning(many, 25, a, b, 2).find("... and 5 more"), std::string::npos);
  EXPECT_NE(unreliable_warning(many, 25, HostLoad{}, HostLoad{}, 2).find("load not readable"), std::string::npos);
}

// Through run_sweep, whatever this machine's load: every row's mark is its
// own cv against the bound, the summary counts the marked rows, and the
// warning names exactly them (no timing is asserted).
TEST(Reliability, ASweepMarksCountsAndNamesItsRows) {
  ConfigReader cr = ConfigReader::from_string(
      "[sweep]\nstrategies = [\"shard=none\"]\nworlds = [1, 2]\nsteps = 4\nwarmup = 1\nbatch_per_rank = 2\n"
      "peak_gflops = 10.0\n");
  const SweepConfig c = read_sweep_config(cr);
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() / ("pb_reliability_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  SweepRun run;
  run.csv_path = (d / "sweep.csv").string();
  run.meta.run_id = "test-run";
  run.meta.backend = "local";
  std::ostringstream warnings;
  run.warnings = &warnings;
  const SweepSummary s = run_sweep(c, run);
  ASSERT_EQ(s.ok, 2);
  const CsvTable t = read_csv(run.csv_path);
  int marked = 0;
  for (const auto& row : t.rows) {
    const double cv = std::stod(row[t.column("step_time_cv")]);
    const bool over = !(cv <= kMaxReliableCv);
    EXPECT_EQ(row[t.column("unreliable")], over ? "1" : "0") << cv;
    if (over) {
      ++marked;
      EXPECT_NE(warnings.str().find(row[t.column("mesh")] + " shard=none tiny fp32 mb1 weak (cv "), std::string::npos)
          << warnings.str();
    }
  }
  EXPECT_EQ(s.unreliable, marked);
  EXPECT_EQ(warnings.str().empty(), marked == 0) << warnings.str();
  std::filesystem::remove_all(d);
}

}  // namespace
}  // namespace pb::sweep
