// The sweep end to end on tiny points: rows valid under the schema, a
// rejected point recorded with its reason, resume re-running only what is
// missing, and the [sweep] config's rules.
#include "suites/sweep/sweep.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <thread>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness/comm/runner.h"
#include "harness/io/csv_schema.h"
#include "harness/status.h"
#include "reference/device_testing.h"

namespace pb::sweep {
namespace {

namespace fs = std::filesystem;

std::string fresh_csv(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("pb_sweep_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return (d / "sweep.csv").string();
}

SweepConfig tiny_config() {
  ConfigReader r = ConfigReader::from_string(R"(
[sweep]
strategies = ["shard=none", "shard=zero3"]
worlds = [1, 2]
models = ["tiny"]
steps = 2
warmup = 1
batch_per_rank = 2
peak_gflops = 10.0
)");
  return read_sweep_config(r);
}

SweepRun make_run(const std::string& csv) {
  SweepRun run;
  run.csv_path = csv;
  run.meta.run_id = "test-run";
  run.meta.host = "test";
  run.meta.backend = "local";
  return run;
}

TEST(Sweep, RowsPassTheSchemaAndCarryMeasuredFigures) {
  SweepConfig c = tiny_config();
  c.strategies = {"shard=none", "shard=zero3"};
  c.worlds = {1, 2};
  const std::string csv = fresh_csv("rows");
  std::ostringstream progress;
  SweepRun run = make_run(csv);
  run.progress = &progress;
  SweepSummary s = run_sweep(c, run);
  EXPECT_EQ(s.points, 4);
  EXPECT_EQ(s.ok, 4);
  EXPECT_NE(progress.str().find("[4/4] dp2 shard=zero3 tiny"), std::string::npos) << progress.str();
  EXPECT_TRUE(validate_csv_against_schema(csv, ResultsSchema::builtin()).empty());
  CsvTable t = read_csv(csv);
  ASSERT_EQ(t.rows.size(), 4u);
  for (const auto& row : t.rows) {
    const int world = std::stoi(row[t.column("world")]);
    EXPECT_EQ(row[t.column("status")], "ok");
    EXPECT_GT(std::stod(row[t.column("step_time_s")]), 0);
    // The spread behind the median: min <= median <= max, cv >= 0.
    const double lo = std::stod(row[t.column("step_time_min_s")]), hi = std::stod(row[t.column("step_time_max_s")]);
    EXPECT_LE(lo, std::stod(row[t.column("step_time_s")]));
    EXPECT_GE(hi, std::stod(row[t.column("step_time_s")]));
    EXPECT_GE(std::stod(row[t.column("step_time_cv")]), 0);
    EXPECT_EQ(std::stoi(row[t.column("measured_steps")]), 2);  // sweep.steps, no min_seconds
    EXPECT_EQ(row[t.column("device")], "cpu");
    EXPECT_EQ(row[t.column("oversubscribed")], world > int(std::max(1u, std::thread::hardware_concurrency())) ? "1" : "0");
    EXPECT_GT(std::stod(row[t.column("mfu")]), 0);
    EXPECT_DOUBLE_EQ(std::stod(row[t.column("peak_flops")]), 10e9 * world);
    EXPECT_EQ(std::stoi(row[t.column("global_batch")]), 2 * world);  // weak scaling
    EXPECT_EQ(row[t.column("mesh")], "dp" + std::to_string(world));
    EXPECT_EQ(std::stod(row[t.column("bubble")]), 0);  // no pipeline
    EXPECT_GT(std::stoll(row[t.column("mem_params")]), 0);
    const long long dp_bytes = std::stoll(row[t.column("comm_dp_bytes")]);
    if (world == 1) EXPECT_EQ(dp_bytes, 0);
    else EXPECT_GT(dp_bytes, 0);
  }
  // ZeRO-3 at world 2 shards the optimizer state DDP replicates.
  auto optimizer_of = [&](const std::string& strategy) {
    for (const auto& row : t.rows)
      if (row[t.column("strategy")] == strategy && row[t.column("world")] == "2")
        return std::stoll(row[t.column("mem_optimizer")]);
    return -1LL;
  };
  EXPECT_LT(optimizer_of("shard=zero3"), optimizer_of("shard=none"));
}

// A step lasts from the last rank's end of the step before to its end of
// this one: the times add up to the run, a rank's lateness is not counted
// twice; ends that go back in time or are not numbers are refused.
TEST(Sweep, StepTimesAreTheLastRanksPace) {
  const std::vector<double> t = step_times({0.010, 0.030, 0.030, 0.045});
  ASSERT_EQ(t.size(), 4u);
  EXPECT_DOUBLE_EQ(t[0], 0.010);
  EXPECT_DOUBLE_EQ(t[1], 0.020);
  EXPECT_DOUBLE_EQ(t[2], 0.0);
  EXPECT_DOUBLE_EQ(t[3], 0.015);
  double sum = 0;
  for (double x : t) sum += x;
  EXPECT_DOUBLE_EQ(sum, 0.045);
  EXPECT_TRUE(step_times({}).empty());
  EXPECT_THROW(step_times({0.02, 0.01}), InputError);
  EXPECT_THROW(step_times({-0.01}), InputError);
  EXPECT_THROW(step_times({0.01, std::nan("")}), InputError);
  EXPECT_THROW(step_times({std::numeric_limits<double>::infinity()}), InputError);
}

// The corun factor's copies: each in a world of its own, meeting after
// every step (so a copy blocked on the others returns only when they all
// have run every step); a copy that cannot run throws instead of leaving the
// others waiting. Not timed here: that the copies keep one pace is a speed
// property, seen in the sweep's plan rows (corun_scale), not a unit test.
TEST(Sweep, PacedCopiesRunTogetherAndFailTogether) {
  SweepConfig c = tiny_config();
  c.steps = 4;
  c.warmup = 1;
  const SweepPoint p = make_point("shard=none", "dp1", "tiny", "fp32", "weak", 1);
  const RunSpec spec = point_spec(c, p);
  const std::vector<double> t = paced_copies(c, spec, 2);
  ASSERT_EQ(t.size(), 2u);
  for (double x : t) EXPECT_TRUE(std::isfinite(x) && x > 0) << x;  // every copy measured its steps
  EXPECT_EQ(paced_copies(c, spec, 1).size(), 1u);
  EXPECT_THROW(paced_copies(c, spec, 0), InputError);
  RunSpec bad = spec;
  bad.mesh.dp = 2;  // a dp2 rank in a world of one
  EXPECT_ANY_THROW(paced_copies(c, bad, 2));
}

// sweep.min_seconds: a point measures at least that long (more steps than
// sweep.steps when its steps are short), at most kMaxStepsFactor x steps;
// every rank runs the same count (the step times are the last rank's pace).
TEST(Sweep, MinSecondsRaisesTheMeasuredSteps) {
  SweepConfig c = tiny_config();
  c.strategies = {"shard=none"};
  c.worlds = {2};
  c.min_seconds = 0.05;
  const std::string csv = fresh_csv("min_seconds");
  ASSERT_EQ(run_sweep(c, make_run(csv)).ok, 1);
  CsvTable t = read_csv(csv);
  ASSERT_EQ(t.rows.size(), 1u);
  const int n = std::stoi(t.rows[0][t.column("measured_steps")]);
  EXPECT_GT(n, c.steps);  // a tiny step is far below 25 ms
  EXPECT_LE(n, c.steps * SweepConfig::kMaxStepsFactor);
  c.min_seconds = 3600;  // capped: 100 x 2 steps, not an hour
  const std::string capped = fresh_csv("min_seconds_cap");
  ASSERT_EQ(run_sweep(c, make_run(capped)).ok, 1);
  t = read_csv(capped);
  EXPECT_EQ(std::stoi(t.rows[0][t.column("measured_steps")]), c.steps * SweepConfig::kMaxStepsFactor);
}

// A resumed sweep with sweep.extrapolate: plan.csv ends with one set of
// extrapolated rows, continued from the largest point measured by either
// run (the earlier run's rows, from its smaller largest point, are replaced).
TEST(Sweep, ResumeReplacesTheExtrapolatedRows) {
  SweepConfig c = tiny_config();
  c.strategies = {"shard=none", "shard=zero2"};
  c.worlds = {1, 2};
  c.extrapolate = {8};
  const std::string csv = fresh_csv("resume_extrapolate");
  SweepRun run = make_run(csv);
  run.plan_csv_path = (std::filesystem::path(csv).parent_path() / "plan.csv").string();
  ASSERT_EQ(run_sweep(c, run).ok, 4);
  auto extrapolated = [&] {
    const CsvTable t = read_csv(run.plan_csv_path);
    std::vector<std::string> reasons;
    for (const auto& row : t.rows)
      if (row[t.column("reason")].rfind("extrapolated", 0) == 0) reasons.push_back(row[t.column("reason")]);
    return reasons;
  };
  std::vector<std::string> first = extrapolated();
  ASSERT_EQ(first.size(), 2u);  // one per series, at world 8
  for (const auto& r : first) EXPECT_EQ(r.rfind("extrapolated from 2 measured ranks", 0), 0u) << r;
  c.worlds = {1, 2, 4};  // the resumed run adds world 4: the series' largest point now
  EXPECT_EQ(run_sweep(c, run, done_keys(csv, c)).ok, 2);
  std::vector<std::string> second = extrapolated();
  ASSERT_EQ(second.size(), 2u) << "the earlier extrapolated rows are replaced, not duplicated";
  for (const auto& r : second) EXPECT_EQ(r.rfind("extrapolated from 4 measured ranks", 0), 0u) << r;
  // Nothing left to run: the rows are recomputed from the earlier points
  // alone, still one set; plan.csv, now a link, is rewritten at its target
  // (write_output_file), and the link stays.
  const fs::path target = fs::path(run.plan_csv_path).parent_path() / "plan_target.csv";
  fs::rename(run.plan_csv_path, target);
  fs::create_symlink(target, run.plan_csv_path);
  EXPECT_EQ(run_sweep(c, run, done_keys(csv, c)).points, 0);
  EXPECT_TRUE(fs::is_symlink(run.plan_csv_path));
  EXPECT_EQ(extrapolated().size(), 2u);
  EXPECT_TRUE(validate_csv_against_schema(run.plan_csv_path, ResultsSchema::builtin()).empty());
  EXPECT_EQ(read_csv(run.plan_csv_path).rows.size(), 6u + 2u);  // 6 measured points' rows + 2 extrapolated
}

// An output that is one of the sweep's inputs (here the config, read from
// where plan.csv goes) is refused before any point runs, and left as it was.
TEST(Sweep, AnOutputThatIsAnInputIsRefused) {
  const std::string csv = fresh_csv("output_is_input");
  const fs::path config = fs::path(csv).parent_path() / "plan.csv";
  const std::string toml = "[sweep]\nworlds = [1]\nsteps = 1\nwarmup = 0\npeak_gflops = 10.0\n";
  std::ofstream(config) << toml;
  ConfigReader r = ConfigReader::from_file(config.string());
  const SweepConfig c = read_sweep_config(r);
  EXPECT_EQ(c.inputs, std::vector<std::string>{config.string()});
  SweepRun run = make_run(csv);
  run.plan_csv_path = config.string();
  try {
    run_sweep(c, run);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("plan CSV " + config.string() + ": is also an input"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(csv)) << "refused before the first row";
  std::ifstream in(config);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), toml);
}

TEST(Sweep, RejectedPointGetsARowWithTheReason) {
  SweepConfig c = tiny_config();
  c.strategies = {"shard=zero1"};
  c.worlds = {2};
  c.scaling = {"strong"};
  c.global_batch = 3;  // not divisible by world 2
  const std::string csv = fresh_csv("rejected");
  SweepSummary s = run_sweep(c, make_run(csv));
  EXPECT_EQ(s.rejected, 1);
  EXPECT_TRUE(validate_csv_against_schema(csv, ResultsSchema::builtin()).empty());
  CsvTable t = read_csv(csv);
  ASSERT_EQ(t.rows.size(), 1u);
  EXPECT_EQ(t.rows[0][t.column("status")], "rejected");
  EXPECT_NE(t.rows[0][t.column("reason")].find("sweep.global_batch"), std::string::npos);
  EXPECT_TRUE(t.rows[0][t.column("step_time_s")].empty());
}

TEST(Sweep, ResumeRerunsOnlyTheMissingPoint) {
  SweepConfig c = tiny_config();
  c.strategies = {"shard=none", "shard=zero2"};
  c.worlds = {2};
  const std::string csv = fresh_csv("resume");
  ASSERT_EQ(run_sweep(c, make_run(csv)).ok, 2);
  // Drop the last row: as if the sweep was killed during its last point.
  std::ifstream in(csv);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  in.close();
  ASSERT_EQ(lines.size(), 3u);
  std::ofstream(csv, std::ios::trunc) << lines[0] << "\n" << lines[1] << "\n";

  std::set<std::string> done = done_keys(csv, c);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(*done.begin(), "shard=none|dp2|tiny|fp32|1|weak");
  SweepSummary s = run_sweep(c, make_run(csv), done);
  EXPECT_EQ(s.points, 1);
  EXPECT_EQ(s.skipped, 1);
  CsvTable t = read_csv(csv);
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[1][t.column("strategy")], "shard=zero2");
  EXPECT_EQ(done_keys(csv, c).size(), 2u);
  EXPECT_EQ(run_sweep(c, make_run(csv), done_keys(csv, c)).points, 0);  // nothing left
  EXPECT_EQ(read_csv(csv).rows.size(), 2u);
  // A config that changes a result (steps, warm-up, batch, seq) does not
  // count the old rows as done: --resume refuses, naming the row.
  for (auto change : {+[](SweepConfig& x) { x.steps += 1; }, +[](SweepConfig& x) { x.warmup += 1; },
                      +[](SweepConfig& x) { x.batch_per_rank *= 2; }, +[](SweepConfig& x) { x.seq /= 2; },
                      +[](SweepConfig& x) { x.min_seconds = 0.5; }}) {
    SweepConfig other = c;
    change(other);
    try {
      done_keys(csv, other);
      ADD_FAILURE() << "a changed config resumed";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(csv + ":2: --resume: this point (dp2 shard=none tiny fp32)"), std::string::npos)
          << e.what();
    }
  }
  // Rows of points the new config does not run do not matter.
  SweepConfig fewer = c;
  fewer.strategies = {"shard=zero2"};
  fewer.steps += 1;
  EXPECT_THROW(done_keys(csv, fewer), InputError);  // shard=zero2 is in both
  fewer.worlds = {4};
  EXPECT_EQ(done_keys(csv, fewer).size(), 2u);
}

