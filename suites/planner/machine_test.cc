// Machine profiles: the built-in ones with their sources, profile files read
// strictly and round-tripped, and their figures reaching the plan.
#include "suites/planner/planner.h"
#include "suites/planner/machine.h"
#include "suites/planner/plan_output.h"
#include "suites/planner/planner_testing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <mutex>

#include "harness/comm/runner.h"
#include "harness/status.h"
#include "impl/data_parallel/strategy.h"
#include "impl/expert_parallel/strategy.h"
#include "impl/pipeline/strategy.h"
#include "impl/tensor_parallel/runner.h"
#include "impl/tensor_parallel/strategy.h"
#include "impl/pipeline/simulator.h"
#include "reference/device_testing.h"
#include "reference/layout.h"
#include "reference/runner.h"


namespace pb::planner {
namespace {

// A scratch directory for profile files, removed with it.
struct ProfileDir {
  std::filesystem::path dir;
  explicit ProfileDir(const std::string& tag)
      : dir(std::filesystem::temp_directory_path() / ("pb_" + tag + "_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir);
  }
  ~ProfileDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  MachineProfile load(const std::string& text) const {
    const auto p = (dir / "p.toml").string();
    std::ofstream(p) << text;
    return load_machine(p);
  }
};

// A minimal GPU profile's figures (gpu = true: each needs a source) and
// their sources, for a test's field to go between.
const char* const kGpuHead =
    "[machine]\nname = \"g\"\nsource = \"s\"\npeak_tflops_bf16 = 1.0\ngpu = true\nmem_bw_GBps = 100.0\n"
    "bw_intra_GBps = 1.0\nbw_inter_GBps = 1.0\nmemory_GB = 1.0\n";
const char* const kGpuSources =
    "[machine.sources]\npeak_tflops_bf16 = \"a\"\nmem_bw_GBps = \"a\"\nbw_intra_GBps = \"a\"\n"
    "bw_inter_GBps = \"a\"\nmemory_GB = \"a\"\n";

// Each profile text (after `head`) is refused by load_machine with a message
// holding its `want`.
void expect_refused(const std::filesystem::path& dir, const std::string& head,
                    const std::vector<std::pair<std::string, std::string>>& bad) {
  for (const auto& [text, want] : bad) {
    const auto f = (dir / "bad.toml").string();
    std::ofstream(f) << head << text;
    try {
      load_machine(f);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

// plan --machine: the built-in profiles carry their datasheet figures and
// sources; a TOML profile reads strictly; the precision picks the peak.
TEST(Machine, BuiltInProfilesByNameWithSources) {
  ASSERT_EQ(builtin_machines().size(), 7u);
  for (const auto& m : builtin_machines()) {
    EXPECT_GT(m.peak_tflops_bf16, m.peak_tflops_fp32) << m.name();
    EXPECT_GT(m.hw.memory_GB, 0) << m.name();
    EXPECT_EQ(m.ranks_per_node, 8) << m.name();
    EXPECT_NE(m.source.find("datasheet"), std::string::npos) << m.name();
  }
  const MachineProfile a = load_machine("A100");  // case-insensitive
  EXPECT_EQ(a.name(), "a100");
  EXPECT_DOUBLE_EQ(hardware_for(a, Precision::bf16_mixed).peak_tflops, 312);
  EXPECT_DOUBLE_EQ(hardware_for(a, Precision::fp32).peak_tflops, 19.5);
  EXPECT_DOUBLE_EQ(hardware_for(load_machine("h100"), Precision::bf16_mixed).peak_tflops, 989.4);
  EXPECT_DOUBLE_EQ(hardware_for(load_machine("h200"), Precision::bf16_mixed).mem_bw_GBps, 4010);  // BabelStream Copy
  // torchtitan's 500 W, 96 GB HBM2e H100: between the SXM5's and NVL's peaks, 2.4 TB/s at the SXM5's 84%.
  const MachineProfile gt = load_machine("h100-96gb-500w");
  EXPECT_DOUBLE_EQ(hardware_for(gt, Precision::bf16_mixed).peak_tflops, (989.4 + 835.5) / 2);
  EXPECT_NEAR(hardware_for(gt, Precision::bf16_mixed).mem_bw_GBps, 2006.0, 1.0);
  EXPECT_EQ(gt.hw.memory_GB, 96);
  // The A100 with 2022's cuBLAS: its GEMM rate, the a100's other figures.
  const MachineProfile a22 = load_machine("a100-2022");
  EXPECT_DOUBLE_EQ(a22.gemm_achievable_tflops_bf16, 258);
  EXPECT_DOUBLE_EQ(a22.hw.mem_bw_GBps, load_machine("a100").hw.mem_bw_GBps);
  EXPECT_DOUBLE_EQ(hardware_for(load_machine("mi300x"), Precision::fp64).peak_tflops, 163.4);
  EXPECT_DOUBLE_EQ(hardware_for(load_machine("B200"), Precision::bf16_mixed).peak_tflops, 2250);
  EXPECT_EQ(load_machine("b200").ranks_per_node, 8);
  // A GPU's own name (cudaDeviceProp::name) finds its profile: the MFU peak of a run on it.
  ASSERT_NE(machine_for_device("cuda:0 NVIDIA H100 80GB HBM3"), nullptr);
  EXPECT_EQ(machine_for_device("cuda:0 NVIDIA H100 80GB HBM3")->name(), "h100");
  EXPECT_EQ(machine_for_device("cuda:1 NVIDIA A100-SXM4-80GB")->name(), "a100");
  EXPECT_EQ(machine_for_device("AMD Instinct MI300X")->name(), "mi300x");
  EXPECT_EQ(machine_for_device("cuda:0 NVIDIA GeForce RTX 4090"), nullptr);
  EXPECT_EQ(machine_for_device("cuda:0 NVIDIA A100 80GB PCIe")->name(), "a100");  // the same datasheet peaks
  EXPECT_EQ(machine_for_device("cuda:0 NVIDIA H200")->name(), "h200");
  EXPECT_EQ(machine_for_device("cuda:0 NVIDIA B200")->name(), "b200");
  // Other parts of a chip, with other datasheet peaks: no profile, not the SXM one.
  for (const char* other : {"cuda:0 NVIDIA H100 PCIe", "cuda:0 NVIDIA H100 NVL", "cuda:0 NVIDIA H200 NVL",
                            "cuda:0 NVIDIA GB200"})
    EXPECT_EQ(machine_for_device(other), nullptr) << other;
  try {
    load_machine("b300");
    ADD_FAILURE() << "an unknown machine was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'b300' is neither a built-in machine (a100, h100, h200, mi300x, b200, h100-96gb-500w, a100-2022)"),
              std::string::npos)
        << e.what();
  }
}

// b200 and h200 carry measured figures (docs/planner.md, "Machine profiles"):
// B200's 148 SMs, each part's achieved HBM rate and NCCL ring busBw, FA4's
// B200 rate; every figure of theirs names a source, the ones not found too.
TEST(Machine, B200AndH200CarryMeasuredFiguresEachWithASource) {
  const MachineProfile b = load_machine("b200");
  EXPECT_EQ(b.hw.gemm_units, 148);
  EXPECT_EQ(b.hw.gemm_tile_m, 256);
  EXPECT_EQ(b.hw.gemm_tile_n, 128);
  EXPECT_DOUBLE_EQ(b.hw.mem_bw_GBps, 6669);     // OpenCL-Benchmark coalesced read, 83% of 8000
  EXPECT_DOUBLE_EQ(b.hw.bw_intra_GBps, 682);    // nccl-tests ring (NVLS off), 8 x B200
  EXPECT_DOUBLE_EQ(b.flash_attention_tflops_bf16, 1613);  // FlashAttention-4's abstract
  EXPECT_TRUE(b.flash_rates_bf16.empty());      // no forward + backward table by sequence found
  EXPECT_DOUBLE_EQ(b.gemm_achievable_tflops_bf16, 1745.0);
  const MachineProfile h = load_machine("h200");
  EXPECT_DOUBLE_EQ(h.hw.mem_bw_GBps, 4010);     // BabelStream Copy, 84% of 4800
  EXPECT_DOUBLE_EQ(h.hw.bw_intra_GBps, 367);    // nccl-tests ring (NVLS off), 8 x H200
  EXPECT_EQ(h.hw.gemm_units, 132);              // the H100 die
  EXPECT_DOUBLE_EQ(h.flash_attention_tflops_bf16, load_machine("h100").flash_attention_tflops_bf16);
  // Measured, below the datasheets' line rates and peaks.
  for (const MachineProfile* p : {&b, &h}) {
    EXPECT_LT(p->hw.mem_bw_GBps, p->name() == "b200" ? 8000 : 4800) << p->name();
    EXPECT_LT(p->hw.bw_intra_GBps, p->name() == "b200" ? 900 : 450) << p->name();
    EXPECT_LE(p->flash_attention_tflops_bf16, p->peak_tflops_bf16) << p->name();
    std::vector<std::string> keys = profile_figures();
    keys.push_back("flash_attention_rates");
    for (const std::string& k : keys)
      EXPECT_TRUE(p->sources.count(k) && !p->sources.at(k).empty()) << p->name() << "'s " << k << " has no source";
  }
  // The sources name what they measured on.
  EXPECT_NE(b.sources.at("gemm_units").find("148"), std::string::npos);
  EXPECT_NE(b.sources.at("mem_bw_GBps").find("6668.71"), std::string::npos);
  EXPECT_NE(b.sources.at("bw_intra_GBps").find("682.2"), std::string::npos);
  EXPECT_NE(b.sources.at("flash_attention_tflops_bf16").find("arXiv:2603.05451"), std::string::npos);
  EXPECT_EQ(b.sources.at("flash_attention_rates").rfind("not given", 0), 0u);
  EXPECT_NE(h.sources.at("mem_bw_GBps").find("Copy 4.01 TB/s"), std::string::npos);
  EXPECT_NE(h.sources.at("bw_intra_GBps").find("367.2"), std::string::npos);
}

// The NVIDIA profiles' per-step collective latency is NCCL's own cost model
// (ring / Simple: 3.4 us per step over NVLink, 14 us over the network), each
// with its source; mi300x's is RCCL's (its MI300X table: 2.1 us per xGMI
// ring step, the tree's 25 us across nodes).
TEST(Machine, CollectiveLatencyFromNcclsCostModel) {
  for (const MachineProfile& m : builtin_machines()) {
    if (m.name() == "mi300x") {
      EXPECT_DOUBLE_EQ(m.hw.latency_us, 2.1);
      EXPECT_DOUBLE_EQ(m.hw.latency_inter_us, 25.0);
      for (const char* k : {"latency_us", "latency_inter_us"}) {
        const std::string& s = m.sources.at(k);
        EXPECT_NE(s.find("github.com/ROCm/rccl at 0cbce2a7571c907554199fad7e905f16ec0a565c"), std::string::npos)
            << k << ": " << s;
        EXPECT_NE(s.find("src/graph/tuning.cc, tuning_model_5.hwLat"), std::string::npos) << k << ": " << s;
        EXPECT_NE(s.find("not a measurement"), std::string::npos) << s;
      }
      EXPECT_NE(m.sources.at("latency_us").find("Ring / Simple: 2.1 us per ring step"), std::string::npos);
      EXPECT_NE(m.sources.at("latency_inter_us").find("Tree / Simple: 25.0 us per step"), std::string::npos);
      continue;
    }
    EXPECT_DOUBLE_EQ(m.hw.latency_us, 3.4) << m.name();
    EXPECT_DOUBLE_EQ(m.hw.latency_inter_us, 14.0) << m.name();
    for (const char* k : {"latency_us", "latency_inter_us"}) {
      const std::string& s = m.sources.at(k);
      EXPECT_NE(s.find("github.com/NVIDIA/nccl at 5067397c2676d5aed50042fc39e5c8ee96eb0027, src/graph/tuning.cc"),
                std::string::npos)
          << m.name() << " " << k << ": " << s;
      EXPECT_NE(s.find("Ring / Simple"), std::string::npos) << s;
      EXPECT_NE(s.find("not a measurement"), std::string::npos) << s;
    }
    EXPECT_NE(m.sources.at("latency_us").find("NVLINK 3.4 us per ring step"), std::string::npos);
    EXPECT_NE(m.sources.at("latency_inter_us").find("NET 14.0 us per ring step"), std::string::npos);
  }
}

// And the base per collective call (Hardware::latency_call_us): NCCL's
// baseLatencies, Ring / Simple, 8.4 us; mi300x RCCL's baseLat, 17.0 us; each
// with its source, and a profile written and read back keeps both.
TEST(Machine, CallLatencyFromTheCostModelsBase) {
  for (const MachineProfile& m : builtin_machines()) {
    const std::string& s = m.sources.at("latency_call_us");
    const bool amd = m.name() == "mi300x";
    EXPECT_DOUBLE_EQ(m.hw.latency_call_us, amd ? 17.0 : 8.4) << m.name();
    EXPECT_NE(s.find(amd ? "github.com/ROCm/rccl at 0cbce2a7571c907554199fad7e905f16ec0a565c"
                         : "github.com/NVIDIA/nccl at 5067397c2676d5aed50042fc39e5c8ee96eb0027"),
              std::string::npos)
        << m.name() << ": " << s;
    EXPECT_NE(s.find(amd ? "baseLat, Ring / Simple: 17.0 us per call"
                         : "baseLatencies, Ring / Simple: 8.4 us per call"),
              std::string::npos)
        << m.name() << ": " << s;
    EXPECT_NE(s.find("not a measurement"), std::string::npos) << s;
    EXPECT_NE(s.find("not to p2p"), std::string::npos) << s;
    const auto file =
        std::filesystem::temp_directory_path() / ("pb_call_" + m.name() + std::to_string(::getpid()) + ".toml");
    std::ofstream(file) << machine_toml(m);
    const MachineProfile back = load_machine(file.string());
    std::filesystem::remove(file);
    EXPECT_DOUBLE_EQ(back.hw.latency_call_us, m.hw.latency_call_us) << m.name();
    EXPECT_EQ(back.sources.at("latency_call_us"), s);
  }
}

// The mi300x profile's measured figures (docs/planner.md, "Machine
// profiles"): BabelStream's HBM rate, RCCL's all-reduce busbw on 8 GPUs and
// per NIC, one FlashAttention-2 point; the tile model is not set (no
// hipBLASLt tile source), and every figure, set or not, says where it stands.
TEST(Machine, Mi300xMeasuredFiguresCarryTheirSources) {
  const MachineProfile m = load_machine("mi300x");
  EXPECT_DOUBLE_EQ(m.hw.mem_bw_GBps, 4100);
  EXPECT_DOUBLE_EQ(m.hw.bw_intra_GBps, 314);
  EXPECT_DOUBLE_EQ(m.hw.bw_inter_GBps, 47);
  EXPECT_DOUBLE_EQ(m.flash_attention_tflops_bf16, 223);
  EXPECT_TRUE(m.flash_rates_bf16.empty());
  EXPECT_DOUBLE_EQ(m.gemm_achievable_tflops_bf16, 668.4);
  EXPECT_EQ(m.hw.gemm_units, 0);
  EXPECT_EQ(m.hw.gemm_tile_m, 0);
  EXPECT_EQ(m.hw.gemm_tile_n, 0);
  // The datasheet's peaks and capacity are unchanged.
  EXPECT_DOUBLE_EQ(m.peak_tflops_bf16, 1307.4);
  EXPECT_DOUBLE_EQ(m.hw.memory_GB, 192);
  std::vector<std::string> keys = profile_figures();
  keys.push_back("flash_attention_rates");
  for (const std::string& k : keys)
    EXPECT_TRUE(m.sources.count(k) && !m.sources.at(k).empty()) << "mi300x's " << k << " has no source";
  auto has = [&](const char* k, const char* text) {
    EXPECT_NE(m.sources.at(k).find(text), std::string::npos) << k << ": " << m.sources.at(k);
  };
  has("mem_bw_GBps", "ND_MI300X_v5_results.md at commit bf209abb91e80c93322db11abe633bbc646bcf1d");
  has("mem_bw_GBps", "Triad 4.10 TB/s");
  has("bw_intra_GBps", "busbw 313.92 GB/s at 1 GB");
  has("bw_intra_GBps", "mi300x_rccl_single_node_config.json");
  has("bw_inter_GBps", "sendrecv_perf busbw 47.00 GB/s at 8 GiB");
  has("flash_attention_tflops_bf16", "ROCm/flash-attention issue 142");
  has("flash_attention_tflops_bf16", "fwd + bwd: 223.08 TFLOPs/s");
  for (const char* k : {"gemm_units", "gemm_tile_m", "gemm_tile_n"})
    EXPECT_EQ(m.sources.at(k).rfind("not set", 0), 0u) << k << ": " << m.sources.at(k);
  has("gemm_units", "'304 (38 per XCD)'");
  EXPECT_EQ(m.sources.at("flash_attention_rates").rfind("not given", 0), 0u);
  // A profile written and read back keeps the figures and their sources.
  const auto file = std::filesystem::temp_directory_path() / ("pb_mi300x_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(file) << machine_toml(m);
  const MachineProfile back = load_machine(file.string());
  std::filesystem::remove(file);
  EXPECT_DOUBLE_EQ(back.hw.mem_bw_GBps, 4100);
  EXPECT_DOUBLE_EQ(back.hw.latency_inter_us, 25.0);
  EXPECT_EQ(back.hw.gemm_units, 0);
  EXPECT_EQ(back.sources.at("gemm_units"), m.sources.at("gemm_units"));
  EXPECT_EQ(back.sources.at("bw_inter_GBps"), m.sources.at("bw_inter_GBps"));
}

TEST(Machine, ProfileFileReadsStrictly) {
  const auto dir = std::filesystem::temp_directory_path() / ("pb_machine_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto file = [&](const std::string& name, const std::string& text) {
    const auto p = dir / name;
    std::ofstream(p) << text;
    return p.string();
  };
  const MachineProfile m = load_machine(file("ok.toml",
                                             "[machine]\nname = \"box\"\nsource = \"calibrated 2026-11-23\"\n"
                                             "peak_tflops_bf16 = 100.0\nbw_intra_GBps = 40.0\nmemory_GB = 24.0\n"
                                             "gemm_efficiency = 0.5\nranks_per_node = 2\n"));
  EXPECT_EQ(m.name(), "box");
  EXPECT_DOUBLE_EQ(m.peak_tflops_fp32, 100);  // defaults to the bf16 peak
  EXPECT_DOUBLE_EQ(m.hw.bw_inter_GBps, 40);      // defaults to the intra-node link
  EXPECT_DOUBLE_EQ(hardware_for(m, Precision::fp32).gemm_efficiency, 0.5);
  EXPECT_DOUBLE_EQ(m.hw.latency_call_us, 0);  // not given: no base per call
  // A GPU profile that gives the base per call with its source reads it.
  const MachineProfile g = load_machine(file(
      "gpu.toml",
      "[machine]\nname = \"g\"\nsource = \"s\"\npeak_tflops_bf16 = 1.0\ngpu = true\nmem_bw_GBps = 1.0\n"
      "bw_intra_GBps = 1.0\nbw_inter_GBps = 1.0\nmemory_GB = 1.0\nlatency_call_us = 8.4\n[machine.sources]\n"
      "peak_tflops_bf16 = \"a\"\nmem_bw_GBps = \"a\"\nbw_intra_GBps = \"a\"\nbw_inter_GBps = \"a\"\n"
      "memory_GB = \"a\"\nlatency_call_us = \"NCCL baseLatencies\"\n"));
  EXPECT_DOUBLE_EQ(g.hw.latency_call_us, 8.4);
  EXPECT_EQ(g.sources.at("latency_call_us"), "NCCL baseLatencies");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"[machine]\nname = \"x\"\nsource = \"s\"\n", "machine.peak_tflops_bf16"},
      {"[machine]\nname = \"x\"\nsource = \"s\"\npeak_tflops_bf16 = 1.0\nspeed = 2.0\n", "machine.speed"},
      {"[machine]\nname = \"x\"\nsource = \"s\"\npeak_tflops_bf16 = 1.0\ngemm_efficiency = 0.0\n",
       "machine.gemm_efficiency"},
      {"[machine]\nname = \"x\"\nsource = \"s\"\npeak_tflops_bf16 = inf\n", "machine.peak_tflops_bf16"},
      {"[machine]\nname = \"x\"\npeak_tflops_bf16 = 1.0\n", "machine.source"},
      {"[machine]\nname = \"\"\nsource = \"s\"\npeak_tflops_bf16 = 1.0\n", "machine.name"},
      {"[machine\n", "bad.toml"},
      {"[machine]\nname = \"x\"\nsource = \"s\"\npeak_tflops_bf16 = 1.0\nlatency_call_us = -1.0\n",
       "machine.latency_call_us"},
      {"[machine]\nname = \"x\"\nsource = \"s\"\npeak_tflops_bf16 = 1.0\nlatency_call_us = nan\n",
       "machine.latency_call_us"},
      {"[machine]\nname = \"x\"\nsource = \"s\"\npeak_tflops_bf16 = 1.0\nlatency_call_us = \"8.4\"\n",
       "machine.latency_call_us"},
      // A GPU profile names a source for the figure as for every other.
      {"[machine]\nname = \"x\"\nsource = \"s\"\npeak_tflops_bf16 = 1.0\ngpu = true\nmem_bw_GBps = 1.0\n"
       "bw_intra_GBps = 1.0\nbw_inter_GBps = 1.0\nmemory_GB = 1.0\nlatency_call_us = 8.4\n[machine.sources]\n"
       "peak_tflops_bf16 = \"a\"\nmem_bw_GBps = \"a\"\nbw_intra_GBps = \"a\"\nbw_inter_GBps = \"a\"\n"
       "memory_GB = \"a\"\n",
       "machine.latency_call_us has no source"},
      {"[machine]\nname = \"x\"\nsource = \"s\"\npeak_tflops_bf16 = 1.0\nlatency_call_us = 8.4\n"
       "[machine.sources]\nlatency_call_us = \"\"\n",
       "machine.sources.latency_call_us is empty"},
  };
  for (const auto& [text, want] : bad) {
    try {
      load_machine(file("bad.toml", text));
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(dir);
}

// The GEMM spread of a fleet (Hardware::gemm_spread): the A100 profiles carry
// Perlmutter's A100 80GB figure (a 5% range over about 850 GPUs, read as a
// normal spread: 0.78%), the others 0 with a source saying none is cited; a
// TOML profile gives it with its source (a GPU's), round trips, and refuses
// a spread out of [0, 0.5), not a number or without its source, named.
TEST(Machine, GemmSpreadFromAFleetMeasurement) {
  const ProfileDir files("machine_spread");
  for (const MachineProfile& m : builtin_machines()) {
    ASSERT_TRUE(m.sources.count("gemm_spread")) << m.name();
    const std::string& s = m.sources.at("gemm_spread");
    if (m.name() == "a100" || m.name() == "a100-2022") {
      EXPECT_NEAR(m.hw.gemm_spread, 0.05 / (2 * expected_max_normal(850)), 1e-15) << m.name();
      EXPECT_NEAR(m.hw.gemm_spread, 0.00783, 5e-5) << m.name();
      EXPECT_NE(s.find("IPDPS 2026"), std::string::npos) << s;
      EXPECT_NE(s.find("5% for A100 80GB"), std::string::npos) << s;
    } else {
      EXPECT_EQ(m.hw.gemm_spread, 0) << m.name();
      EXPECT_EQ(s.rfind("not given", 0), 0u) << m.name() << ": " << s;
    }
    // The round trip keeps the figure and its source.
    const MachineProfile back = files.load(machine_toml(m));
    EXPECT_NEAR(back.hw.gemm_spread, m.hw.gemm_spread, 1e-8) << m.name();  // the TOML keeps 6 digits
    EXPECT_EQ(back.sources.at("gemm_spread"), s) << m.name();
  }
  const std::string head = kGpuHead, sources = kGpuSources;
  const MachineProfile ok = files.load(head + "gemm_spread = 0.01\n" + sources + "gemm_spread = \"a fleet's GEMMs\"\n");
  EXPECT_DOUBLE_EQ(ok.hw.gemm_spread, 0.01);
  EXPECT_EQ(ok.sources.at("gemm_spread"), "a fleet's GEMMs");
  EXPECT_DOUBLE_EQ(files.load(head + sources).hw.gemm_spread, 0);  // not given: identical GPUs
  expect_refused(files.dir, head,
                 {{"gemm_spread = 0.5\n" + sources + "gemm_spread = \"a\"\n", "machine.gemm_spread"},
                  {"gemm_spread = -0.01\n" + sources + "gemm_spread = \"a\"\n", "machine.gemm_spread"},
                  {"gemm_spread = nan\n" + sources + "gemm_spread = \"a\"\n", "machine.gemm_spread"},
                  {"gemm_spread = \"0.01\"\n" + sources + "gemm_spread = \"a\"\n", "machine.gemm_spread"},
                  {"gemm_spread = 0.01\n" + sources, "machine.gemm_spread has no source"},
                  {"gemm_spread = 0.01\n" + sources + "gemm_spread = \"\"\n", "machine.sources.gemm_spread is empty"}});
}

// NCCL's plateau of a ring (Hardware::ring_plateau): 1.4 on every NVIDIA
// profile (compute capability 8.0 and later), 1 on the MI300X (RCCL's AMD
// build has none), each with its source; a TOML profile's is read within
// [1, 10] and round trips.
TEST(Machine, RingPlateauFromTheCostModels) {
  const ProfileDir files("machine_plateau");
  for (const MachineProfile& m : builtin_machines()) {
    ASSERT_TRUE(m.sources.count("ring_plateau")) << m.name();
    const std::string& s = m.sources.at("ring_plateau");
    if (m.name() == "mi300x") {
      EXPECT_EQ(m.hw.ring_plateau, 1);
      EXPECT_NE(s.find("__HIP_PLATFORM_AMD__"), std::string::npos) << s;
    } else {
      EXPECT_EQ(m.hw.ring_plateau, 1.4) << m.name();
      EXPECT_NE(s.find("Plateau effect of ring"), std::string::npos) << s;
    }
    const MachineProfile back = files.load(machine_toml(m));
    EXPECT_DOUBLE_EQ(back.hw.ring_plateau, m.hw.ring_plateau) << m.name();
    EXPECT_EQ(back.sources.at("ring_plateau"), s) << m.name();
  }
  const std::string head = "[machine]\nname = \"x\"\nsource = \"s\"\npeak_tflops_bf16 = 1.0\n";
  EXPECT_DOUBLE_EQ(files.load(head).hw.ring_plateau, 1);  // not given: none
  EXPECT_DOUBLE_EQ(files.load(head + "ring_plateau = 1.9\n").hw.ring_plateau, 1.9);
  expect_refused(files.dir, head,
                 {{"ring_plateau = 0.9\n", "machine.ring_plateau"},
                  {"ring_plateau = 10.5\n", "machine.ring_plateau"},
                  {"ring_plateau = nan\n", "machine.ring_plateau"},
                  {"ring_plateau = \"1.4\"\n", "machine.ring_plateau"}});
}

// The memory-bound kernels by kind (Hardware::norm_mem_bw_GBps ...): a TOML
// profile sets them, each with its source on a GPU; 0, negative, NaN or a
// figure without a source is refused, named; the round trip keeps them; the
// built-in GPUs name a source (or say "not given") for each.
TEST(Machine, PerKindMemoryRatesReadStrictly) {
  const auto dir = std::filesystem::temp_directory_path() / ("pb_machine_kinds_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string head = kGpuHead, sources = kGpuSources;
  const auto ok = (dir / "ok.toml").string();
  std::ofstream(ok) << head << "norm_mem_bw_GBps = 50.0\nsoftmax_mem_bw_GBps = 60.0\nloss_mem_bw_GBps = 70.0\n"
                    << "elementwise_mem_bw_GBps = 80.0\neager_norm_mem_bw_GBps = 40.0\n" << sources
                    << "norm_mem_bw_GBps = \"n\"\nsoftmax_mem_bw_GBps = \"s\"\nloss_mem_bw_GBps = \"l\"\n"
                    << "elementwise_mem_bw_GBps = \"e\"\neager_norm_mem_bw_GBps = \"en\"\n";
  const MachineProfile m = load_machine(ok);
  EXPECT_DOUBLE_EQ(m.hw.norm_mem_bw_GBps, 50);
  EXPECT_DOUBLE_EQ(m.hw.softmax_mem_bw_GBps, 60);
  EXPECT_DOUBLE_EQ(m.hw.loss_mem_bw_GBps, 70);
  EXPECT_DOUBLE_EQ(m.hw.elementwise_mem_bw_GBps, 80);
  EXPECT_DOUBLE_EQ(m.hw.eager_norm_mem_bw_GBps, 40);
  EXPECT_EQ(m.sources.at("eager_norm_mem_bw_GBps"), "en");
  EXPECT_EQ(m.sources.at("norm_mem_bw_GBps"), "n");
  EXPECT_EQ(m.sources.at("elementwise_mem_bw_GBps"), "e");
  // A built-in profile written out and read back keeps its kinds and their sources.
  const auto again = (dir / "again.toml").string();
  std::ofstream(again) << machine_toml(load_machine("h100"));
  const MachineProfile back = load_machine(again);
  EXPECT_DOUBLE_EQ(back.hw.norm_mem_bw_GBps, load_machine("h100").hw.norm_mem_bw_GBps);
  EXPECT_DOUBLE_EQ(back.hw.elementwise_mem_bw_GBps, load_machine("h100").hw.elementwise_mem_bw_GBps);
  EXPECT_EQ(back.sources.at("norm_mem_bw_GBps"), load_machine("h100").sources.at("norm_mem_bw_GBps"));
  EXPECT_DOUBLE_EQ(back.hw.eager_norm_mem_bw_GBps, load_machine("h100").hw.eager_norm_mem_bw_GBps);
  EXPECT_EQ(back.sources.at("eager_norm_mem_bw_GBps"), load_machine("h100").sources.at("eager_norm_mem_bw_GBps"));
  // And a figure of one's own (here on the b200, which cites none) survives its round trip.
  MachineProfile own = load_machine("b200");
  own.hw.eager_norm_mem_bw_GBps = 40;
  own.sources["eager_norm_mem_bw_GBps"] = "en";
  const auto twice = (dir / "twice.toml").string();
  std::ofstream(twice) << machine_toml(own);
  EXPECT_DOUBLE_EQ(load_machine(twice).hw.eager_norm_mem_bw_GBps, 40);
  EXPECT_EQ(load_machine(twice).sources.at("eager_norm_mem_bw_GBps"), "en");
  // Absent: 0, the average's rate (as before the kinds).
  const auto plain = (dir / "plain.toml").string();
  std::ofstream(plain) << head << sources;
  EXPECT_EQ(load_machine(plain).hw.norm_mem_bw_GBps, 0);
  EXPECT_EQ(load_machine(plain).hw.eager_norm_mem_bw_GBps, 0);
  expect_refused(dir, head,
                 {{"norm_mem_bw_GBps = 0.0\n" + sources + "norm_mem_bw_GBps = \"n\"\n", "machine.norm_mem_bw_GBps"},
                  {"softmax_mem_bw_GBps = -5.0\n" + sources + "softmax_mem_bw_GBps = \"n\"\n",
                   "machine.softmax_mem_bw_GBps"},
                  {"loss_mem_bw_GBps = nan\n" + sources + "loss_mem_bw_GBps = \"n\"\n", "machine.loss_mem_bw_GBps"},
                  {"elementwise_mem_bw_GBps = \"fast\"\n" + sources, "machine.elementwise_mem_bw_GBps"},
                  {"elementwise_mem_bw_GBps = 80.0\n" + sources, "machine.elementwise_mem_bw_GBps has no source"},
                  {"norm_mem_bw_GBps = 50.0\n" + sources + "norm_mem_bw_GBps = \"\"\n",
                   "machine.sources.norm_mem_bw_GBps is empty"},
                  {"eager_norm_mem_bw_GBps = 0.0\n" + sources + "eager_norm_mem_bw_GBps = \"n\"\n",
                   "machine.eager_norm_mem_bw_GBps"},
                  {"eager_norm_mem_bw_GBps = -1.0\n" + sources + "eager_norm_mem_bw_GBps = \"n\"\n",
                   "machine.eager_norm_mem_bw_GBps"},
                  {"eager_norm_mem_bw_GBps = \"slow\"\n" + sources, "machine.eager_norm_mem_bw_GBps"},
                  {"eager_norm_mem_bw_GBps = 40.0\n" + sources, "machine.eager_norm_mem_bw_GBps has no source"}});
  for (const MachineProfile& p : builtin_machines())
    for (const char* k : {"norm_mem_bw_GBps", "softmax_mem_bw_GBps", "loss_mem_bw_GBps", "elementwise_mem_bw_GBps",
                          "eager_norm_mem_bw_GBps"})
      EXPECT_TRUE(p.sources.count(k) && !p.sources.at(k).empty()) << p.name() << "'s " << k << " has no source";
  // The built-in figures: only where a kernel benchmark on the device is cited.
  const MachineProfile& a100 = load_machine("a100");
  // The norms by era and kernel: torch's LayerNorm on the a100 and h100
  // (fused), apex's FusedLayerNorm on the a100-2022 (Megatron-LM's runs), the
  // eager RMSNorm chain's own (the h100's at the NVL's fraction of HBM,
  // scaled again to the 96 GB part's 2.4 TB/s).
  EXPECT_DOUBLE_EQ(a100.hw.norm_mem_bw_GBps, 993);
  EXPECT_DOUBLE_EQ(a100.hw.eager_norm_mem_bw_GBps, 1049);
  EXPECT_DOUBLE_EQ(a100.hw.elementwise_mem_bw_GBps, 1684);
  EXPECT_NE(a100.sources.at("eager_norm_mem_bw_GBps").find("rms_norm, huggingface"), std::string::npos);
  const MachineProfile& a100_2022 = load_machine("a100-2022");
  EXPECT_DOUBLE_EQ(a100_2022.hw.norm_mem_bw_GBps, 801);
  EXPECT_NE(a100_2022.sources.at("norm_mem_bw_GBps").find("apex/pull/1037"), std::string::npos);
  EXPECT_DOUBLE_EQ(load_machine("h100").hw.norm_mem_bw_GBps, 1694);
  EXPECT_DOUBLE_EQ(load_machine("h100").hw.eager_norm_mem_bw_GBps, 1449);
  EXPECT_DOUBLE_EQ(load_machine("h100-96gb-500w").hw.eager_norm_mem_bw_GBps, 1449 * 2400 / 3350.0);
  EXPECT_EQ(load_machine("h100").hw.softmax_mem_bw_GBps, 0);  // no H100 softmax benchmark cited
  EXPECT_EQ(load_machine("b200").hw.norm_mem_bw_GBps, 0);
  std::filesystem::remove_all(dir);
}

// A GPU's kernels keep their own workspaces: a plan on a built-in GPU holds
// none of the CPU kernels' (bf16's GEMM staging, the attention scores), and
// equals what a rank on a device allocates (MicrobatchRunner, and the
// tensor-parallel runner, without them).
TEST(Machine, OnAGpuThePlanHoldsNoCpuKernelWorkspace) {
  for (Precision p : {Precision::fp32, Precision::bf16_mixed}) {
    PlanInput in = model_input("gpt2-124m", 4, 8, 256);
    in.dp = 2;
    in.precision = p;
    const int64_t cpu = plan(in).worst.workspace;
    in.hw = hardware_for(load_machine("h100"), p);
    EXPECT_FALSE(in.hw.host_kernels);
    const int64_t gpu = plan(in).worst.workspace;
    EXPECT_LT(gpu, cpu) << precision_name(p);
    EXPECT_EQ(gpu, runner_workspace_bytes(*in.shape, 4, 256, p, 0, 1, /*kernel_ws=*/false)) << precision_name(p);
    EXPECT_EQ(cpu, runner_workspace_bytes(*in.shape, 4, 256, p)) << precision_name(p);
    // The tensor-parallel runner likewise (a rank of dp2.tp2 with SP).
    in.tp = 2;
    in.sp = true;
    in.hw = Hardware{};
    const int64_t tp_cpu = plan(in).worst.workspace;
    in.hw = hardware_for(load_machine("h100"), p);
    const int64_t tp_gpu = plan(in).worst.workspace;
    tp::TpOptions o;
    o.tp = 2;
    o.sp = true;
    EXPECT_LT(tp_gpu, tp_cpu) << precision_name(p);
    EXPECT_EQ(tp_gpu, tp::runner_workspace_bytes(*in.shape, o, 4, 256, p, 0, 1, /*kernel_ws=*/false));
    EXPECT_EQ(tp_cpu, tp::runner_workspace_bytes(*in.shape, o, 4, 256, p));
  }
  EXPECT_TRUE(hardware_for(MachineProfile{}, Precision::fp32).host_kernels);  // a calibrated CPU profile
}

TEST(Machine, ThePlanSaysWhetherItFits) {
  PlanInput in = model_input("gpt2-124m");
  in.dp = 8;
  in.hw = hardware_for(load_machine("a100"), in.precision);
  in.hw.memory_GB = 80;
  in.hw.machine = "a100";
  std::string t = format_plan_table(in, plan(in));
  EXPECT_NE(t.find("fits in"), std::string::npos) << t;
  EXPECT_NE(t.find("machine         a100"), std::string::npos) << t;
  in.hw.memory_GB = 0.5;
  t = format_plan_table(in, plan(in));
  EXPECT_NE(t.find("DOES NOT FIT in"), std::string::npos) << t;
}

TEST(Machine, ProfileTomlRoundTripsAndLinesFit) {
  MachineProfile m = load_machine("h200");
  m.source = "a \"quoted\" source";
  const auto dir = std::filesystem::temp_directory_path() / ("pb_machine_rt_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto p = (dir / "m.toml").string();
  std::ofstream(p) << machine_toml(m);
  const MachineProfile r = load_machine(p);
  EXPECT_EQ(r.name(), m.name());
  EXPECT_EQ(r.source, m.source);
  EXPECT_DOUBLE_EQ(r.peak_tflops_bf16, m.peak_tflops_bf16);
  EXPECT_DOUBLE_EQ(r.hw.mem_bw_GBps, m.hw.mem_bw_GBps);
  EXPECT_DOUBLE_EQ(r.hw.memory_GB, m.hw.memory_GB);
  EXPECT_EQ(r.ranks_per_node, m.ranks_per_node);
  EXPECT_FALSE(r.hw.host_kernels);  // a GPU
  std::filesystem::remove_all(dir);
  // t = 5 + 2 x exactly, and with noise that cancels.
  const LineFit f = fit_line({{0, 5}, {1, 7}, {2, 9}, {3, 11}});
  EXPECT_NEAR(f.intercept, 5, 1e-12);
  EXPECT_NEAR(f.slope, 2, 1e-12);
  const LineFit g = fit_line({{1, 7.5}, {1, 6.5}, {3, 11.5}, {3, 10.5}});
  EXPECT_NEAR(g.intercept, 5, 1e-12);
  EXPECT_NEAR(g.slope, 2, 1e-12);
  EXPECT_THROW(fit_line({{1, 2}}), InputError);
  EXPECT_THROW(fit_line({{1, 2}, {1, 3}}), InputError);
}

// Measured tables round-trip through a profile, reach the plan's hardware by
// precision, and bad tables are refused naming the key.
TEST(Machine, ProfileTablesReadStrictly) {
  const auto dir = std::filesystem::temp_directory_path() / ("pb_machine_tables_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  MachineProfile m = load_machine("a100");
  m.wake_us = 33;
  m.gemm["fp32"] = {{16, 64, 64, 12.5}, {1024, 1024, 1024, 95}};
  m.gemm["fp64"] = {{256, 256, 256, 40}};
  m.hw.collectives["send_recv"] = {{2, 1.5, 9}, {4, 20, 3}};
  const auto p = (dir / "m.toml").string();
  std::ofstream(p) << machine_toml(m);
  const MachineProfile r = load_machine(p);
  EXPECT_DOUBLE_EQ(r.wake_us, 33);
  ASSERT_EQ(r.gemm.size(), 2u);
  ASSERT_EQ(r.gemm.at("fp32").size(), 2u);
  EXPECT_EQ(r.gemm.at("fp32")[0].m, 16);
  EXPECT_EQ(r.gemm.at("fp32")[1].k, 1024);
  EXPECT_DOUBLE_EQ(r.gemm.at("fp32")[0].gflops, 12.5);
  ASSERT_EQ(r.hw.collectives.at("send_recv").size(), 2u);
  EXPECT_EQ(r.hw.collectives.at("send_recv")[1].group_size, 4);
  EXPECT_DOUBLE_EQ(r.hw.collectives.at("send_recv")[1].alpha_us, 20);
  EXPECT_EQ(hardware_for(r, Precision::fp32).gemm_rates.size(), 2u);
  EXPECT_EQ(hardware_for(r, Precision::fp64).gemm_rates.size(), 1u);
  EXPECT_TRUE(hardware_for(r, Precision::bf16_mixed).gemm_rates.empty());
  EXPECT_EQ(hardware_for(r, Precision::bf16_mixed).collectives.size(), 1u);
  const std::string head = "[machine]\nname = \"x\"\nsource = \"s\"\npeak_tflops_bf16 = 1.0\n";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"[machine.gemm.fp32]\nm = [1, 2]\nn = [1]\nk = [1]\ngflops = [1.0]\n", "machine.gemm.fp32.n has 1 values"},
      {"[machine.gemm.fp32]\nm = [1]\nn = [1]\nk = [1]\ngflops = [0.0]\n", "machine.gemm.fp32.gflops"},
      {"[machine.gemm.fp32]\nm = [1.5]\nn = [1]\nk = [1]\ngflops = [1.0]\n", "machine.gemm.fp32.m must hold whole"},
      {"[machine.gemm.fp32]\nm = [1]\nn = [1]\ngflops = [1.0]\n", "machine.gemm.fp32.k"},
      {"[machine.gemm.fp32]\nm = []\nn = []\nk = []\ngflops = []\n", "at least one value"},
      {"[machine.gemm.fp16]\nm = [1]\nn = [1]\nk = [1]\ngflops = [1.0]\n", "machine.gemm.fp16"},
      {"[machine.collective.all_reduce]\ngroup_size = [1]\nalpha_us = [1.0]\nGBps = [1.0]\n",
       "group_size must be >= 2"},
      {"[machine.collective.broadcast]\ngroup_size = [2]\nalpha_us = [1.0]\nGBps = [1.0]\n",
       "machine.collective.broadcast"},
      {"[machine.collective.all_reduce]\ngroup_size = [2]\nalpha_us = [1.0]\nGBps = [-1.0]\n",
       "machine.collective.all_reduce.GBps"},
  };
  expect_refused(dir, head, bad);
  std::filesystem::remove_all(dir);
}

// calibrate --inter-node: the link from a collectives CSV's all_reduce rows
// across nodes (t = alpha + bus / B; the other rows ignored); bad files name
// what they lack. The plan times inter-node steps at that latency.
TEST(Machine, InterNodeLinkFromCollectiveRows) {
  const auto dir = std::filesystem::temp_directory_path() / ("pb_inter_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string head = "run_id,kind,world,status,op,bytes,dtype,inplace,time_us,nodes\n";
  auto row = [](const char* op, int world, double bytes, double t_us, int nodes, const char* inplace = "0",
                const char* dtype = "fp32") {
    return std::string("r,collective,") + std::to_string(world) + ",ok," + op + "," + std::to_string(int64_t(bytes)) +
           "," + dtype + "," + inplace + "," + std::to_string(t_us) + "," + std::to_string(nodes) + "\n";
  };
  // 4 ranks: alpha 300 us, bus 2 GB/s (bus bytes = 1.5 S).
  auto t_us = [](double S) { return 300 + 1.5 * S / 2e9 * 1e6; };
  std::string text = head;
  for (double S : {4.0, 1024.0, 65536.0, double(1 << 20), double(4 << 20), double(16 << 20)})
    text += row("all_reduce", 4, S, t_us(S), 2);
  text += row("all_reduce", 4, 1 << 20, 1, 1);               // one node: not inter-node
  text += row("all_gather", 4, 1 << 20, 1, 2);               // another op
  text += row("all_reduce", 4, 1 << 20, 1, 2, "1");          // in place
  text += row("all_reduce", 4, 1 << 20, 1, 2, "0", "bf16");  // another dtype
  text += row("all_reduce", 2, 1 << 20, 1, 2);               // a smaller world
  const auto p = (dir / "c.csv").string();
  std::ofstream(p) << text;
  const InterNodeFit f = fit_inter_node(p);
  EXPECT_EQ(f.world, 4);
  EXPECT_EQ(f.rows, 6);
  EXPECT_NEAR(f.GBps, 2, 1e-6);
  EXPECT_NEAR(f.latency_us, t_us(1024) / 6, 1e-6);  // the median of 4 B, 1 KiB, 64 KiB over 6 steps
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"run_id,kind,world,status,op,bytes,dtype,inplace,time_us\n", "no 'nodes' column"},
      {head + row("all_reduce", 4, 1 << 20, 10, 1), "no ok fp32 all_reduce rows across 2 or more nodes"},
      {head + row("all_reduce", 4, 1 << 20, 10, 2) + row("all_reduce", 4, 1 << 20, 11, 2), "at least two (has 1)"},
      {head + "r,collective,4,ok,all_reduce,abc,fp32,0,1,2\n" + row("all_reduce", 4, 1 << 20, 10, 2), "'bytes' is not a number"},
      {head + row("all_reduce", 4, 1 << 20, 20, 2) + row("all_reduce", 4, 4 << 20, 10, 2), "do not grow with size"},
  };
  for (const auto& [csv, want] : bad) {
    std::ofstream(p) << csv;
    try {
      fit_inter_node(p);
      ADD_FAILURE() << "accepted: " << csv;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(fit_inter_node((dir / "none.csv").string()), InputError);
  std::filesystem::remove_all(dir);
  PlanInput in = params_only(10'000'000, 4, dp::Shard::none);
  in.hw = figures({.peak_tflops = 1, .bw_intra_GBps = 1, .bw_inter_GBps = 1, .latency_us = 1});
  in.hw.latency_inter_us = 50;
  in.ranks_per_node = 2;
  for (const CommRow& c : plan(in).comm) {
    ASSERT_TRUE(c.inter_node);
    EXPECT_NEAR(c.time_s, double(c.calls) * 6 * 50e-6 + c.bus_bytes / 1e9, 1e-12);
  }
}

// Calibrated training shapes (parabench calibrate --model) round-trip
// through a profile and reach the plan at its rank's work per block
// (shape_work): log-linear between two shapes, the nearest beyond them; the
// rates, compute_scale, and corun_scale at the node's ranks side by side,
// taken at the copies of the weights they hold; compute_scale_for makes the
// calibration step plan at the time it measured.
TEST(Machine, CalibratedShapeFiguresReachThePlan) {
  const auto dir = std::filesystem::temp_directory_path() / ("pb_machine_shape_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  MachineProfile m;
  m.hw.machine = "cpu";
  m.source = "test";
  m.peak_tflops_bf16 = m.peak_tflops_fp32 = m.peak_tflops_fp64 = 0.1;
  m.hw.mem_bw_GBps = 8;
  m.hw.bw_intra_GBps = m.hw.bw_inter_GBps = 10;
  m.ranks_per_node = 2;
  const double w_tiny = shape_work(planner_model("tiny"), 4, 16, 1, 1),
               w_small = shape_work(planner_model("small"), 4, 16, 1, 1);
  // One block of tiny for 4 x 16 tokens: 72 b s h^2 + 12 b s^2 h.
  EXPECT_DOUBLE_EQ(w_tiny, 72.0 * 64 * 32 * 32 + 12.0 * 4 * 256 * 32);
  EXPECT_DOUBLE_EQ(shape_work(planner_model("small"), 4, 16, 2, 1), w_small / 2);
  m.shapes = {{"tiny", w_tiny, 7, 32, 27, 100, 1.1, 1.2}, {"small", w_small, 8, 28, 23, 50, 1.0, 1.0}};
  const auto p = (dir / "m.toml").string();
  std::ofstream(p) << machine_toml(m);
  const MachineProfile r = load_machine(p);
  ASSERT_EQ(r.shapes.size(), 2u);
  EXPECT_EQ(r.shapes[1].workload, "small");
  EXPECT_DOUBLE_EQ(r.shapes[0].buffer_mem_bw_GBps, 100);
  // Between: log-linear; beyond: the nearest.
  const double mid = std::sqrt(w_tiny * w_small);
  EXPECT_NEAR(shape_figures_at(r.shapes, mid).compute_scale, 1.05, 1e-6);
  EXPECT_NEAR(shape_figures_at(r.shapes, mid).buffer_mem_bw_GBps, 75, 1e-6);
  EXPECT_DOUBLE_EQ(shape_figures_at(r.shapes, w_tiny / 10).compute_scale, 1.1);
  EXPECT_DOUBLE_EQ(shape_figures_at(r.shapes, w_small * 10).corun_scale, 1.0);
  EXPECT_DOUBLE_EQ(shape_figures_at({}, 5).compute_scale, 1);
  // A plan of tiny takes tiny's figures; of small at tp2, between the two.
  PlanInput in = model_input("tiny", 4, 8, 16);
  in.precision = Precision::fp32;
  in.ranks_per_node = r.ranks_per_node;
  Hardware h = hardware_for(r, in);
  EXPECT_DOUBLE_EQ(h.mem_bw_GBps, 7);
  EXPECT_DOUBLE_EQ(h.shared_mem_bw_GBps, 32);
  EXPECT_DOUBLE_EQ(h.optimizer_mem_bw_GBps, 27);
  EXPECT_DOUBLE_EQ(h.buffer_mem_bw_GBps, 100);
  EXPECT_DOUBLE_EQ(h.compute_scale, 1.1);
  EXPECT_DOUBLE_EQ(h.corun_scale, 1.2);
  EXPECT_EQ(h.corun_ranks, 2);
  PlanInput small = in;
  small.shape = planner_model("small");
  small.tp = 2;
  const Hardware hs = hardware_for(r, small);
  EXPECT_GT(hs.compute_scale, 1.0);
  EXPECT_LT(hs.compute_scale, 1.1);
  EXPECT_DOUBLE_EQ(hardware_for(r, Precision::fp32).compute_scale, 1);  // no plan: no shape figures
  PlanInput params_only = in;
  params_only.shape.reset();
  params_only.params = 1000000;
  EXPECT_DOUBLE_EQ(hardware_for(r, params_only).mem_bw_GBps, 8);
  // A built-in (datasheet) profile carries none.
  EXPECT_TRUE(load_machine("h100").shapes.empty());
  EXPECT_DOUBLE_EQ(hardware_for(load_machine("h100"), in).corun_scale, 1);
  in.shard = dp::Shard::zero3;  // buffers of its own, which compute_scale leaves alone
  in.hw = h;
  in.hw.compute_scale = 1;  // compute_scale_for: of a plan at 1
  const PlanResult est = plan(in);
  ASSERT_GT(est.buffer_s, 0);
  in.hw.compute_scale = compute_scale_for(est, 1.3 * est.step_s);
  EXPECT_NEAR(plan(in).step_s, 1.3 * est.step_s, 1e-12 * est.step_s);
  EXPECT_NEAR(in.hw.compute_scale, (1.3 * est.step_s - est.buffer_s) / (est.step_s - est.buffer_s), 1e-12);
  in.hw.compute_scale = 1;

  // corun_factor: linear in the copies between 1 and `at`, clamped.
  EXPECT_DOUBLE_EQ(corun_factor(1.2, 2, 1), 1);
  EXPECT_DOUBLE_EQ(corun_factor(1.2, 2, 2), 1.2);
  EXPECT_DOUBLE_EQ(corun_factor(1.2, 2, 5), 1.2);
  EXPECT_DOUBLE_EQ(corun_factor(1.3, 4, 2), 1.1);
  EXPECT_DOUBLE_EQ(corun_factor(1.3, 1, 4), 1);
  // In the plan: one rank, or two holding halves of the weights (tp2), none;
  // two data-parallel ranks on the node, all of it; four over two nodes, the
  // node's two; on nodes of one rank, none.
  in.shard = dp::Shard::none;
  const double alone = plan(in).compute_s;
  auto corun_of = [&](int dp, int tp, int64_t rpn) {
    PlanInput x = in;
    x.dp = dp;
    x.tp = tp;
    x.global_batch = 8 * dp;
    x.ranks_per_node = rpn;
    x.hw.corun_scale = 1;
    const PlanResult without = plan(x);
    x.hw.corun_scale = 1.2;
    const PlanResult with = plan(x);
    // Compute scales by it, the data-parallel buffers aside (as compute_scale).
    EXPECT_NEAR((with.compute_s - with.buffer_s) / (without.compute_s - without.buffer_s), with.corun, 1e-12);
    EXPECT_DOUBLE_EQ(with.buffer_s, without.buffer_s);
    return with.corun;
  };
  EXPECT_GT(alone, 0);
  EXPECT_DOUBLE_EQ(corun_of(1, 1, 2), 1);
  EXPECT_DOUBLE_EQ(corun_of(1, 2, 2), 1);
  EXPECT_DOUBLE_EQ(corun_of(2, 1, 2), 1.2);
  EXPECT_DOUBLE_EQ(corun_of(4, 1, 2), 1.2);
  EXPECT_DOUBLE_EQ(corun_of(4, 1, 1), 1);
  in.hw.corun_scale = 0;
  EXPECT_THROW(plan(in), InputError);
  in.hw.corun_scale = 1;

  // Bad figures in a file are refused naming the key.
  const std::string head = "[machine]\nname = \"x\"\nsource = \"s\"\npeak_tflops_bf16 = 1.0\n";
  auto table = [](const std::string& workload, const std::string& work, const std::string& scale) {
    return "[machine.shape]\nworkload = " + workload + "\nwork = " + work +
           "\nmem_bw_GBps = [7.0, 8.0]\nshared_mem_bw_GBps = [30.0, 28.0]\noptimizer_mem_bw_GBps = [27.0, 23.0]\n"
           "buffer_mem_bw_GBps = [100.0, 50.0]\ncompute_scale = " + scale + "\ncorun_scale = [1.1, 1.0]\n";
  };
  const std::string two = "[\"tiny\", \"small\"]";
  expect_refused(dir, head, {
           {table(two, "[1.0, 2.0]", "[0.0, 1.0]"), "machine.shape.compute_scale"},
           {table(two, "[2.0, 1.0]", "[1.1, 1.0]"), "machine.shape.work must be strictly ascending"},
           {table(two, "[1.0]", "[1.1, 1.0]"), "machine.shape.mem_bw_GBps has 2 values"},
           {table("[\"tiny\"]", "[1.0, 2.0]", "[1.1, 1.0]"), "machine.shape.workload has 1 values"},
           {table("[\"tiny\", \"\"]", "[1.0, 2.0]", "[1.1, 1.0]"), "must name each shape"},
           {table(two, "[1.0, 2.0]", "[1.1, 1.0]") + "extra = 1.0\n", "machine.shape.extra"},
           {"workload = 3\n", "machine.workload"}});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pb::planner

namespace pb::planner {
namespace {

// The GEMM model of a GPU profile: the achievable rate where the output tiles
// fill whole waves of the SMs, less where the last wave or the last tile runs
// partly empty (tile and wave quantization), batched GEMMs counting all their
// tiles; a100's built-in carries it with a source for each figure.
TEST(Machine, GemmModelQuantizesTilesAndWaves) {
  const GemmShape full{256, 128 * 108, 4096, false, true, 1};
  EXPECT_DOUBLE_EQ(modeled_gemm_gflops(271.2, 108, 256, 128, full), 271.2e3);
  const GemmShape one_more{256, 128 * 109, 4096, false, true, 1};  // 109 tiles: a second wave of one tile
  EXPECT_NEAR(modeled_gemm_gflops(271.2, 108, 256, 128, one_more), 271.2e3 * 109.0 / 216.0, 1e-6);
  const GemmShape half_tile{128, 128 * 108, 4096, false, true, 1};  // every tile half used
  EXPECT_DOUBLE_EQ(modeled_gemm_gflops(271.2, 108, 256, 128, half_tile), 271.2e3 / 2);
  GemmShape batched{256, 128, 128, false, true, 1};
  batched.batch = 108;  // one tile each, 108 of them: one full wave
  EXPECT_DOUBLE_EQ(modeled_gemm_gflops(271.2, 108, 256, 128, batched), 271.2e3);
  EXPECT_DOUBLE_EQ(modeled_gemm_gflops(271.2, 0, 0, 0, one_more), 271.2e3);  // no units: the rate alone
  // The roofline: a thin GEMM (the unfused attention core's S = Q K^T over a
  // head dimension of 96, 2048 x 2048 scores) is held to what device memory
  // feeds it: 2mnk FLOPs over (mk + kn + mn) 2-byte elements, at 1800 GB/s.
  const GemmShape scores{2048, 2048, 96, false, true, 1, 384};
  const double intensity = 2.0 * 2048 * 2048 * 96 / (2.0 * (2048 * 96 + 96 * 2048 + 2048 * 2048));
  EXPECT_NEAR(modeled_gemm_gflops(258, 108, 256, 128, scores, 1800, 2), intensity * 1800, 1e-9);
  EXPECT_LT(intensity * 1800, 258e3 * 0.7);  // memory-bound: below the tiles' rate
  // No bandwidth, no bound: 8 x 16 tiles per head, 384 heads, in 456 waves.
  EXPECT_NEAR(modeled_gemm_gflops(258, 108, 256, 128, scores), 258e3 * 49152.0 / (456 * 108), 1e-6);
  // A square GEMM's intensity is far above the ridge: the bound leaves it alone.
  EXPECT_DOUBLE_EQ(modeled_gemm_gflops(271.2, 108, 256, 128, full, 1800, 2), 271.2e3);

  const MachineProfile a100 = load_machine("a100");
  EXPECT_DOUBLE_EQ(a100.gemm_achievable_tflops_bf16, 271.2);
  EXPECT_EQ(a100.hw.gemm_units, 108);
  for (const MachineProfile& m : builtin_machines()) {
    EXPECT_GT(m.gemm_achievable_tflops_bf16, 0) << m.name();
    EXPECT_LE(m.gemm_achievable_tflops_bf16, m.peak_tflops_bf16) << m.name();
    for (const std::string& k : profile_figures()) {
      const bool carried = k.rfind("gemm_", 0) != 0 || k == "gemm_efficiency" ||
                           k == "gemm_achievable_tflops_bf16" || m.hw.gemm_units > 0;
      if (carried) {
        EXPECT_TRUE(m.sources.count(k) && !m.sources.at(k).empty()) << m.name() << "'s " << k << " has no source";
      }
    }
  }
  // bf16-mixed plans take the model; fp32 has no measured achievable rate.
  EXPECT_DOUBLE_EQ(hardware_for(a100, Precision::bf16_mixed).gemm_achievable_tflops, 271.2);
  EXPECT_DOUBLE_EQ(hardware_for(a100, Precision::fp32).gemm_achievable_tflops, 0);
}

}  // namespace
}  // namespace pb::planner
