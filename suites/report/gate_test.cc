// The gate on small results tables: it must fail on a throughput drop, a
// memory rise, a conformance failure, a wrong collective, a missing point or a
// point that stopped running, and pass on unchanged data and on moves within
// the thresholds.
#include "suites/report/gate.h"

#include <gtest/gtest.h>

#include <string>

#include "harness/status.h"

namespace pb::report {
namespace {

const std::string kSweepHead =
    "run_id,kind,backend,world,mesh,status,reason,strategy,model,precision,scaling,global_batch,seq_len,"
    "microbatches,tokens_per_s,mem_total,mem_host_total,mem_activations\n";

std::string sweep_row(const std::string& strategy, int world, double tps, long mem, const std::string& status = "ok") {
  return "r1,sweep,local," + std::to_string(world) + ",dp" + std::to_string(world) + "," + status +
         "," + (status == "ok" ? "" : "out of memory") + "," + strategy + ",small,fp32,strong,16,64,1," +
         (status == "ok" ? std::to_string(tps) : "") + "," + (status == "ok" ? std::to_string(mem) : "") +
         ",0,1000\n";
}

std::string sweep(double tps_scale = 1.0, double mem_scale = 1.0, bool drop = false, const std::string& last = "ok") {
  std::string s = kSweepHead;
  s += sweep_row("ddp", 2, 20000 * tps_scale, long(4'000'000 * mem_scale));
  s += sweep_row("zero2", 2, 19000 * tps_scale, long(3'000'000 * mem_scale));
  if (!drop) s += sweep_row("zero3", 4, 30000 * tps_scale, long(2'000'000 * mem_scale), last);
  return s;
}

std::string conformance(bool fail) {
  return "run_id,kind,backend,world,mesh,status,reason,strategy,precision,quantity,step,ratio,threshold,pass\n"
         "r1,conformance,local,4,dp4,ok,,zero3,fp32,loss,1,0.7,8,1\n"
         "r1,conformance,local,4,dp4,ok,,zero3,fp32,loss,2,1.3,8,1\n"
         "r1,conformance,local,4,dp4,ok,,zero3,fp32,grads,1," +
         std::string(fail ? "12.5,8,0\n" : "0.9,8,1\n");
}

std::vector<GateTable> tables(const std::string& sweep_csv, const std::string& conf_csv) {
  return {{"sweep.csv", parse_csv(sweep_csv, "sweep.csv")}, {"conformance.csv", parse_csv(conf_csv, "conf.csv")}};
}

GateResult gate(const std::string& cur_sweep, const std::string& cur_conf, GateOptions o = {}) {
  return run_gate(tables(sweep(), conformance(false)), tables(cur_sweep, cur_conf), o);
}

int count(const GateResult& r, const std::string& metric) {
  int n = 0;
  for (const GateLine& l : r.lines) n += l.verdict == "FAIL" && l.metric == metric;
  return n;
}

TEST(Gate, UnchangedPasses) {
  const GateResult r = gate(sweep(), conformance(false));
  EXPECT_TRUE(r.passed());
  EXPECT_EQ(r.baseline_points, 6);  // 3 sweep points + 3 conformance keys
  EXPECT_EQ(r.current_points, 6);
  EXPECT_NE(format_gate_table(r, {}).find("nothing moved"), std::string::npos);
}

TEST(Gate, ThroughputDropOf20PercentFails) {
  const GateResult r = gate(sweep(0.8), conformance(false));
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(count(r, "tokens_per_s"), 3);
  EXPECT_NEAR(r.lines.front().change, -0.2, 1e-9);
  const std::string table = format_gate_table(r, {});
  EXPECT_NE(table.find("throughput drop beyond 10%"), std::string::npos);
  EXPECT_NE(table.find("FAIL: 3 failures"), std::string::npos);
}

TEST(Gate, MovesWithinThresholdsPass) {
  EXPECT_TRUE(gate(sweep(0.95, 1.04), conformance(false)).passed());
  EXPECT_TRUE(gate(sweep(1.5, 0.5), conformance(false)).passed());  // faster and smaller is fine
  GateOptions loose;
  loose.max_throughput_drop = 0.25;
  EXPECT_TRUE(gate(sweep(0.8), conformance(false), loose).passed());
}

// Sweep rows with their measured spread: the throughput threshold widens by
// twice the combined coefficient of variation, so a drop inside the noise
// passes and one beyond it still fails.
TEST(Gate, ThroughputIsHeldToTheMeasuredSpread) {
  auto noisy = [](double tps, double cv) {
    return std::string("run_id,kind,backend,world,mesh,status,reason,strategy,model,precision,scaling,global_batch,"
                       "seq_len,microbatches,tokens_per_s,step_time_cv\n") +
           "r1,sweep,local,2,dp2,ok,,ddp,small,fp32,strong,16,64,1," + std::to_string(tps) + "," +
           std::to_string(cv) + "\n";
  };
  auto run = [&](double tps, double cv_base, double cv_cur) {
    return run_gate({{"b.csv", parse_csv(noisy(20000, cv_base), "b.csv")}},
                    {{"c.csv", parse_csv(noisy(tps, cv_cur), "c.csv")}}, {});
  };
  // cv 8% on both: allowed drop 10% + 2 x 11.3% = 32.6%.
  EXPECT_TRUE(run(16000, 0.08, 0.08).passed());  // -20%: inside the noise
  const GateResult r = run(12000, 0.08, 0.08);   // -40%: beyond it
  ASSERT_FALSE(r.passed());
  EXPECT_NE(r.lines.front().why.find("+ 2 x the measured spread (cv 11.3137%)"), std::string::npos)
      << r.lines.front().why;
  EXPECT_FALSE(run(16000, 0.0, 0.0).passed());  // quiet runs: the bare 10% holds
  // Very noisy runs (cv 50%: 2 x 70.7% of allowance) are capped at 50%: a
  // 55% drop passes, a 99% drop (what a few noisy steps once hid) fails.
  EXPECT_TRUE(run(9000, 0.5, 0.5).passed());
  const GateResult big = run(200, 0.5, 0.5);
  ASSERT_FALSE(big.passed());
  EXPECT_NE(big.lines.front().why.find("allowance capped at 50%"), std::string::npos) << big.lines.front().why;
}

TEST(Gate, MemoryRiseFails) {
  const GateResult r = gate(sweep(1.0, 1.06), conformance(false));
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(count(r, "mem_total"), 3);
}

TEST(Gate, ConformanceFailureFails) {
  const GateResult r = gate(sweep(), conformance(true));
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(r.failures, 1);
  EXPECT_EQ(count(r, "pass"), 1);
}

TEST(Gate, MissingOrBrokenPointFails) {
  const GateResult missing = gate(sweep(1.0, 1.0, /*drop=*/true), conformance(false));
  EXPECT_EQ(missing.failures, 1);
  EXPECT_EQ(count(missing, "(point)"), 1);
  const GateResult oom = gate(sweep(1.0, 1.0, false, "oom"), conformance(false));
  EXPECT_EQ(count(oom, "status"), 1);
}

TEST(Gate, RepeatsAreAveraged) {
  // Two measurements of one point: 18000 and 22000 average to the baseline.
  std::string s = kSweepHead + sweep_row("ddp", 2, 18000, 4'000'000) + sweep_row("ddp", 2, 22000, 4'000'000) +
                  sweep_row("zero2", 2, 19000, 3'000'000) + sweep_row("zero3", 4, 30000, 2'000'000);
  EXPECT_TRUE(gate(s, conformance(false)).passed());
}

TEST(Gate, WrongCollectiveFails) {
  const std::string head = "run_id,kind,backend,world,mesh,status,reason,op,bytes,dtype,inplace,busbw_gbps,wrong\n";
  const auto base = std::vector<GateTable>{{"c", parse_csv(head + "r,collective,local,2,,ok,,all_reduce,1024,fp32,0,1.5,0\n", "c")}};
  const auto cur = std::vector<GateTable>{{"c", parse_csv(head + "r,collective,local,2,,ok,,all_reduce,1024,fp32,0,1.5,3\n", "c")}};
  EXPECT_EQ(count(run_gate(base, cur, {}), "wrong"), 1);
}

TEST(Gate, BadInputIsInputError) {
  const auto bad_kind = std::vector<GateTable>{{"x.csv", parse_csv("kind,a\nnope,1\n", "x.csv")}};
  EXPECT_THROW(run_gate(bad_kind, bad_kind, {}), InputError);
  const auto no_kind = std::vector<GateTable>{{"y.csv", parse_csv("a,b\n1,2\n", "y.csv")}};
  EXPECT_THROW(run_gate(no_kind, no_kind, {}), InputError);
  std::string text = sweep();
  text.replace(text.find("20000"), 5, "fast!");
  EXPECT_THROW(run_gate(tables(text, conformance(false)), tables(sweep(), conformance(false)), {}), InputError);
  GateOptions o;
  o.max_throughput_drop = 1.5;
  EXPECT_THROW(gate(sweep(), conformance(false), o), InputError);
  EXPECT_THROW(load_gate_input("/nonexistent/results.csv"), InputError);
}

}  // namespace
}  // namespace pb::report