// combine_rounds: the median of the rounds' medians (one slow window does not
// move it), the spread over every step pooled, the rates at the combined time.
TEST(Sweep, RoundsCombineIntoTheMedianOfTheirMedians) {
  auto round = [](double median, double min, double max, double mean, double cv, int n, double bubble) {
    PointResult r;
    r.step_time_s = median;
    r.step_time_min_s = min;
    r.step_time_max_s = max;
    r.step_time_mean_s = mean;
    r.step_time_cv = cv;
    r.measured_steps = n;
    r.bubble = bubble;
    r.exposed_comm_s = bubble / 10;
    r.tokens_per_s = 1000 / median;
    r.model_flops_per_s = 2e9 / median;
    r.mfu = 0.01 / median;
    return r;
  };
  // Steps {1, 2, 3}, {5, 6, 7} (a slow window), {2, 2, 2}: as pooled nine steps.
  const double sd = 1;  // of {1, 2, 3} and {5, 6, 7}
  std::vector<PointResult> rounds = {round(2, 1, 3, 2, sd / 2, 3, 0.1), round(6, 5, 7, 6, sd / 6, 3, 0.4),
                                     round(2, 2, 2, 2, 0, 3, 0.1)};
  rounds.back().mem_total = 1234;
  PointResult c = combine_rounds(rounds);
  EXPECT_DOUBLE_EQ(c.step_time_s, 2);  // not the slow round's 6
  EXPECT_DOUBLE_EQ(c.step_time_min_s, 1);
  EXPECT_DOUBLE_EQ(c.step_time_max_s, 7);
  EXPECT_EQ(c.measured_steps, 9);
  const std::vector<double> all = {1, 2, 3, 5, 6, 7, 2, 2, 2};
  double mean = 0, var = 0;
  for (double x : all) mean += x / 9;
  for (double x : all) var += (x - mean) * (x - mean) / 8;
  EXPECT_NEAR(c.step_time_mean_s, mean, 1e-12);
  EXPECT_NEAR(c.step_time_cv, std::sqrt(var) / mean, 1e-12);
  EXPECT_NEAR(c.bubble, 0.2, 1e-12);  // weighted by steps: (0.1 + 0.4 + 0.1) / 3
  EXPECT_NEAR(c.exposed_comm_s, 0.02, 1e-12);
  EXPECT_NEAR(c.tokens_per_s, 500, 1e-9);  // at 2 s per step
  EXPECT_NEAR(c.model_flops_per_s, 1e9, 1e-3);
  EXPECT_NEAR(c.mfu, 0.005, 1e-15);
  EXPECT_EQ(c.mem_total, 1234);  // the last round's
  // Two rounds: the mean of the two; one: as it is.
  EXPECT_DOUBLE_EQ(combine_rounds({rounds[0], rounds[1]}).step_time_s, 4);
  EXPECT_DOUBLE_EQ(combine_rounds({rounds[1]}).step_time_s, 6);
  EXPECT_DOUBLE_EQ(combine_rounds({rounds[1]}).step_time_cv, sd / 6);
  EXPECT_THROW(combine_rounds({}), InputError);
  PointResult failed;
  failed.status = "failed";
  EXPECT_THROW(combine_rounds({rounds[0], failed}), InputError);
  // A round's share of the point's steps and seconds.
  SweepConfig cfg = tiny_config();
  cfg.steps = 10;
  cfg.min_seconds = 0.3;
  cfg.rounds = 3;
  const SweepConfig w = round_config(cfg);
  EXPECT_EQ(w.steps, 4);
  EXPECT_DOUBLE_EQ(w.min_seconds, 0.1);
  EXPECT_EQ(w.rounds, 1);
  // Each round starts elsewhere; the last at the first point.
  EXPECT_EQ(round_offset(2, 3, 68), 0u);
  EXPECT_EQ(round_offset(0, 3, 68), 22u);
  EXPECT_EQ(round_offset(1, 3, 68), 45u);
  EXPECT_EQ(round_offset(0, 1, 68), 0u);
  EXPECT_EQ(round_offset(0, 3, 0), 0u);
  EXPECT_EQ(round_offset(0, 2, 1), 0u);
}

