// parabench verify's readers and judgement: an export's own trace passes; a
// trace k times as far from the truth as the reference fails; every kind of
// malformed trace or export is an InputError naming the tensor or key.
#include "suites/conformance/verify.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <cstring>
#include <functional>
#include <map>
#include <string>

#include "harness/io/config.h"
#include "harness/io/safetensors.h"
#include "harness/status.h"
#include "kernels/common/device_ops.h"
#include "reference/export.h"
#include "reference/layout.h"
#include "reference/train_config_io.h"

namespace pb {
namespace {

namespace fs = std::filesystem;

TrainConfig tiny(Precision p) {
  TrainConfig c;
  c.model = named_model("tiny");
  c.steps = 3;
  c.precision = p;
  return c;
}

fs::path scratch(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("pb_verify_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string export_to(const TrainConfig& cfg, const fs::path& dir) {
  ConfigReader r;
  write_train_config(cfg, r);
  export_golden(cfg, dir.string(), r.dump());
  return dir.string();
}

// Copies src to dst through `edit`, which may change the metadata and the
// tensors (name -> (dtype, shape, bytes)) before they are written back.
struct Edit {
  std::map<std::string, std::string> meta;
  struct T {
    StDType dtype;
    Shape shape;
    std::vector<char> bytes;
  };
  std::vector<std::pair<std::string, T>> tensors;
  T* find(const std::string& n) {
    for (auto& [k, t] : tensors)
      if (k == n) return &t;
    return nullptr;
  }
};

std::string rewrite(const std::string& src, const fs::path& dst, const std::function<void(Edit&)>& edit) {
  const SafetensorsFile f = SafetensorsFile::open(src);
  Edit e;
  e.meta = f.metadata();
  for (const auto& ti : f.tensors()) {
    auto raw = f.raw(ti.name);
    e.tensors.push_back({ti.name, {ti.dtype, ti.shape, {raw.begin(), raw.end()}}});
  }
  edit(e);
  SafetensorsWriter w;
  for (const auto& [k, v] : e.meta) w.set_metadata(k, v);
  for (const auto& [n, t] : e.tensors) w.add(n, t.dtype, t.shape, t.bytes.data(), t.bytes.size());
  w.write(dst.string());
  return dst.string();
}

class Verify : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch(::testing::UnitTest::GetInstance()->current_test_info()->name());
    exp_ = read_export(export_to(tiny(Precision::fp32), dir_ / "export"));
    golden_ = (dir_ / "export" / "trace.safetensors").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  // The message of the InputError reading a trace edited by `edit`.
  std::string trace_error(const std::function<void(Edit&)>& edit) {
    const std::string p = rewrite(golden_, dir_ / "edited.safetensors", edit);
    try {
      read_trace(p, exp_);
    } catch (const InputError& e) {
      return e.what();
    }
    return "(no error)";
  }
  fs::path dir_;
  ExportDir exp_;
  std::string golden_;
};

// Format v1 (before the MoE quantities) is still read and judged: the same
// trace relabelled v1 passes with the same checks.
TEST_F(Verify, AVersionOneTraceIsStillReadAndJudged) {
  const std::string p = rewrite(golden_, dir_ / "v1.safetensors", [](Edit& e) { e.meta["format"] = kTraceFormatV1; });
  const ConformanceResult r = verify_trace(exp_, read_trace(p, exp_));
  ASSERT_EQ(r.rule.size(), 3u + 2u + 3u + 3u);  // grad_norm judged in v1 traces too
  for (const auto& c : r.rule) EXPECT_TRUE(c.pass) << c.quantity << " " << c.ratio;
}

TEST_F(Verify, TheExportsOwnTracePassesWithRatiosAtMostOne) {
  const ForeignTrace t = read_trace(golden_, exp_);
  EXPECT_EQ(t.framework, "parabench");
  EXPECT_EQ(t.world, 1);
  const ConformanceResult r = verify_trace(exp_, t);
  ASSERT_EQ(r.rule.size(), 3u + 2u + 3u + 3u);  // 3 losses, grads, params, 3 gradient norms, 3 learning rates
  for (const auto& c : r.rule) {
    EXPECT_TRUE(c.pass) << c.quantity << " " << c.ratio;
    EXPECT_LE(c.ratio, 1.0) << c.quantity;  // the reference is one of the floor's references
  }
  EXPECT_EQ(r.backend, "foreign");
  EXPECT_EQ(r.strategy, "parabench:reference");
}

TEST_F(Verify, BfSixteenFromAnFp32ExportIsJudgedAtBf16) {
  const fs::path d = dir_ / "bf16";
  const ExportDir e16 = read_export(export_to(tiny(Precision::bf16_mixed), d));
  // The bf16-mixed reference's own trace, renamed to the fp32 export: its
  // master starts from the same init, so it is a correct bf16-mixed trace.
  const std::string p = rewrite((d / "trace.safetensors").string(), dir_ / "b.safetensors",
                                [&](Edit& e) { e.meta["export_hash"] = exp_.config_hash; });
  const ConformanceResult r = verify_trace(exp_, read_trace(p, exp_));
  EXPECT_TRUE(r.pass()) << describe_failures(r);
  EXPECT_EQ(r.precision, Precision::bf16_mixed);
  EXPECT_TRUE(trace_precision_allowed(Precision::fp32, Precision::bf16_mixed));
  EXPECT_FALSE(trace_precision_allowed(Precision::bf16_mixed, Precision::fp32));
  EXPECT_FALSE(trace_precision_allowed(Precision::fp32, Precision::fp64));
  (void)e16;
}

// Teeth: the trace moved away from the truth by k times the reference's own
// distance fails when k > C (8), on the quantity moved.
TEST_F(Verify, ATraceBeyondCTimesTheFloorFails) {
  for (const std::string q : {"grads.", "params."}) {
    const std::string p = rewrite(golden_, dir_ / "far.safetensors", [&](Edit& e) {
      for (auto& [n, t] : e.tensors)
        if (n.rfind(q, 0) == 0) {
          auto* v = reinterpret_cast<float*>(t.bytes.data());
          for (size_t i = 0; i < t.bytes.size() / sizeof(float); ++i) v[i] *= 1.001f;  // 1e-3 >> 8 x fp32 floor
        }
    });
    const ConformanceResult r = verify_trace(exp_, read_trace(p, exp_));
    EXPECT_FALSE(r.pass()) << q;
    for (const auto& c : r.rule)
      if (c.quantity + "." == q) {
        EXPECT_GT(c.ratio, 8.0) << q;
      }
  }
  // A doubled loss at step 2 only: that step fails, the others pass.
  const std::string p = rewrite(golden_, dir_ / "loss.safetensors", [](Edit& e) {
    reinterpret_cast<double*>(e.find("loss")->bytes.data())[1] *= 2;
  });
  const ConformanceResult r = verify_trace(exp_, read_trace(p, exp_));
  for (const auto& c : r.rule)
    if (c.quantity == "loss") {
      EXPECT_EQ(c.pass, c.step != 2) << c.step;
    }
}

TEST_F(Verify, ANonFiniteTraceIsAFailedRunNotABadFile) {
  const std::string p = rewrite(golden_, dir_ / "nan.safetensors", [](Edit& e) {
    reinterpret_cast<double*>(e.find("loss")->bytes.data())[2] = NAN;
  });
  const ConformanceResult r = verify_trace(exp_, read_trace(p, exp_));
  EXPECT_FALSE(r.pass());
}

// The gradient norm and the learning rate a trace gives are judged, every
// step: a NaN, negative or 1% wrong norm fails as "grad_norm", a learning
// rate off the export's schedule fails as "lr"; the others pass.
TEST_F(Verify, GradNormAndLrAreJudgedEveryStep) {
  auto failed = [&](const std::function<void(Edit&)>& edit) {
    const std::string p = rewrite(golden_, dir_ / "edited.safetensors", edit);
    const ConformanceResult r = verify_trace(exp_, read_trace(p, exp_));
    std::vector<std::string> out;
    for (const auto& c : r.rule)
      if (!c.pass) out.push_back(c.quantity + "@" + std::to_string(c.step));
    return out;
  };
  auto at = [](Edit& e, const char* name, int i) -> double& {
    return reinterpret_cast<double*>(e.find(name)->bytes.data())[i];
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(failed([&](Edit& e) { at(e, "grad_norm", 0) = NAN; }), V{"grad_norm@1"});
  EXPECT_EQ(failed([&](Edit& e) { at(e, "grad_norm", 1) = -at(e, "grad_norm", 1); }), V{"grad_norm@2"});
  EXPECT_EQ(failed([&](Edit& e) { at(e, "grad_norm", 2) *= 1.01; }), V{"grad_norm@3"});
  EXPECT_EQ(failed([&](Edit& e) { at(e, "lr", 1) *= 1.001; }), V{"lr@2"});
  EXPECT_EQ(failed([&](Edit& e) { at(e, "lr", 0) = NAN; }), V{"lr@1"});
  // A learning rate rounded to fp32 is the schedule's: it passes.
  EXPECT_EQ(failed([&](Edit& e) {
              for (int i = 0; i < 3; ++i) at(e, "lr", i) = double(float(at(e, "lr", i)));
            }),
            V{});
  // Without lr (optional in the format) only the norm is judged beside the rule.
  const std::string p = rewrite(golden_, dir_ / "nolr.safetensors", [](Edit& e) {
    std::erase_if(e.tensors, [](auto& t) { return t.first == "lr"; });
  });
  const ConformanceResult r = verify_trace(exp_, read_trace(p, exp_));
  EXPECT_EQ(r.rule.size(), 3u + 2u + 3u);
  EXPECT_TRUE(r.pass()) << describe_failures(r);
}

// A failed verify says where to look: the first failing check, and the
// parameters whose error is largest against their own floor.
TEST_F(Verify, AFailureNamesTheFirstStepAndTheWorstParameters) {
  auto scale = [](Edit& e, const std::string& name, float k) {
    auto* t = e.find(name);
    ASSERT_NE(t, nullptr) << name;
    ASSERT_EQ(t->dtype, StDType::F32);
    auto* v = reinterpret_cast<float*>(t->bytes.data());
    for (size_t i = 0; i < t->bytes.size() / sizeof(float); ++i) v[i] *= k;
  };
  VerifyDiagnosis why;
  verify_trace(exp_, read_trace(golden_, exp_), {}, &why);
  EXPECT_FALSE(why.failed);
  EXPECT_EQ(why.text(), "");
  // One gradient wrong (a sum not divided, say): grads at step 1, that one first.
  std::string p = rewrite(golden_, dir_ / "g.safetensors",
                          [&](Edit& e) { scale(e, "grads.h.1.mlp.c_fc.weight", 2.0f); });
  ConformanceResult r = verify_trace(exp_, read_trace(p, exp_), {}, &why);
  ASSERT_FALSE(r.pass());
  ASSERT_TRUE(why.failed);
  EXPECT_EQ(why.first.quantity, "grads");
  EXPECT_EQ(why.first.step, 1);
  EXPECT_EQ(why.vector_quantity, "grads");
  ASSERT_EQ(why.worst.size(), size_t(kWorstParams));
  EXPECT_EQ(why.worst[0].name, "h.1.mlp.c_fc.weight");
  EXPECT_GT(why.worst[0].ratio, 8.0);
  for (size_t i = 1; i < why.worst.size(); ++i) {
    EXPECT_LE(why.worst[i].ratio, why.worst[i - 1].ratio);
    EXPECT_LE(why.worst[i].ratio, 1.0) << why.worst[i].name;  // the untouched ones are the reference's
  }
  EXPECT_NE(why.text().find("first failure: grads at step 1"), std::string::npos) << why.text();
  EXPECT_NE(why.text().find("step-1 gradients"), std::string::npos) << why.text();
  EXPECT_NE(why.text().find("h.1.mlp.c_fc.weight"), std::string::npos) << why.text();
  // Two final parameters wrong (an update skipped on one shard), the larger first;
  // a loss wrong at step 2 comes before them (the earlier step).
  p = rewrite(golden_, dir_ / "p.safetensors", [&](Edit& e) {
    scale(e, "params.ln_f.bias", 1.5f);
    scale(e, "params.h.0.attn.c_proj.weight", 1.01f);
  });
  r = verify_trace(exp_, read_trace(p, exp_), {}, &why);
  ASSERT_TRUE(why.failed);
  EXPECT_EQ(why.first.quantity, "params");
  EXPECT_EQ(why.first.step, 3);
  EXPECT_EQ(why.vector_quantity, "params");
  ASSERT_GE(why.worst.size(), 2u);
  EXPECT_EQ(why.worst[0].name, "ln_f.bias");
  EXPECT_EQ(why.worst[1].name, "h.0.attn.c_proj.weight");
  p = rewrite(p, dir_ / "pl.safetensors",
              [](Edit& e) { reinterpret_cast<double*>(e.find("loss")->bytes.data())[1] *= 2; });
  verify_trace(exp_, read_trace(p, exp_), {}, &why);
  EXPECT_EQ(why.first.quantity, "loss");
  EXPECT_EQ(why.first.step, 2);
  EXPECT_EQ(why.vector_quantity, "params");  // the vector that failed
  EXPECT_EQ(why.worst[0].name, "ln_f.bias");
}

// An fp64 trace is held to the fp64 floor: a correct fp64 run in another
// order of summation passes; an error an fp32 floor would hide fails.
TEST_F(Verify, AnFp64TraceIsHeldToTheFp64Floor) {
  const fs::path d = dir_ / "fp64";
  const TrainConfig cfg = tiny(Precision::fp64);
  const ExportDir e64 = read_export(export_to(cfg, d));
  const std::string g64 = (d / "trace.safetensors").string();
  const ParamLayout l(cfg.model);
  auto put = [&](Edit& e, const Trace& t) {
    auto set = [&](const std::string& n, const double* v, size_t count) {
      auto* x = e.find(n);
      ASSERT_NE(x, nullptr) << n;
      ASSERT_EQ(x->dtype, StDType::F64) << n;
      ASSERT_EQ(x->bytes.size(), count * sizeof(double)) << n;
      std::memcpy(x->bytes.data(), v, x->bytes.size());
    };
    set("loss", t.loss.data(), t.loss.size());
    set("grad_norm", t.grad_norm.data(), t.grad_norm.size());
    for (const auto& p : l.params()) {
      set("grads." + p.name, t.grads1.data() + p.offset, size_t(p.numel));
      set("params." + p.name, t.params.data() + p.offset, size_t(p.numel));
    }
  };
  // The reference with every matmul's inner sums in 5 slices (not one of the
  // floor's orders): a correct fp64 run that rounds differently.
  const Trace other = reference_trace(cfg, {}, nullptr, kernels::cpu_ops_sliced<double>(5));
  std::string p = rewrite(g64, dir_ / "o.safetensors", [&](Edit& e) { put(e, other); });
  VerifyDiagnosis why;
  ConformanceResult r = verify_trace(e64, read_trace(p, e64), {}, &why);
  EXPECT_EQ(r.precision, Precision::fp64);
  EXPECT_TRUE(r.pass()) << describe_failures(r) << " " << why.text();
  // The parameters 1e-9 (relative) off: far below an fp32 floor (~1e-7), far
  // above fp64's: fails, on params.
  Trace off = other;
  for (double& v : off.params) v *= 1 + 1e-9;
  p = rewrite(g64, dir_ / "off.safetensors", [&](Edit& e) { put(e, off); });
  r = verify_trace(e64, read_trace(p, e64), {}, &why);
  EXPECT_FALSE(r.pass());
  ASSERT_TRUE(why.failed);
  EXPECT_EQ(why.first.quantity, "params");
  for (const auto& c : r.rule)
    if (c.quantity == "params") {
      EXPECT_LT(c.floor, 1e-10);  // the fp64 floor, not the fp32 one
      EXPECT_GT(c.ratio, 8.0);
    }
}

TEST_F(Verify, TheSplitOfTheTraceIsReplayed) {
  const std::string p = rewrite(golden_, dir_ / "dp2.safetensors", [](Edit& e) {
    e.meta["mesh"] = "dp2.pp2";
    e.meta["microbatches"] = "2";
  });
  const ForeignTrace t = read_trace(p, exp_);
  EXPECT_EQ(t.world, 4);
  EXPECT_EQ(split_of(t, exp_.cfg).groups, 2);
  EXPECT_EQ(split_of(t, exp_.cfg).micro, 2);
}

TEST_F(Verify, EveryMalformedTraceIsRefusedNamingWhat) {
  const std::vector<std::pair<std::function<void(Edit&)>, std::string>> bad = {
      {[](Edit& e) { e.meta["format"] = "parabench-trace-v3"; }, "'format' is 'parabench-trace-v3'"},
      {[](Edit& e) { e.meta.erase("format"); }, "metadata key 'format' is missing"},
      {[](Edit& e) { e.meta["colour"] = "blue"; }, "unknown metadata key 'colour'"},
      {[](Edit& e) { e.meta["export_hash"] = "0123456789abcdef"; }, "trained from another export"},
      {[](Edit& e) { e.meta["precision"] = "fp16"; }, "metadata 'precision'"},
      {[](Edit& e) { e.meta["precision"] = "fp64"; }, "a fp64 trace cannot be judged against a fp32 export"},
      {[](Edit& e) { e.meta["framework"] = ""; }, "metadata 'framework' must be 1 to 64"},
      {[](Edit& e) { e.meta["strategy"] = "ddp,zero"; }, "metadata 'strategy' must be"},
      {[](Edit& e) { e.meta["strategy"] = std::string(65, 'a'); }, "(got 65 characters)"},
      {[](Edit& e) { e.meta["mesh"] = "dp0"; }, "metadata 'mesh'"},
      {[](Edit& e) { e.meta["mesh"] = "zz2"; }, "metadata 'mesh'"},
      {[](Edit& e) { e.meta.erase("mesh"); }, "metadata key 'mesh' is missing"},
      {[](Edit& e) { e.meta["microbatches"] = "3"; }, "1 data replicas x 3 microbatches do not divide"},
      {[](Edit& e) { e.meta["microbatches"] = "0"; }, "metadata 'microbatches' is '0'"},
      {[](Edit& e) { e.meta["microbatches"] = "2x"; }, "metadata 'microbatches' is '2x'"},
      {[](Edit& e) { e.meta["mesh"] = "dp16"; }, "16 data replicas x 1 microbatches do not divide"},
      // Meshes the exported model (tiny: 2 heads, 2 layers, 16 tokens, dense) cannot have.
      {[](Edit& e) { e.meta["mesh"] = "tp4"; }, "metadata 'mesh' is 'tp4': tp4 does not divide the model's 2 heads"},
      {[](Edit& e) { e.meta["mesh"] = "pp1000000"; }, "pp1000000 is more stages than the model's 2 layers"},
      {[](Edit& e) { e.meta["mesh"] = "cp32"; }, "cp32 is more parts than the 16 tokens"},
      {[](Edit& e) { e.meta["mesh"] = "dp2.ep2"; }, "ep2 needs a mixture-of-experts model; the export's is dense"},
      {[](Edit& e) { e.meta["note"] = std::string(2000, 'n'); }, "'note' is longer than 1024"},
      {[](Edit& e) { std::erase_if(e.tensors, [](auto& t) { return t.first == "grads.wpe"; }); },
       "tensor 'grads.wpe' is missing"},
      {[](Edit& e) { std::erase_if(e.tensors, [](auto& t) { return t.first == "loss"; }); },
       "tensor 'loss' is missing"},
      {[](Edit& e) { e.find("params.ln_f.bias")->shape = {2, 16}; },
       "tensor 'params.ln_f.bias' has shape (2, 16), expected (32)"},
      {[](Edit& e) { e.find("loss")->shape = {6}; e.find("loss")->dtype = StDType::F32; },
       "tensor 'loss' has shape (6), expected (3)"},
      {[](Edit& e) {
         auto* t = e.find("params.wpe");
         t->dtype = StDType::I32;
       },
       "tensor 'params.wpe' has dtype I32, expected F64, F32 or BF16"},
      {[](Edit& e) {
         auto* t = e.find("loss");
         t->dtype = StDType::BF16;
         t->bytes.resize(6);
       },
       "tensor 'loss' has dtype BF16, expected F64 or F32"},
      {[](Edit& e) { e.tensors.push_back({"grads.h.9.ln_1.weight", {StDType::F32, {1}, std::vector<char>(4)}}); },
       "unknown tensor 'grads.h.9.ln_1.weight'"},
      {[](Edit& e) { e.tensors.push_back({"rank.peak_memory_bytes", {StDType::I64, {2}, std::vector<char>(16)}}); },
       "tensor 'rank.peak_memory_bytes' has shape (2), expected (1)"},
      {[](Edit& e) { e.tensors.push_back({"rank.comm_bytes", {StDType::F64, {1}, std::vector<char>(8)}}); },
       "tensor 'rank.comm_bytes' has dtype F64, expected I64"},
      {[](Edit& e) {
         std::vector<char> b(8);
         const int64_t v = -1;
         std::memcpy(b.data(), &v, 8);
         e.tensors.push_back({"rank.comm_bytes", {StDType::I64, {1}, b}});
       },
       "tensor 'rank.comm_bytes' is negative at rank 0"},
  };
  for (const auto& [edit, want] : bad) {
    const std::string msg = trace_error(edit);
    EXPECT_NE(msg.find(want), std::string::npos) << "wanted: " << want << "\n   got: " << msg;
    EXPECT_NE(msg.find("edited.safetensors"), std::string::npos) << msg;  // names the file
  }
  // The optional per-rank figures read back.
  const std::string p = rewrite(golden_, dir_ / "figs.safetensors", [](Edit& e) {
    std::vector<char> b(8);
    const int64_t v = 12345;
    std::memcpy(b.data(), &v, 8);
    e.tensors.push_back({"rank.peak_memory_bytes", {StDType::I64, {1}, b}});
  });
  EXPECT_EQ(read_trace(p, exp_).peak_memory, std::vector<int64_t>{12345});
}

TEST_F(Verify, AnAlteredOrForeignExportIsRefused) {
  const fs::path e = dir_ / "export";
  auto error = [&](const std::string& file, const std::function<void(Edit&)>& edit) {
    const fs::path d = dir_ / "altered";
    fs::remove_all(d);
    fs::create_directories(d);
    for (const char* f : {"init.safetensors", "batch.safetensors"}) fs::copy_file(e / f, d / f);
    rewrite((e / file).string(), d / file, edit);
    try {
      read_export(d.string());
    } catch (const InputError& err) {
      return std::string(err.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(error("init.safetensors", [](Edit& x) { reinterpret_cast<float*>(x.find("wte")->bytes.data())[5] += 1; })
                .find("tensor 'wte' differs from the reference's init at element 5"),
            std::string::npos);
  EXPECT_NE(error("batch.safetensors", [](Edit& x) { reinterpret_cast<int32_t*>(x.find("targets")->bytes.data())[7] ^= 1; })
                .find("tensor 'targets' differs from the config's data at element 7"),
            std::string::npos);
  EXPECT_NE(error("init.safetensors", [](Edit& x) { x.meta["format"] = "parabench-golden-v1"; }).find("export again"),
            std::string::npos);
  EXPECT_NE(error("batch.safetensors", [](Edit& x) { x.meta["config_hash"] = "0000000000000000"; })
                .find("metadata 'config_hash' is '0000000000000000'"),
            std::string::npos);
  EXPECT_NE(error("init.safetensors", [](Edit& x) { x.meta["config"] = "[train]\nsteps = 'many'\n"; })
                .find("metadata 'config' does not read"),
            std::string::npos);
  EXPECT_NE(error("init.safetensors", [](Edit& x) { x.tensors.push_back({"extra", {StDType::F32, {1}, std::vector<char>(4)}}); })
                .find("unknown tensor 'extra'"),
            std::string::npos);
  // A config naming a huge model (hash and all consistent) reaches the
  // caller's preflight before any model is allocated for the init check.
  {
    ConfigReader big = ConfigReader::from_string(exp_.config_toml, "cfg");
    big.set("model.channels", int64_t(1) << 20);
    const std::string toml = big.dump();
    const std::string hash = ConfigReader::from_string(toml, "h").config_hash();
    const fs::path d = dir_ / "huge";
    fs::create_directories(d);
    for (const char* f : {"init.safetensors", "batch.safetensors"})
      rewrite((e / f).string(), d / f, [&](Edit& x) {
        x.meta["config"] = toml;
        x.meta["config_hash"] = hash;
      });
    int64_t seen = 0;
    try {
      read_export(d.string(), [&](const TrainConfig& cfg) {
        seen = cfg.model.C;
        throw InputError("preflight: too big");
      });
      ADD_FAILURE() << "the huge export was read";
    } catch (const InputError& err) {
      EXPECT_EQ(std::string(err.what()), "preflight: too big");
    }
    EXPECT_EQ(seen, int64_t(1) << 20);
  }
  try {
    read_export((dir_ / "nowhere").string());
    ADD_FAILURE() << "a missing directory was read";
  } catch (const InputError& err) {
    EXPECT_NE(std::string(err.what()).find("is not a directory"), std::string::npos);
  }
}

// A mixture of experts: the export's trace carries every step's tokens per
// expert and load-balancing loss per MoE layer, and verify judges them when a
// trace has them (tokens exactly up to near ties, the aux loss by the rule).
class VerifyMoe : public Verify {
 protected:
  void SetUp() override {
    dir_ = scratch(std::string("moe_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    TrainConfig c = tiny(Precision::fp32);
    c.model = named_model("tiny-moe-local");
    exp_ = read_export(export_to(c, dir_ / "export"));
    golden_ = (dir_ / "export" / "trace.safetensors").string();
  }
  std::vector<std::string> failed(const std::function<void(Edit&)>& edit) {
    const std::string p = rewrite(golden_, dir_ / "edited.safetensors", edit);
    const ConformanceResult r = verify_trace(exp_, read_trace(p, exp_));
    std::vector<std::string> out;
    for (const auto& c : r.rule)
      if (!c.pass) out.push_back(c.quantity + "@" + std::to_string(c.step));
    return out;
  }
  int64_t& tokens(Edit& e, int step, int layer, int expert) {
    const auto& m = exp_.cfg.model;
    return reinterpret_cast<int64_t*>(e.find(kMoeTokens)->bytes.data())[(size_t(step) * m.moe_layers() + layer) *
                                                                          m.moe.experts + expert];
  }
};

TEST_F(VerifyMoe, TheExportsOwnTraceCarriesAndPassesTheMoeQuantities) {
  const ForeignTrace t = read_trace(golden_, exp_);
  const auto& m = exp_.cfg.model;
  ASSERT_EQ(t.moe_tokens.size(), 3u);
  ASSERT_EQ(t.moe_aux.size(), 3u);
  ASSERT_EQ(t.moe_tokens[0].size(), size_t(m.moe_layers()) * m.moe.experts);
  for (const auto& a : t.moe_aux[0]) EXPECT_GT(a, 0.0);  // coef x E x sum f P > 0
  VerifyDiagnosis why;
  const ConformanceResult r = verify_trace(exp_, t, {}, &why);
  int aux = 0, tok = 0;
  for (const auto& c : r.rule) {
    EXPECT_TRUE(c.pass) << c.quantity << "@" << c.step << " " << c.ratio;
    aux += c.quantity == "aux_loss";
    if (c.quantity == "moe_tokens") {
      ++tok;
      EXPECT_EQ(c.error, 0.0);  // the same choices as the truth
    }
  }
  EXPECT_EQ(aux, 3);
  EXPECT_EQ(tok, 3);
  EXPECT_FALSE(why.failed);
  // Without them (optional) the rest is judged alone.
  const std::string p = rewrite(golden_, dir_ / "plain.safetensors", [](Edit& e) {
    std::erase_if(e.tensors, [](const auto& kv) { return kv.first.rfind("moe.", 0) == 0; });
  });
  const ConformanceResult plain = verify_trace(exp_, read_trace(p, exp_));
  EXPECT_TRUE(plain.pass());
  for (const auto& c : plain.rule) EXPECT_TRUE(c.quantity != "aux_loss" && c.quantity != "moe_tokens");
}

TEST_F(VerifyMoe, WrongRoutingAndAuxLossFailNamingTheQuantityAndStep) {
  using V = std::vector<std::string>;
  // 8 choices of layer 0 moved from expert 0 to expert 1 at step 2: far
  // more than the fp32 truth's near ties (a margin within C x a 1e-7 floor).
  EXPECT_EQ(failed([&](Edit& e) {
              tokens(e, 1, 0, 0) -= 8;
              tokens(e, 1, 0, 1) += 8;
            }),
            V{"moe_tokens@2"});
  const int Lm = exp_.cfg.model.moe_layers();
  EXPECT_EQ(failed([&](Edit& e) { reinterpret_cast<double*>(e.find(kMoeAux)->bytes.data())[2 * Lm] *= 1.01; }),
            V{"aux_loss@3"});
  // The diagnosis names the routing first.
  const std::string p = rewrite(golden_, dir_ / "r.safetensors", [&](Edit& e) {
    tokens(e, 0, 0, 2) -= 3;
    tokens(e, 0, 0, 3) += 3;
  });
  VerifyDiagnosis why;
  verify_trace(exp_, read_trace(p, exp_), {}, &why);
  ASSERT_TRUE(why.failed);
  EXPECT_EQ(why.first.quantity, "moe_tokens");
  EXPECT_NE(why.text().find("3 choices routed to other experts"), std::string::npos) << why.text();
}

// Routing and the load-balancing loss are per capacity scope: the whole
// batch's trace declared as two data replicas (each its own scope, `local`
// capacity) is not that run's, and its aux loss fails.
TEST_F(VerifyMoe, TheTracesGroupingIsTheTruths) {
  const std::string p = rewrite(golden_, dir_ / "dp2.safetensors", [](Edit& e) { e.meta["mesh"] = "dp2.ep2"; });
  const ForeignTrace t = read_trace(p, exp_);
  EXPECT_EQ(t.mesh.ep, 2);
  bool aux_failed = false;
  for (const auto& c : verify_trace(exp_, t).rule) aux_failed |= c.quantity == "aux_loss" && !c.pass;
  EXPECT_TRUE(aux_failed);
}

TEST_F(VerifyMoe, MalformedMoeQuantitiesAreRefusedNamingWhat) {
  const auto& m = exp_.cfg.model;
  const int64_t S = 3, Lm = m.moe_layers(), E = m.moe.experts;
  auto reshape = [](const char* name, Shape shape) {
    return [name, shape](Edit& e) {
      Edit::T* t = e.find(name);
      t->shape = shape;
      t->bytes.resize(size_t(numel(shape)) * 8);  // I64 and F64
    };
  };
  const std::vector<std::pair<std::function<void(Edit&)>, std::string>> bad = {
      {reshape(kMoeTokens, {S, Lm + 1, E}), "'moe.tokens_per_expert' has shape"},
      {reshape(kMoeTokens, {S, Lm, E - 1}), "(steps 3, MoE layers " + std::to_string(Lm) + ", experts " +
                                                std::to_string(E)},
      {reshape(kMoeAux, {S, Lm + 1}), "'moe.aux_loss' has shape"},
      {[](Edit& e) { e.find(kMoeTokens)->dtype = StDType::F64; }, "expected I64"},
      {[&](Edit& e) { tokens(e, 2, 0, 1) += 1; }, "sums to"},
      {[&](Edit& e) {
         tokens(e, 0, 0, 0) = -1;
         tokens(e, 0, 0, 1) += 1;
       },
       "not a count"},
  };
  for (const auto& [edit, want] : bad) {
    const std::string msg = trace_error(edit);
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
    EXPECT_NE(msg.find("edited.safetensors"), std::string::npos) << msg;
  }
  // The MoE quantities are format v2's: a v1 trace carrying them is refused.
  const std::string v1 = trace_error([](Edit& e) { e.meta["format"] = kTraceFormatV1; });
  EXPECT_NE(v1.find("has no MoE quantities"), std::string::npos) << v1;
}

// The llama family's mixture of experts (SwiGLU experts, Mixtral's layout)
// exports and verifies the same way.
TEST_F(Verify, TinyMixtralsTraceCarriesAndPassesTheMoeQuantities) {
  TrainConfig c = tiny(Precision::fp32);
  c.model = named_model("tiny-mixtral");
  const ExportDir e = read_export(export_to(c, dir_ / "mixtral"));
  const ForeignTrace t = read_trace((dir_ / "mixtral" / "trace.safetensors").string(), e);
  ASSERT_EQ(t.moe_tokens.size(), 3u);
  const ConformanceResult r = verify_trace(e, t);
  int moe = 0;
  for (const auto& q : r.rule) {
    EXPECT_TRUE(q.pass) << q.quantity << "@" << q.step;
    moe += q.quantity == "aux_loss" || q.quantity == "moe_tokens";
  }
  EXPECT_EQ(moe, 6);
}

TEST_F(Verify, MoeQuantitiesInADenseTraceAreUnknown) {
  const std::string msg = trace_error([](Edit& e) {
    const int64_t one = 1;
    Edit::T t{StDType::I64, {3, 1, 1}, std::vector<char>(3 * sizeof one)};
    e.tensors.push_back({kMoeTokens, t});
  });
  EXPECT_NE(msg.find("unknown tensor 'moe.tokens_per_expert'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace pb
