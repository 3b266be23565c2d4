// Timeline text forms: the ASCII chart of a small 1F1B run, drawn by hand, and
// the CSV header and rows the report reads.
#include "impl/pipeline/timeline.h"

#include <gtest/gtest.h>

#include "harness/status.h"

namespace pb::pipeline {
namespace {

TEST(Timeline, AsciiChartOfSmall1F1B) {
  // pp=2, m=2, F=B=W=1 (BW=2): rank 0 F0 F1 idle BW0 idle BW1;
  // rank 1 idle F0 BW0 F1 BW1 idle.
  const SimResult r = simulate(make_1f1b({2, 2}), Costs{});
  EXPECT_DOUBLE_EQ(r.makespan, 9.0);
  // Automatic width: the shortest action (1) gets its label plus one column.
  const std::string chart = render_timeline(r.timeline, r.makespan, 1);
  EXPECT_EQ(chart,
            "rank 0 |F0-F1-......B0----...B1----|\n"
            "rank 1 |...F0-B0----F1-B1----......|\n");
  EXPECT_EQ(render_timeline(r.timeline, r.makespan, 1, 27), chart);
}

TEST(Timeline, NarrowChartsShrinkLabelsToLetters) {
  const SimResult r = simulate(make_1f1b({2, 2}), Costs{});
  EXPECT_EQ(render_timeline(r.timeline, r.makespan, 1, 9),
            "rank 0 |FF..BB.BB|\n"
            "rank 1 |.FBBFBB..|\n");
  EXPECT_THROW(render_timeline(r.timeline, r.makespan, 1, -1), InputError);
}

TEST(Timeline, InterleavedLabelsCarryTheChunk) {
  const SimResult r = simulate(make_interleaved({2, 2, 2}), Costs{});
  const std::string chart = render_timeline(r.timeline, r.makespan, 2);
  EXPECT_NE(chart.find("F0.1"), std::string::npos) << chart;
  EXPECT_NE(chart.find("B1.0"), std::string::npos) << chart;
}

TEST(Timeline, CsvRows) {
  const SimResult r = simulate(make_zb_h1({2, 2}), Costs{1, 1, 1, 0});
  const std::string csv = timeline_csv(r.timeline);
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "rank,action,microbatch,chunk,start,end");
  EXPECT_NE(csv.find("\n0,F,0,0,0,1\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\n1,W,1,0,"), std::string::npos) << csv;
  size_t rows = 0;
  for (char c : csv) rows += c == '\n';
  EXPECT_EQ(rows, 1u + 2u * 6u);  // header + (F, B, W) x 2 microbatches x 2 ranks
}

}  // namespace
}  // namespace pb::pipeline
