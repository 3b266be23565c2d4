// parabench validate's checks: the auxiliary headers of results/schema.json
// are the ones the writers produce (pipeline timeline_csv, CommLog), a good
// file of each shape passes, and a wrong value, a ragged row or an unknown
// header is reported with file and line.
#include "suites/report/validate.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "harness/comm/comm_log.h"
#include "harness/io/csv.h"
#include "harness/status.h"
#include "impl/pipeline/timeline.h"

namespace pb::report {
namespace {

namespace fs = std::filesystem;

const RunFileSchema& schema() {
  static const RunFileSchema s = RunFileSchema::load(std::string(PARABENCH_SOURCE_DIR) + "/results/schema.json");
  return s;
}

std::string write(const std::string& name, const std::string& text) {
  const fs::path d = fs::temp_directory_path() / ("pb_validate_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  const std::string path = (d / name).string();
  std::ofstream(path, std::ios::trunc) << text;
  return path;
}

bool mentions(const std::vector<std::string>& problems, const std::string& what) {
  for (const auto& p : problems)
    if (p.find(what) != std::string::npos) return true;
  return false;
}

TEST(Validate, AuxiliaryHeadersAreTheWritersHeaders) {
  const std::string timeline_header = pipeline::timeline_csv({});
  EXPECT_EQ(csv_format_row(schema().auxiliary().header("timeline")), timeline_header);
  EXPECT_EQ(schema().auxiliary().header("comm_counters"), CommLog::csv_header());
  EXPECT_TRUE(schema().auxiliary().common().empty());
  EXPECT_EQ(schema().results().kinds(), ResultsSchema::builtin().kinds());
}

TEST(Validate, GoodAuxiliaryFilesPass) {
  pipeline::Timeline tl(2);
  tl[0].push_back({});
  tl[1].push_back({});
  tl[1][0].start = 1;
  tl[1][0].end = 2.5;
  EXPECT_EQ(schema().validate(write("timeline_ok.csv", pipeline::timeline_csv(tl))), std::vector<std::string>{});
  const std::string counters = csv_format_row(CommLog::csv_header()) + "0,dp,all_reduce,3,4096,4096,0,0.0125\n";
  EXPECT_EQ(schema().validate(write("comm_counters.csv", counters)), std::vector<std::string>{});
}

TEST(Validate, BadValuesRaggedRowsAndUnknownHeadersAreReported) {
  const std::string head = "rank,action,microbatch,chunk,start,end\n";
  auto p = schema().validate(write("timeline_bad.csv", head + "0,F,0,0,0,1\n0,X,1,0,1,2\n"));
  EXPECT_TRUE(mentions(p, "timeline_bad.csv:3: column 'action'")) << ::testing::PrintToString(p);
  p = schema().validate(write("timeline_num.csv", head + "0,F,zero,0,0,1\n"));
  EXPECT_TRUE(mentions(p, "column 'microbatch'")) << ::testing::PrintToString(p);
  p = schema().validate(write("timeline_short.csv", head + "0,F,0,0,0\n"));
  EXPECT_FALSE(p.empty());
  p = schema().validate(write("other.csv", "a,b\n1,2\n"));
  EXPECT_TRUE(mentions(p, "neither a results CSV")) << ::testing::PrintToString(p);
  EXPECT_TRUE(mentions(p, "comm_counters (rank,group,op")) << ::testing::PrintToString(p);
}

TEST(Validate, ResultsCsvIsCheckedAgainstItsKind) {
  const std::string path = write("plan.csv", "");
  fs::remove(path);
  ResultWriter w(path, "plan");
  RunMeta m;
  m.run_id = "r1";
  m.timestamp = "2026-01-01T00:00:00.000Z";
  m.backend = "analytic";
  CsvRecord rec;
  rec.set("model", "tiny").set("params", int64_t(1000));
  w.write(m, rec);
  EXPECT_EQ(schema().validate(path), std::vector<std::string>{});
  // 12 common fields given, the plan columns all empty (model is required).
  const size_t empty_commas = ResultsSchema::builtin().header("plan").size() - 12;
  std::ofstream(path, std::ios::app) << "r1,plan,2026-01-01T00:00:00.000Z,,,analytic,1,,,ok,," +
                                            std::string(empty_commas, ',') + "\n";
  EXPECT_TRUE(mentions(schema().validate(path), "column 'model': required")) << ::testing::PrintToString(schema().validate(path));
}

TEST(Validate, SchemaWithoutAuxiliarySectionIsRejected) {
  EXPECT_THROW(RunFileSchema::parse(R"({"common": [], "kinds": {}})", "x.json"), InputError);
}

}  // namespace
}  // namespace pb::report
