// The run spec's one text form round-trips — parse(print(x)) == x for the
// mesh, the strategy text and the TOML form, over every option alone, all
// together and random combinations — and every bad spelling is an InputError
// naming the part that is wrong and what is allowed.
#include "impl/spec/run_spec.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "harness/io/config.h"
#include "harness/status.h"

namespace pb {
namespace {

// A fault catalogue of two axes (the axes' own tables live above impl/spec,
// in impl/<axis>/; impl/registry.h fault_catalogue() joins them).
const FaultDecl kFaults[] = {{"grad_not_averaged", FaultAxis::data, 0, "the average is a sum"},
                             {"skip_bucket", FaultAxis::data, 1, "a bucket is not reduced"},
                             {"drop_w", FaultAxis::pipeline, 3, "a weight-gradient pass is skipped"}};

// Every option set to a value other than its default, one setter each.
std::vector<std::pair<std::string, std::function<void(RunSpec&)>>> every_option() {
  return {
      {"shard", [](RunSpec& s) { s.data.shard = dp::Shard::hzero; }},
      {"offload", [](RunSpec& s) { s.data.offload = dp::Offload::optimizer; }},
      {"bucket_mb", [](RunSpec& s) { s.data.bucket_bytes = 16 << 10; }},
      {"bucket_mb_odd", [](RunSpec& s) { s.data.bucket_bytes = 12345; }},
      {"overlap", [](RunSpec& s) { s.data.overlap = false; }},
      {"prefetch", [](RunSpec& s) { s.data.prefetch = 3; }},
      {"prefetch0", [](RunSpec& s) { s.data.prefetch = 0; }},
      {"reshard_after_forward", [](RunSpec& s) { s.data.reshard_after_forward = false; }},
      {"shard_group", [](RunSpec& s) { s.data.shard_group = 4; }},
      {"sp", [](RunSpec& s) { s.tensor.sp = true; }},
      {"recompute", [](RunSpec& s) { s.tensor.recompute = Recompute::selective; }},
      {"recompute_full", [](RunSpec& s) { s.tensor.recompute = Recompute::full; }},
      {"cp_algo", [](RunSpec& s) { s.context.algo = CpAlgo::ulysses; }},
      {"zigzag", [](RunSpec& s) { s.context.zigzag = false; }},
      {"schedule", [](RunSpec& s) { s.pipe.schedule = pipeline::ScheduleKind::zb_h1; }},
      {"schedule_1f1b", [](RunSpec& s) { s.pipe.schedule = pipeline::ScheduleKind::one_f_one_b; }},
      {"virtual_stages", [](RunSpec& s) { s.pipe.virtual_stages = 3; }},
      {"faults", [](RunSpec& s) { s.faults = {&kFaults[2], &kFaults[1]}; }},
  };
}

// A spec whose train config the TOML form can hold: a named model (the train
// config's reader knows models by name).
RunSpec base() {
  RunSpec s;
  s.train.model = named_model("tiny");
  return s;
}

RunSpec from_text(const std::string& mesh, const std::string& strategy) {
  RunSpec s = base();
  s.mesh = parse_mesh(mesh);
  apply_strategy_text(s, strategy, kFaults);
  return s;
}

// The text covers the mesh and the strategy; the train config has its own form.
void expect_text_round_trip(const RunSpec& x) {
  RunSpec y = from_text(mesh_text(x.mesh), strategy_text(x));
  y.train = x.train;
  EXPECT_TRUE(y == x) << spec_label(x) << " -> " << spec_label(y);
  EXPECT_EQ(spec_label(y), spec_label(x));
}

void expect_toml_round_trip(const RunSpec& x) {
  ConfigReader w;
  write_run_spec(x, w);
  ConfigReader r = ConfigReader::from_string(w.dump());
  const RunSpec y = read_run_spec(r, kFaults);
  r.check_no_unknown_keys();
  EXPECT_TRUE(y == x) << spec_label(x) << " -> " << spec_label(y) << "\n" << w.dump();
}

// Found by suites/fuzz/fuzz_run_spec_text: validate(MeshShape) multiplied the
// axis sizes in int, so a mesh of a world past 2^31 ranks overflowed (UB)
// instead of being refused.
TEST(RunSpec, MeshWorldPastIntIsInputError) {
  for (const auto& t : {"dp4.tp1870978474", "dp65536.tp65536", "dp2147483647.tp2147483647.cp2147483647.pp2147483647"}) {
    try {
      parse_mesh(t, "--mesh");
      ADD_FAILURE() << t;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("world size"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("2^31"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(world_size(parse_mesh("dp2147483647")), 2147483647);  // the largest world still fits
  EXPECT_THROW(parse_mesh("dp2.pp1073741824"), InputError);
}

TEST(RunSpec, MeshTextRoundTrips) {
  for (const auto& t : {"dp1", "dp2", "tp4", "dp2.tp2.pp2", "dp2.tp2.cp2.ep2.pp2", "pp8", "cp3.pp2", "dp4.rpn2",
                        "dp8.tp8.pp16.rpn8"}) {
    EXPECT_EQ(mesh_text(parse_mesh(t)), t);
    EXPECT_EQ(parse_mesh(mesh_text(parse_mesh(t))), parse_mesh(t));
  }
  // Any axis order in, the canonical order out.
  EXPECT_EQ(mesh_text(parse_mesh("pp2.tp2.dp2")), "dp2.tp2.pp2");
  EXPECT_EQ(mesh_text(parse_mesh("dp1.tp1.cp1.pp1")), "dp1");
  MeshShape m;
  m.dp = 3;
  m.pp = 5;
  m.ranks_per_node = 3;
  EXPECT_EQ(parse_mesh(mesh_text(m)), m);
}

TEST(RunSpec, EveryOptionRoundTripsAloneAndTogether) {
  RunSpec all = base();
  all.mesh = parse_mesh("dp2.tp2.pp2");
  for (const auto& [name, set] : every_option()) {
    SCOPED_TRACE(name);
    RunSpec s = base();
    s.mesh = parse_mesh("dp4.pp2.rpn4");
    set(s);
    EXPECT_FALSE(s == base()) << name << " did not change the spec";
    expect_text_round_trip(s);
    expect_toml_round_trip(s);
    set(all);
  }
  expect_text_round_trip(all);
  expect_toml_round_trip(all);
  EXPECT_EQ(strategy_text(RunSpec{}), "shard=none");  // never empty
  EXPECT_EQ(strategy_text(from_text("dp2", "schedule=zb-h1,shard=zero3,prefetch=2")),
            "shard=zero3,prefetch=2,schedule=zb-h1");
}

TEST(RunSpec, RandomCombinationsRoundTrip) {
  const auto opts = every_option();
  std::mt19937 rng(20261122);
  const char* meshes[] = {"dp1", "dp2", "pp4", "dp2.pp2", "dp3.tp2.cp2", "dp2.ep2.pp2.rpn2"};
  for (int i = 0; i < 300; ++i) {
    RunSpec s = base();
    s.mesh = parse_mesh(meshes[rng() % 6]);
    for (const auto& [name, set] : opts)
      if (rng() % 2) set(s);
    s.train.microbatches = 1 + int(rng() % 4);
    s.train.batch = s.mesh.dp * s.train.microbatches * (1 + int(rng() % 3));
    s.train.steps = 1 + int(rng() % 9);
    expect_text_round_trip(s);
    expect_toml_round_trip(s);
  }
}

// `what` must name the part that is wrong; `allowed` what would be right.
void expect_bad_strategy(const std::string& text, const std::string& what, const std::string& allowed) {
  RunSpec s;
  try {
    apply_strategy_text(s, text, kFaults, "--strategy");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(what), std::string::npos) << text << ": " << m;
    EXPECT_NE(m.find(allowed), std::string::npos) << text << ": " << m;
  }
}

void expect_bad_mesh(const std::string& text, const std::string& what, const std::string& allowed) {
  try {
    parse_mesh(text, "--mesh");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--mesh"), std::string::npos) << m;
    EXPECT_NE(m.find(what), std::string::npos) << text << ": " << m;
    EXPECT_NE(m.find(allowed), std::string::npos) << text << ": " << m;
  }
}

TEST(RunSpec, BadTextNamesThePartAndTheAllowedValues) {
  expect_bad_mesh("", "empty", "dp, tp, cp, ep, pp");
  expect_bad_mesh("xp2", "'xp2'", "dp, tp, cp, ep, pp, rpn");
  expect_bad_mesh("dp2.dp2", "dp given twice", "dp2");
  expect_bad_mesh("dp", "'dp'", "whole number >= 1");
  expect_bad_mesh("dp0", "'dp0'", "whole number >= 1");
  expect_bad_mesh("dp-2", "'dp-2'", "whole number >= 1");
  expect_bad_mesh("dp99999999999", "'dp99999999999'", "whole number >= 1");
  expect_bad_mesh("dp2..pp2", "''", "dp, tp, cp, ep, pp, rpn");
  expect_bad_mesh("DP2", "'DP2'", "dp, tp, cp, ep, pp, rpn");
  expect_bad_mesh("dp2.rpn3", "rpn", "ranks_per_node");
  expect_bad_strategy("zero3", "'zero3'", "key=value");
  expect_bad_strategy("shard=zero9", "'zero9'", "none, zero1, zero2, zero3, hsdp, hzero");
  expect_bad_strategy("shard=", "''", "none, zero1");
  expect_bad_strategy("sahrd=zero3", "'sahrd'", "shard, offload");
  expect_bad_strategy("offload=cpu", "'cpu'", "none, optimizer");
  expect_bad_strategy("overlap=maybe", "'maybe'", "on or off");
  expect_bad_strategy("prefetch=5", "'5'", "[0, 4]");
  expect_bad_strategy("prefetch=-1", "'-1'", "[0, 4]");
  expect_bad_strategy("prefetch=x", "'x'", "[0, 4]");
  expect_bad_strategy("bucket_mb=0", "bucket_mb", "> 0");
  expect_bad_strategy("bucket_mb=inf", "bucket_mb", "> 0");
  expect_bad_strategy("bucket_mb=abc", "'abc'", "number");
  expect_bad_strategy("cp_algo=tree", "'tree'", "ring, ulysses");
  expect_bad_strategy("recompute=some", "'some'", "none, selective, full");
  expect_bad_strategy("schedule=pipedream", "'pipedream'", "gpipe, 1f1b, interleaved, zb-h1 or 2bw");
  expect_bad_strategy("virtual_stages=0", "'0'", "[1, inf]");
  expect_bad_strategy("faults=Bad-Name", "--strategy.faults: unknown fault 'Bad-Name'",
                      "(data-parallel faults: grad_not_averaged, skip_bucket; pipeline faults: drop_w)");
  expect_bad_strategy("faults=drop_w+bogus", "unknown fault 'bogus'", "pipeline faults: drop_w");
  expect_bad_strategy("faults=", "unknown fault ''", "data-parallel faults");
  expect_bad_strategy("shard_group=-2", "'-2'", "[0, inf]");
}

TEST(RunSpec, BadTomlNamesTheKey) {
  auto message = [](const std::string& toml) {
    try {
      ConfigReader r = ConfigReader::from_string(toml);
      read_run_spec(r, kFaults);
      r.check_no_unknown_keys();
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("[strategy]\nmesh = 'dp2.xx3'\n").find("strategy.mesh"), std::string::npos);
  EXPECT_NE(message("[strategy]\nmesh = 'dp3'\n").find("train.batch"), std::string::npos);  // 8 over 3
  EXPECT_NE(message("[strategy]\nshard = 'zero4'\n").find("strategy.shard"), std::string::npos);
  EXPECT_NE(message("[strategy]\nprefetch = 9\n").find("strategy.prefetch"), std::string::npos);
  EXPECT_NE(message("[strategy]\nschedule = 'x'\n").find("strategy.schedule"), std::string::npos);
  EXPECT_NE(message("[strategy]\nbucket_mb = -1.0\n").find("strategy.bucket_mb"), std::string::npos);
  EXPECT_NE(message("[strategy]\nmesh = 'dp2'\n[train]\nmicrobatches = 3\n").find("train.microbatches"),
            std::string::npos);
  EXPECT_NE(message("[strategy]\nshrad = 'zero3'\n").find("strategy.shrad"), std::string::npos);
  EXPECT_NE(message("[strategy]\nfaults = ['drop_w', 'Not OK']\n")
                .find("strategy.faults: unknown fault 'Not OK' (data-parallel faults: grad_not_averaged"),
            std::string::npos);
  EXPECT_NE(message("[strategy]\ndp = 4\n").find("strategy.dp"), std::string::npos);  // the mesh says it now
}

}  // namespace
}  // namespace pb

namespace pb {
namespace {

// Faults are typed from the parser on: a name becomes its catalogue row
// (the same object, so its axis and value travel with it), the text and the
// TOML forms alike, sorted by name and unique; the printer gives the names
// back.
TEST(RunSpec, FaultNamesResolveToTheirRowsAtParse) {
  RunSpec s = base();
  apply_strategy_text(s, "faults=skip_bucket+drop_w+skip_bucket", kFaults);
  ASSERT_EQ(s.faults.size(), 2u);
  EXPECT_EQ(s.faults[0], &kFaults[2]);  // drop_w sorts first
  EXPECT_EQ(s.faults[1], &kFaults[1]);
  EXPECT_EQ(fault_values<int>(s.faults, FaultAxis::pipeline), std::vector<int>{3});
  EXPECT_EQ(fault_values<int>(s.faults, FaultAxis::data), std::vector<int>{1});
  EXPECT_EQ(strategy_text(s), "shard=none,faults=drop_w+skip_bucket");
  ConfigReader r = ConfigReader::from_string("[strategy]\nfaults = ['skip_bucket', 'grad_not_averaged']\n");
  const RunSpec t = read_run_spec(r, kFaults);
  EXPECT_EQ(t.faults, (Faults{&kFaults[0], &kFaults[1]}));
  RunSpec none = base();
  EXPECT_THROW(apply_strategy_text(none, "faults=skip_bucket", FaultCatalogue{}), InputError);  // nothing declared
}

// A strategy that does not declare a fault of the catalogue refuses it,
// naming the ones it does declare.
TEST(RunSpec, CheckDeclaredNamesTheStrategysFaults) {
  const Faults f = parse_faults(kFaults, "drop_w", "strategy.faults");
  EXPECT_NO_THROW(check_declared(kFaults, f, "the test strategy"));
  try {
    check_declared(std::span(kFaults, 2), f, "the test strategy");
    ADD_FAILURE() << "accepted an undeclared fault";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "strategy.faults: 'drop_w' is not a fault of the test strategy (data-parallel faults: "
                 "grad_not_averaged, skip_bucket)");
  }
}

}  // namespace
}  // namespace pb
