// Resharding against an uninterrupted run (reshard.h): the pairs pass (bitwise
// where both sides are), every checkpoint fault is caught at fp32 and
// bf16-mixed, and bad checkpoints are refused naming what is wrong.
#include "suites/conformance/reshard.h"
#include "suites/conformance/reshard_testing.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

#include "harness/input_error_testing.h"
#include "harness/status.h"

namespace pb {
namespace {

namespace fs = std::filesystem;
using namespace reshard_testing;
constexpr ReshardShape kShape{};

ReshardRun pair(const std::string& a, const std::string& b, Precision p, const std::string& model = "") {
  return reshard_testing::pair(a, b, p, model, kShape);
}
RunSpec spec(const std::string& s, const std::string& model = "tiny") { return side(s, model, kShape); }
struct TempDir : reshard_testing::TempDir {
  explicit TempDir(const std::string& tag) : reshard_testing::TempDir("pb_reshard_test_", tag) {}
};



struct Pair {
  const char* a;
  const char* b;
  bool bitwise;
};

// The data-parallel family is bitwise to its replay on both sides, so the
// resharded run is bitwise to A's replay continued by B's.
const Pair kPairs[] = {
    {"dp2,shard=zero3", "dp4,shard=zero1", true},
    {"dp4", "dp2,shard=zero2", true},
    {"dp2,shard=zero3", "dp3,shard=zero3", true},  // uneven shards at B
    {"dp4,shard=hsdp,shard_group=2", "dp4.rpn2,shard=hzero", true},
    {"dp4.rpn2,shard=hzero", "dp2,shard=zero1,offload=optimizer", true},
    {"dp2.ep2", "dp4.ep4", false},                   // expert parallel, ep 2 -> 4
    {"dp4.ep2,shard=zero3", "dp4,shard=zero1", false},  // MoE, ep 2 -> 1
    {"dp4", "dp2.tp2", false},                          // tensor parallel (tiny-tp: a padded vocabulary)
    {"tp2", "tp4", false},
    {"dp2.tp2,shard=zero3", "dp4,shard=zero1", false},
    {"cp2", "dp2", false},                              // context parallel
    {"dp2,shard=zero3", "tp2.cp2,sp=on", false},
};

TEST(Reshard, PairsPassAndAreBitwiseWhereDeclared) {
  for (Precision p : {Precision::fp32, Precision::bf16_mixed})
    for (const Pair& x : kPairs) {
      const ReshardResult r = run_reshard(pair(x.a, x.b, p));
      EXPECT_TRUE(r.pass()) << why(r) << " " << precision_name(p);
      EXPECT_EQ(r.bitwise_declared, x.bitwise) << r.label;
      EXPECT_EQ(r.bits.empty(), !x.bitwise) << r.label;
      EXPECT_EQ(r.fp64.empty(), x.bitwise) << r.label;  // the fp64 rerun where not bitwise
      EXPECT_EQ(r.trace.loss.size(), 4u);
      EXPECT_FALSE(r.trace.params.empty());
    }
}

// Every checkpoint fault, caught at both precisions on a bitwise pair (by
// bits, and at fp32 by the rule) and on an expert-parallel one (by the rule,
// at bf16-mixed in the fp64 rerun).
TEST(Reshard, EveryCheckpointFaultIsCaught) {
  for (const FaultDecl& d : ckpt_fault_decls())
    for (Precision p : {Precision::fp32, Precision::bf16_mixed}) {
      const std::string f = ",faults=" + std::string(d.name);
      // Uneven shards only exist where a unit does not split evenly: dp 3.
      const bool uneven = d.value == uint8_t(CkptFault::uneven_offset);
      const ReshardResult dp =
          run_reshard(pair("dp2,shard=zero3", (uneven ? "dp3,shard=zero3" : "dp4,shard=zero1") + f, p));
      EXPECT_FALSE(dp.pass()) << d.name << " not caught: " << dp.label;
      EXPECT_FALSE(all_pass(dp.bits)) << d.name << " not caught on bits: " << dp.label;
      if (p == Precision::fp32) {
        EXPECT_FALSE(all_pass(dp.rule)) << d.name << " not caught by the rule";
      }
      const ReshardResult ep = run_reshard(pair("dp2.ep2", (uneven ? "dp3,shard=zero3" : "dp4.ep4") + f, p));
      EXPECT_FALSE(ep.pass()) << d.name << " not caught: " << ep.label;
      EXPECT_FALSE(all_pass(ep.rule) && all_pass(ep.fp64)) << d.name;
    }
}

// The even-split offset bites only where a unit is padded: at dp 4 every
// unit of tiny splits evenly and the fault changes nothing, which is why it
// is measured at dp 3; where B holds whole units (DDP) it is refused.
TEST(Reshard, UnevenOffsetIsHarmlessWhereUnitsSplitEvenly) {
  const ReshardResult r = run_reshard(pair("dp2,shard=zero3", "dp4,shard=zero3,faults=ckpt_uneven_offset",
                                           Precision::fp32));
  EXPECT_TRUE(r.pass()) << why(r);
  EXPECT_NE(input_error_of([&] { run_reshard(pair("dp2,shard=zero3", "dp3,faults=ckpt_uneven_offset", Precision::fp32)); })
                .find("does not apply"),
            std::string::npos);
}





TEST(Reshard, ReshardRoundTripGivesTheSameFiles) {
  TempDir t("roundtrip");
  const std::string a = t.sub("a"), b = t.sub("b"), c = t.sub("c");
  train_and_save(spec("dp2,shard=zero3"), 2, a);
  reshard_checkpoint(a, spec("dp4,shard=zero1"), b);
  reshard_checkpoint(b, spec("dp2,shard=zero3"), c);
  for (const char* f : {"rank-00000.safetensors", "rank-00001.safetensors"}) {
    std::ifstream x(fs::path(a) / f, std::ios::binary), y(fs::path(c) / f, std::ios::binary);
    const std::string sx((std::istreambuf_iterator<char>(x)), {}), sy((std::istreambuf_iterator<char>(y)), {});
    EXPECT_FALSE(sx.empty());
    EXPECT_EQ(sx, sy) << f;
  }
  EXPECT_EQ(checkpoint_spec(b).mesh.dp, 4);
  EXPECT_EQ(CheckpointReader::open(b)->index().run.step, 2);
}

TEST(Reshard, BadCheckpointsAreRefusedAndNothingIsWritten) {
  TempDir t("bad");
  const std::string a = t.sub("a");
  train_and_save(spec("dp2,shard=zero3"), 2, a);

  // Another model.
  std::string out = t.sub("o1");
  std::string msg = input_error_of([&] { reshard_checkpoint(a, spec("dp4", "tiny-tp"), out); });
  EXPECT_NE(msg.find("written by another model (tiny"), std::string::npos) << msg;
  EXPECT_TRUE(is_empty_dir(out));
  // Another run spec: the init seed.
  RunSpec other = spec("dp4");
  other.train.seed = 99;
  out = t.sub("o2");
  msg = input_error_of([&] { reshard_checkpoint(a, other, out); });
  EXPECT_NE(msg.find("another init seed (1234; this run: 99)"), std::string::npos) << msg;
  EXPECT_TRUE(is_empty_dir(out));
  // A mesh it cannot be resharded to: 2bw (no flush inside its window).
  out = t.sub("o3");
  RunSpec pp = spec("dp2.pp2,schedule=2bw");
  pp.train.microbatches = 2;
  msg = input_error_of([&] { reshard_checkpoint(a, pp, out); });
  EXPECT_NE(msg.find("cannot be resharded"), std::string::npos) << msg;
  EXPECT_TRUE(is_empty_dir(out));
  // A batch the mesh cannot split.
  RunSpec dp5 = spec("dp5");
  out = t.sub("o4");
  EXPECT_THROW(reshard_checkpoint(a, dp5, out), InputError);
  EXPECT_TRUE(is_empty_dir(out));

  // An index whose shards do not tile a tensor: one shard dropped from it.
  const std::string b = t.sub("b");
  fs::copy(a, b, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  {
    std::ifstream in(fs::path(b) / "index.json");
    std::string text((std::istreambuf_iterator<char>(in)), {});
    // The first shard that starts inside its tensor now starts one element
    // early: it overlaps the shard before it.
    size_t at = 0;
    for (;;) {
      at = text.find("\"offset\": ", at);
      ASSERT_NE(at, std::string::npos);
      at += 10;
      if (text[at] != '0') break;
    }
    const size_t end = text.find_first_not_of("0123456789", at);
    text.replace(at, end - at, std::to_string(std::stoll(text.substr(at, end - at)) - 1));
    std::ofstream(fs::path(b) / "index.json", std::ios::trunc) << text;
  }
  out = t.sub("o5");
  msg = input_error_of([&] { reshard_checkpoint(b, spec("dp4"), out); });
  EXPECT_NE(msg.find("do not tile"), std::string::npos) << msg;
  EXPECT_TRUE(is_empty_dir(out));

  // A truncated shard.
  const std::string c = t.sub("c");
  fs::copy(a, c, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  const fs::path f = fs::path(c) / "rank-00001.safetensors";
  fs::resize_file(f, fs::file_size(f) - 16);
  out = t.sub("o6");
  msg = input_error_of([&] { reshard_checkpoint(c, spec("dp4"), out); });
  EXPECT_NE(msg.find("rank-00001.safetensors"), std::string::npos) << msg;
  EXPECT_TRUE(is_empty_dir(out));
}

TEST(Reshard, BadPairsAreRefused) {
  ReshardRun r = pair("dp2", "dp4", Precision::fp32);
  r.at = 4;
  EXPECT_NE(input_error_of([&] { run_reshard(r); }).find("--reshard-at"), std::string::npos);
  r = pair("dp2", "dp4", Precision::fp32);
  r.to.train.seed = 5;
  EXPECT_NE(input_error_of([&] { run_reshard(r); }).find("init seed"), std::string::npos);
  EXPECT_NE(input_error_of([&] { parse_reshard_side("dp2,faults=ckpt_drop_moments", "A", nullptr); }).find("checkpoint fault"),
            std::string::npos);
  r = pair("dp2", "dp2.pp2,schedule=2bw", Precision::fp32);
  r.to.train.microbatches = 2;
  EXPECT_NE(input_error_of([&] { run_reshard(r); }).find("cannot be resharded"), std::string::npos);
}

}  // namespace
}  // namespace pb
