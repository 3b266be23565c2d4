// Resharding pipeline ranks and states on a device (reshard.h,
// docs/checkpoint.md): the pipeline pairs pass (bitwise where both sides are),
// GPT-2's tied wte is written once and the llama family's untied head with
// its own shards, the faults are caught through a pipeline's load, a run on
// stand-in devices (reference/device_testing.h) checkpoints through the seam
// and trains bit for bit as on the CPU, and bad pipeline checkpoints are
// refused naming what is wrong, with nothing written.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <gtest/gtest.h>

#include "harness/input_error_testing.h"
#include "harness/status.h"
#include "reference/device_testing.h"
#include "suites/conformance/reshard.h"
#include "suites/conformance/reshard_testing.h"

namespace pb {
namespace {

namespace fs = std::filesystem;
using namespace reshard_testing;
constexpr ReshardShape kShape{8, true};

ReshardRun pair(const std::string& a, const std::string& b, Precision p, const std::string& model = "") {
  return reshard_testing::pair(a, b, p, model, kShape);
}
RunSpec spec(const std::string& s, const std::string& model = "tiny") { return side(s, model, kShape); }
struct TempDir : reshard_testing::TempDir {
  explicit TempDir(const std::string& tag) : reshard_testing::TempDir("pb_reshard_pp_test_", tag) {}
};


// 8 blocks (room for pp x v stages), 4 steps split at 2, 2 pp microbatches on
// a pipeline side (the microbatches may differ across a checkpoint); 24
// sequences split over dp x m on every side here.


struct Pair {
  const char* a;
  const char* b;
  bool bitwise;
};

// Data-parallel stages (DDP, ZeRO-1/2/3) of the synchronous schedules are
// bitwise to their replay, as the data-parallel family is; tensor-parallel
// and MoE stages are held by the rule and the fp64 rerun.
const Pair kPipelinePairs[] = {
    {"dp2.pp2", "pp4,schedule=interleaved,virtual_stages=2", true},  // the pair
    {"pp2", "dp2", true},
    {"dp2", "pp2", true},
    {"pp2,schedule=1f1b", "pp2,schedule=zb-h1", true},
    {"dp2.pp2,shard=zero1,schedule=gpipe", "pp2,schedule=interleaved,virtual_stages=2", true},
    {"dp2.pp2,shard=zero3", "dp4,shard=zero1", true},  // ZeRO-3 in stages
    {"dp4,shard=zero2", "dp2.pp2,shard=zero2,schedule=gpipe", true},
    {"tp2.pp2", "tp2", false},          // tensor-parallel stages
    {"cp2.pp2", "dp2", false},          // context-parallel stages
    {"dp2.ep2.pp2", "dp4.ep4", false},  // MoE stages, ep 2 -> 4
};

TEST(ReshardPipeline, PairsPassAndAreBitwiseWhereDeclared) {
  for (Precision p : {Precision::fp32, Precision::bf16_mixed})
    for (const Pair& x : kPipelinePairs) {
      const ReshardResult r = run_reshard(pair(x.a, x.b, p));
      EXPECT_TRUE(r.pass()) << why(r) << " " << precision_name(p);
      EXPECT_EQ(r.bitwise_declared, x.bitwise) << r.label;
      EXPECT_EQ(r.bits.empty(), !x.bitwise) << r.label;
      EXPECT_EQ(r.trace.loss.size(), 4u);
      EXPECT_FALSE(r.trace.params.empty());
    }
}

// The llama family: an untied lm_head on the last stage, written by it.
TEST(ReshardPipeline, LlamaPairsPass) {
  for (Precision p : {Precision::fp32, Precision::bf16_mixed})
    for (const Pair& x : {Pair{"dp2.pp2", "pp4,schedule=interleaved,virtual_stages=2", true},
                          Pair{"pp2,shard=zero3", "dp2,shard=zero1", true}}) {
      const ReshardResult r = run_reshard(pair(x.a, x.b, p, "tiny-llama"));
      EXPECT_TRUE(r.pass()) << why(r) << " " << precision_name(p);
      EXPECT_EQ(r.bitwise_declared, x.bitwise) << r.label;
    }
}

TEST(ReshardPipeline, EveryCheckpointFaultIsCaught) {
  for (const FaultDecl& d : ckpt_fault_decls())
    for (Precision p : {Precision::fp32, Precision::bf16_mixed}) {
      const bool uneven = d.value == uint8_t(CkptFault::uneven_offset);
      // Uneven shards: tiny's units split evenly over 2, not over 3.
      const std::string b = uneven ? "dp3.pp2,shard=zero3" : "pp4,schedule=interleaved,virtual_stages=2";
      const ReshardResult r = run_reshard(pair("dp2.pp2", b + ",faults=" + std::string(d.name), p));
      EXPECT_FALSE(r.pass()) << d.name << " not caught: " << r.label;
      EXPECT_FALSE(all_pass(r.rule) && all_pass(r.bits) && all_pass(r.fp64)) << d.name;
    }
}





// GPT-2's wte lives on the first stage and, tied, on the last: one tensor in
// the index, its shards from the first stage's ranks only; tiny-llama's
// untied lm_head is the last stage's own tensor.
TEST(ReshardPipeline, TiedEmbeddingIsWrittenOnce) {
  TempDir t("tied");
  const std::string a = t.sub("a"), l = t.sub("l");
  train_and_save(spec("dp2.pp2,shard=zero1"), 2, a);  // ranks 0, 1: stage 0; 2, 3: stage 1
  auto r = CheckpointReader::open(a);
  int wte = 0;
  for (const CheckpointTensor& x : r->index().tensors) {
    if (x.name.find("wte") == std::string::npos) continue;
    ++wte;
    for (const CheckpointShard& s : x.shards) EXPECT_LT(s.rank, 2) << x.name << " written by stage 1";
  }
  EXPECT_EQ(wte, 3);  // one tensor of each kind at fp32: param, adam_m, adam_v
  train_and_save(spec("pp2", "tiny-llama"), 2, l);
  auto rl = CheckpointReader::open(l);
  int head = 0;
  for (const CheckpointTensor& x : rl->index().tensors) {
    if (x.name.find("lm_head") == std::string::npos) continue;
    ++head;
    for (const CheckpointShard& s : x.shards) EXPECT_EQ(s.rank, 1) << x.name << ": the last stage's";
  }
  EXPECT_EQ(head, 3);
}

// A run on stand-in devices (every rank's states in device memory) writes and
// reads checkpoints through the seam: it passes, claims no bits (a device's
// kernels are not the host replay's), and trains bit for bit as the same
// resharded run on the CPU, since the stand-in's arithmetic is the CPU's.
TEST(ReshardPipeline, StatesOnAStandInDeviceCheckpoint) {
  testing::StandInDevices devices;
  const Pair pairs[] = {{"dp2,shard=zero3", "dp4,shard=zero1", true},
                        {"dp2.pp2", "dp2,shard=zero1,offload=optimizer", true},
                        {"dp2,shard=zero2,offload=optimizer", "tp2.pp2", false}};
  for (Precision p : {Precision::fp32, Precision::bf16_mixed})
    for (const Pair& x : pairs) {
      const ReshardRun cpu_run = pair(x.a, x.b, p);
      ReshardRun r = cpu_run;
      r.from.train.device = r.to.train.device = Device::cuda;
      r.open_device = [&] { return devices.open(); };
      const ReshardResult dev = run_reshard(r);
      EXPECT_TRUE(dev.pass()) << why(dev) << " " << precision_name(p);
      EXPECT_FALSE(dev.bitwise_declared) << dev.label;
      EXPECT_FALSE(dev.fp64.empty()) << dev.label << ": the fp64 rerun (on the CPU) judges the logic";
      const ReshardResult cpu = run_reshard(cpu_run);
      EXPECT_EQ(cpu.bitwise_declared, x.bitwise) << cpu.label;
      EXPECT_EQ(dev.trace.loss, cpu.trace.loss) << dev.label;
      EXPECT_EQ(dev.trace.grad_norm, cpu.trace.grad_norm) << dev.label;
      EXPECT_EQ(dev.trace.params, cpu.trace.params) << dev.label;
    }
  // A's checkpoint on the CPU, B on a device, and a load's fault caught there.
  ReshardRun mixed = pair("dp2.pp2", "dp4,shard=zero3", Precision::fp32);
  mixed.to.train.device = Device::cuda;
  mixed.open_device = [&] { return devices.open(); };
  EXPECT_TRUE(run_reshard(mixed).pass());
  ReshardRun faulty = pair("dp2.pp2", "dp4,shard=zero3,faults=ckpt_drop_moments", Precision::fp32);
  faulty.from.train.device = faulty.to.train.device = Device::cuda;
  faulty.open_device = [&] { return devices.open(); };
  EXPECT_FALSE(run_reshard(faulty).pass());
  for (const auto& m : devices.memories()) {
    EXPECT_GT(m->allocations(), 0);
    EXPECT_EQ(m->live(), 0u) << "device buffers left";
  }
  // Without a way to open a device: refused before any rank starts.
  ReshardRun none = pair("dp2", "dp4", Precision::fp32);
  none.to.train.device = Device::cuda;
  EXPECT_NE(input_error_of([&] { run_reshard(none); }).find("no way to open a device"), std::string::npos);
}

// A copy of checkpoint `a` at `dir` whose index is edited by `edit` on the
// first parameter tensor the last stage's ranks (`from_rank` on) write in
// two or more shards; returns its name.
std::string edited_copy(const std::string& a, const std::string& dir, int from_rank,
                        const std::function<void(CheckpointTensor&)>& edit) {
  fs::copy(a, dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  CheckpointIndex ix = CheckpointIndex::parse(read_text(fs::path(dir) / "index.json"), "test");
  for (CheckpointTensor& x : ix.tensors)
    if (x.name.rfind("param/", 0) == 0 && x.shards.size() >= 2 && x.shards.front().rank >= from_rank) {
      edit(x);
      std::ofstream(fs::path(dir) / "index.json", std::ios::trunc) << ix.to_json();
      return x.name;
    }
  ADD_FAILURE() << "no tensor in two shards of the last stage";
  return "";
}

TEST(ReshardPipeline, BadPipelineCheckpointsAreRefusedAndNothingIsWritten) {
  TempDir t("bad");
  const std::string a = t.sub("a");
  train_and_save(spec("dp2.pp2,shard=zero3"), 2, a);
  const RunSpec to = spec("pp4,schedule=interleaved,virtual_stages=2");

  // A stage's file missing: stage 1's ranks are 2 and 3.
  const std::string m = t.sub("missing");
  fs::copy(a, m, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  fs::remove(fs::path(m) / "rank-00003.safetensors");
  std::string out = t.sub("o1");
  std::string msg = input_error_of([&] { reshard_checkpoint(m, to, out); });
  EXPECT_NE(msg.find("rank-00003.safetensors"), std::string::npos) << msg;
  EXPECT_TRUE(is_empty_dir(out));

  // A stage's shard dropped from the index: the tensor is not tiled (a gap).
  const std::string gap = edited_copy(a, t.sub("gap"), 2, [](CheckpointTensor& x) { x.shards.erase(x.shards.begin()); });
  out = t.sub("o2");
  msg = input_error_of([&] { reshard_checkpoint((t.path / "gap").string(), to, out); });
  EXPECT_NE(msg.find("do not tile"), std::string::npos) << msg;
  EXPECT_NE(msg.find(gap), std::string::npos) << msg;
  EXPECT_TRUE(is_empty_dir(out));

  // Two of a stage's shards overlapping: the second starts one element early.
  const std::string over = edited_copy(a, t.sub("overlap"), 2, [](CheckpointTensor& x) { x.shards[1].offset -= 1; });
  out = t.sub("o3");
  msg = input_error_of([&] { reshard_checkpoint((t.path / "overlap").string(), to, out); });
  EXPECT_NE(msg.find("do not tile"), std::string::npos) << msg;
  EXPECT_NE(msg.find(over), std::string::npos) << msg;
  EXPECT_TRUE(is_empty_dir(out));

  // A mesh the checkpoint cannot be resharded to: more stages than the 8 layers.
  out = t.sub("o4");
  msg = input_error_of([&] { reshard_checkpoint(a, spec("pp4,schedule=interleaved,virtual_stages=4"), out); });
  EXPECT_NE(msg.find("layers"), std::string::npos) << msg;
  EXPECT_TRUE(is_empty_dir(out));
  // ... a 2bw pipeline (no flush inside its window).
  out = t.sub("o5");
  RunSpec bw = spec("pp2,schedule=2bw");
  msg = input_error_of([&] { reshard_checkpoint(a, bw, out); });
  EXPECT_NE(msg.find("2bw"), std::string::npos) << msg;
  EXPECT_TRUE(is_empty_dir(out));
  // ... a checkpoint of another depth (the model's layers differ).
  RunSpec deeper = spec("pp4");
  deeper.train.model.L = 4;
  out = t.sub("o6");
  msg = input_error_of([&] { reshard_checkpoint(a, deeper, out); });
  EXPECT_NE(msg.find("written by another model"), std::string::npos) << msg;
  EXPECT_TRUE(is_empty_dir(out));
}

}  // namespace
}  // namespace pb