// sweep.rounds = 3: one row per point, its steps from three windows; the two
// earlier rounds of each in the rounds file; and a sweep killed before its
// last round resumes from the rounds the file holds, running only the rest.
TEST(Sweep, RoundsInterleaveOverTheSweepAndResume) {
  SweepConfig c = tiny_config();
  c.strategies = {"shard=none", "shard=zero2"};
  c.worlds = {2};
  c.steps = 6;
  c.rounds = 3;
  const std::string csv = fresh_csv("rounds");
  SweepRun run = make_run(csv);
  run.rounds_csv_path = (fs::path(csv).parent_path() / "sweep_rounds.csv").string();
  ASSERT_EQ(run_sweep(c, run).ok, 2);
  CsvTable t = read_csv(csv);
  ASSERT_EQ(t.rows.size(), 2u);
  for (const auto& row : t.rows) EXPECT_EQ(row[t.column("measured_steps")], "6");  // 3 x 2
  EXPECT_TRUE(validate_csv_against_schema(csv, ResultsSchema::builtin()).empty());
  std::map<std::string, std::vector<PointResult>> rounds = done_rounds(run.rounds_csv_path, c);
  ASSERT_EQ(rounds.size(), 2u);
  for (const auto& [key, r] : rounds) {
    ASSERT_EQ(r.size(), 2u) << key;
    EXPECT_EQ(r[0].measured_steps, 2);
    EXPECT_GT(r[1].step_time_s, 0);
  }
  // The rounds file is not read for points in the CSV; without them, a
  // resume with only round 0 of the second point runs its rounds 1 and 2.
  const std::string key = "shard=zero2|dp2|tiny|fp32|1|weak";
  std::map<std::string, std::vector<PointResult>> first_only = {{key, {rounds.at(key)[0]}}};
  const std::string again = fresh_csv("rounds_resume");
  SweepRun resumed = make_run(again);
  std::ostringstream progress;
  resumed.progress = &progress;
  SweepSummary s = run_sweep(c, resumed, {"shard=none|dp2|tiny|fp32|1|weak"}, first_only);
  EXPECT_EQ(s.points, 1);
  EXPECT_EQ(s.skipped, 1);
  EXPECT_EQ(progress.str().find("round 1/3"), std::string::npos) << progress.str();
  EXPECT_NE(progress.str().find("[1/2] dp2 shard=zero2 tiny fp32 mb1 weak round 2/3"), std::string::npos)
      << progress.str();
  t = read_csv(again);
  ASSERT_EQ(t.rows.size(), 1u);
  EXPECT_EQ(t.rows[0][t.column("measured_steps")], "6");  // round 0's 2 steps and this run's 4
  // The rounds count is in the point's hash: another count refuses the file.
  SweepConfig other = c;
  other.rounds = 2;
  EXPECT_NE(point_config_hash(c, expand(c)[0]), point_config_hash(other, expand(other)[0]));
  try {
    done_rounds(run.rounds_csv_path, other);
    ADD_FAILURE() << "rounds of other settings resumed";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("sweep_rounds.csv:2: --resume: point shard=none|dp2"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(done_rounds(run.rounds_csv_path + ".absent", c).empty());
}

// A rounds file that is not one, or holds rows that are not numbers in range,
// is refused naming the file, the line and the cell; a torn last row is not.
TEST(Sweep, RoundsFileRowsAreCheckedOnResume) {
  SweepConfig c = tiny_config();
  c.strategies = {"shard=none"};
  c.worlds = {2};
  c.rounds = 3;
  const SweepPoint p = expand(c)[0];
  const std::string path = (fs::path(fresh_csv("rounds_file")).parent_path() / "sweep_rounds.csv").string();
  const std::string header =
      "key,config_hash,round,step_time_s,step_time_min_s,step_time_max_s,step_time_mean_s,step_time_cv,"
      "measured_steps,bubble,exposed_comm_s\n";
  const std::string head = p.key() + "," + point_config_hash(c, p) + ",";
  auto message = [&](const std::string& text) {
    std::ofstream(path, std::ios::trunc) << text;
    try {
      done_rounds(path, c);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("a,b\n1,2\n").find("not a sweep rounds file"), std::string::npos);
  EXPECT_NE(message(header + head + "0,nan,1,1,1,0,3,0,0\n").find(path + ":2: step_time_s 'nan'"), std::string::npos);
  EXPECT_NE(message(header + head + "0,1,1,1,1,0,3,-1,0\n").find("bubble '-1'"), std::string::npos);
  EXPECT_NE(message(header + head + "0.5,1,1,1,1,0,3,0,0\n").find("round '0.5'"), std::string::npos);
  EXPECT_NE(message(header + head + "99,1,1,1,1,0,3,0,0\n").find("round '99'"), std::string::npos);
  EXPECT_NE(message(header + head + "0,1,1,1,1,0,0,0,0\n").find("measured_steps '0'"), std::string::npos);
  EXPECT_NE(message(header + head + "0,1,2,3,1,0,3,0,0\n").find("min <= median <= max"), std::string::npos);
  EXPECT_EQ(message(header + head + "0,1,1,1,1,0,3,0,0\n" + head + "1,2,2"), "no error");  // torn tail
  EXPECT_EQ(done_rounds(path, c).at(p.key()).size(), 1u);
  // A gap ends a point's rounds; a row of a point the config does not run is skipped.
  std::ofstream(path, std::ios::trunc) << header << head << "0,1,1,1,1,0,3,0,0\n"
                                       << head << "2,1,1,1,1,0,3,0,0\n"
                                       << "other|dp9,abc,0,1,1,1,1,0,3,0,0\n";
  const auto r = done_rounds(path, c);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r.at(p.key()).size(), 1u);
}

TEST(SweepConfig, RulesNameTheKey) {
  auto read = [](const std::string& toml) {
    ConfigReader r = ConfigReader::from_string(toml);
    return read_sweep_config(r);
  };
  auto message = [&](const std::string& toml) {
    try {
      read(toml);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("[sweep]\nworld = [2]\n").find("sweep.world"), std::string::npos);
  EXPECT_NE(message("[sweep]\nscaling = \"linear\"\n").find("sweep.scaling"), std::string::npos);
  EXPECT_NE(message("[sweep]\nworlds = [0]\n").find("sweep.worlds"), std::string::npos);
  EXPECT_NE(message("[sweep]\nstrategies = [\"shard=zero9\"]\n").find("sweep.strategies"), std::string::npos);
  EXPECT_NE(message("[sweep]\nstrategies = [\"zero3\"]\n").find("key=value"), std::string::npos);
  EXPECT_NE(message("[sweep]\nmeshes = [\"dp2.xp2\"]\n").find("sweep.meshes"), std::string::npos);
  EXPECT_NE(message("[sweep]\nsteps = 0\n").find("sweep.steps"), std::string::npos);
  EXPECT_NE(message("[sweep]\nmin_seconds = -1\n").find("sweep.min_seconds"), std::string::npos);
  EXPECT_NE(message("[sweep]\nmin_seconds = 1e9\n").find("sweep.min_seconds"), std::string::npos);
  EXPECT_NE(message("[sweep]\nmin_seconds = 0.1\nwarmup = 0\n").find("sweep.warmup"), std::string::npos);
  EXPECT_NE(message("[sweep]\nmin_seconds = 0.1\nsteps = 2000000000\n").find("sweep.steps"), std::string::npos);
  EXPECT_NE(message("[sweep]\nrounds = 0\n").find("sweep.rounds"), std::string::npos);
  EXPECT_NE(message("[sweep]\nrounds = 16\n").find("sweep.rounds: at most 15"), std::string::npos);
  EXPECT_EQ(read("[sweep]\nrounds = 3\n").rounds, 3);
  SweepConfig c = read("[sweep]\nscaling = \"strong\"\nworlds = [1, 4]\nmicrobatches = [1, 2]\n");
  EXPECT_EQ(c.scaling, std::vector<std::string>{"strong"});
  EXPECT_EQ(c.global_batch, 32);  // batch_per_rank x max world
  EXPECT_EQ(expand(c).size(), 4u);
  c = read("[sweep]\nscaling = [\"weak\", \"strong\"]\n");
  EXPECT_EQ(c.scaling.size(), 2u);
  // Spellings become the one canonical text (the row's and the resume key's).
  c = read("[sweep]\nstrategies = [\"schedule=zb-h1,shard=zero1\"]\nmeshes = [\"pp2.dp2\", \"dp1\"]\n");
  EXPECT_EQ(c.strategies, std::vector<std::string>{"shard=zero1,schedule=zb-h1"});
  EXPECT_EQ(c.meshes, (std::vector<std::string>{"dp2.pp2", "dp1"}));
  EXPECT_EQ(c.global_batch, 16);  // batch_per_rank x max dp
  // Products of sizes are checked and named by their factors (issue #50,
  // class 3: 2e9 per rank at dp2 once wrapped to a negative global batch).
  EXPECT_NE(message("[sweep]\nbatch_per_rank = 2000000000\nworlds = [1, 2]\n")
                .find("sweep.batch_per_rank x the largest dp = 2000000000 x 2"),
            std::string::npos);
  EXPECT_NE(message("[sweep]\nbatch_per_rank = 2000000000\nworlds = [1, 9223372036854775807]\n")
                .find("2000000000 x 9223372036854775807"),
            std::string::npos);
  EXPECT_NE(message("[sweep]\nscaling = \"strong\"\nbatch_per_rank = 2000000000\nworlds = [2]\n")
                .find("strong scaling's default sweep.global_batch"),
            std::string::npos);
  EXPECT_EQ(read("[sweep]\nscaling = \"strong\"\nbatch_per_rank = 2000000000\nworlds = [2]\nglobal_batch = 8\n")
                .global_batch,
            8);  // batch_per_rank unused: strong scaling with its own global batch
  EXPECT_EQ(read("[sweep]\nbatch_per_rank = 1073741824\n").batch_per_rank, 1 << 30);  // 2^30 x dp1 is allowed
  EXPECT_NE(message("[sweep]\ndevice = \"gpu\"\n").find("sweep.device"), std::string::npos);
  EXPECT_NE(message("[sweep]\ndevice = \"cuda\"\nextrapolate = [64]\n").find("sweep.extrapolate"), std::string::npos);
  EXPECT_EQ(read("[sweep]\ndevice = \"cuda\"\n").device, Device::cuda);
  EXPECT_NE(point_config_hash(read("[sweep]\ndevice = \"cuda\"\n"), expand(read("[sweep]\n"))[0]),
            point_config_hash(read("[sweep]\n"), expand(read("[sweep]\n"))[0]));
}

// Pipeline meshes: the sweep measures the bubble (not 0), the memory of the
// worst stage and the bytes sent between stages.
TEST(Sweep, PipelinePointsMeasureBubbleAndP2P) {
  SweepConfig c = tiny_config();
  c.strategies = {"shard=none", "shard=zero3,schedule=gpipe"};
  c.meshes = {"pp2", "dp2"};
  c.microbatches = {2};
  c.models = {"tiny"};
  const std::string csv = fresh_csv("pipeline");
  SweepSummary s = run_sweep(c, make_run(csv));
  EXPECT_EQ(s.ok, 4);
  EXPECT_TRUE(validate_csv_against_schema(csv, ResultsSchema::builtin()).empty());
  CsvTable t = read_csv(csv);
  for (const auto& row : t.rows) {
    const bool pipe = row[t.column("mesh")] == "pp2";
    const bool scheduled = row[t.column("strategy")].find("schedule=") != std::string::npos;
    SCOPED_TRACE(row[t.column("mesh")] + " " + row[t.column("strategy")]);
    EXPECT_EQ(row[t.column("world")], "2");
    if (pipe) {
      EXPECT_GT(std::stod(row[t.column("bubble")]), 0);
      EXPECT_LT(std::stod(row[t.column("bubble")]), 1);
      EXPECT_GT(std::stoll(row[t.column("comm_pp_bytes")]), 0);
    } else {
      EXPECT_EQ(std::stoll(row[t.column("comm_pp_bytes")]), 0);
      if (!scheduled) {
        EXPECT_EQ(std::stod(row[t.column("bubble")]), 0);
      }
    }
  }
}

// sweep.device = cuda on stand-in devices (reference/device_testing.h) over a
// local world of the point's size: a data-parallel, a pipeline, a
// tensor-, a context- and an expert-parallel point run each rank's states,
// buffers and messages through its device, measure the same memory per tag
// (an MoE layer's routing state is host memory there: less activation memory
// on the device) and the same bytes as on the CPU, and free all of it; a
// device point without a world (threads over one process's memory) is refused.
TEST(Sweep, DevicePointsRunEachRankOnItsDevice) {
  SweepConfig c = tiny_config();
  c.microbatches = {2};
  struct Case {
    const char *mesh, *strategy, *model;
  };
  for (const Case& k : {Case{"dp2", "shard=zero3", ""}, Case{"pp2", "shard=none,schedule=1f1b", ""},
                        Case{"tp2", "shard=none,sp=true", ""}, Case{"cp2", "shard=none", ""},
                        Case{"dp2.ep2", "shard=none", "tiny-moe"}}) {
    const std::string mesh = k.mesh, strategy = k.strategy, model = k.model;
    SCOPED_TRACE(mesh + " " + strategy + " " + model);
    c.device = Device::cpu;
    SweepPoint p;
    for (const SweepPoint& q : expand(c))
      if (q.world() == 2) p = q;
    p = make_point(strategy, mesh, model.empty() ? p.model() : model, p.precision(), p.scaling, p.microbatches);
    const bool moe = !model.empty();
    const PointResult cpu = run_point(c, p, 1e9);
    ASSERT_EQ(cpu.status, "ok") << cpu.reason;
    c.device = Device::cuda;
    testing::StandInDevices devices;
    WorldOptions wo;
    wo.size = 2;
    auto world = make_local_world(wo);
    const PointResult dev = run_point(c, p, 1e9, world.get(), [&] { return devices.open(); });
    ASSERT_EQ(dev.status, "ok") << dev.reason;
    EXPECT_EQ(cpu.device, "cpu");
    EXPECT_EQ(dev.device, "stand-in device");  // rank 0's device names the row
    const CsvRecord rec = to_record(p, dev);
    ASSERT_NE(rec.find("device"), nullptr);
    EXPECT_EQ(*rec.find("device"), "stand-in device");
    const int ws = int(MemTag::workspace), act = int(MemTag::activations);
    for (int t = 0; t < 6; ++t) {  // but the workspace: a device's kernels keep their own (device_ops.h)
      if (t == ws || (moe && t == act)) continue;
      EXPECT_EQ(dev.mem[t], cpu.mem[t]) << "tag " << t;
    }
    EXPECT_LT(dev.mem[ws], cpu.mem[ws]);
    if (moe) {
      EXPECT_LT(dev.mem[act], cpu.mem[act]);
      EXPECT_GT(dev.comm_ep_bytes, 0);
      EXPECT_EQ(dev.comm_ep_bytes, cpu.comm_ep_bytes);
    } else {
      EXPECT_EQ(dev.mem_total - dev.mem[ws], cpu.mem_total - cpu.mem[ws]);
    }
    EXPECT_EQ(dev.comm_dp_bytes, cpu.comm_dp_bytes);
    EXPECT_EQ(dev.comm_pp_bytes, cpu.comm_pp_bytes);
    EXPECT_EQ(dev.comm_tp_bytes, cpu.comm_tp_bytes);
    EXPECT_EQ(dev.comm_cp_bytes, cpu.comm_cp_bytes);
    if (mesh == "tp2") {
      EXPECT_GT(dev.comm_tp_bytes, 0);
    }
    EXPECT_GT(dev.step_time_s, 0);
    const auto memories = devices.memories();
    ASSERT_EQ(memories.size(), 2u) << "one device per rank";
    for (const auto& m : memories) {
      EXPECT_GT(m->allocations(), 0);
      EXPECT_EQ(m->live(), 0u);
    }
    EXPECT_EQ(run_point(c, p, 1e9).status, "rejected");  // no world: threads, not GPUs
    EXPECT_NE(run_point(c, p, 1e9).reason.find("sweep.device"), std::string::npos);
  }
}

}  // namespace
}  // namespace pb::sweep
