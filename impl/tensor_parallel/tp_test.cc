// The tensor-parallel shard of the model: its init is the full model's,
// element for element; its vocabulary padding stays zero through training;
// the activation bytes it allocates are the ones cost.h declares, for every
// recompute mode with and without sequence parallel.
#include <gtest/gtest.h>

#include <mutex>

#include "harness/comm/runner.h"
#include "harness/status.h"
#include "impl/tensor_parallel/cost.h"
#include "impl/tensor_parallel/strategy.h"
#include "impl/tensor_parallel/tp_rank.h"
#include "reference/init.h"

namespace pb::tp {
namespace {

// tiny-llama: kv heads split at tp 2, replicated at tp 4 (kv_heads 2 < tp);
// tiny-mixtral: every expert's w1/w3 rows and w2 columns split too.
TEST(TpLayout, ShardedInitEqualsFullInit) {
 for (const char* name : {"tiny-tp", "tiny-llama", "tiny-mixtral"}) {
  const ModelConfig m = named_model(name);
  const ParamLayout full(m);
  std::vector<double> want(size_t(full.total()));
  init_params<double>(full, 7, 0, full.total(), want.data());
  for (int tp : {1, 2, 3, 4}) {
    if (m.NH % tp) continue;
    std::vector<int> seen(size_t(full.total()), 0);
    for (int r = 0; r < tp; ++r) {
      const ParamLayout l(m, tp, r);
      EXPECT_EQ(l.num_units(), full.num_units());
      std::vector<double> got(size_t(l.total()));
      init_params<double>(l, 7, 0, l.total(), got.data());
      for (size_t i = 0; i < l.params().size(); ++i) {
        const ParamInfo& p = l.params()[i];
        const ParamInfo& f = full.params()[i];
        ASSERT_EQ(p.name, f.name);
        for (int64_t e = 0; e < p.numel; ++e) {
          const int64_t j = p.replicated ? e : p.full_index(e);
          if (j < 0) {  // vocabulary padding
            EXPECT_EQ(got[size_t(p.offset + e)], 0.0) << p.name;
            continue;
          }
          ASSERT_LT(j, f.numel) << p.name;
          EXPECT_EQ(got[size_t(p.offset + e)], want[size_t(f.offset + j)]) << p.name << " tp" << tp << " r" << r;
          if (!p.replicated || r == 0) seen[size_t(f.offset + j)]++;
        }
      }
    }
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << name << " full element " << i << " tp" << tp;
  }
 }
}

// The declared per-rank unit sizes (model-state bytes, the planner's too) are
// the shard layout's, and the replicated count is what the layout marks.
TEST(TpLayout, DeclaredUnitSizesAreTheLayouts) {
  for (const char* name : {"tiny", "tiny-tp", "small", "tiny-llama", "tiny-mixtral"}) {
    for (int tp : {1, 2, 3, 4}) {
      const ModelConfig m = named_model(name);
      if (m.NH % tp) continue;
      const auto declared = unit_params(m, tp);
      for (int r = 0; r < tp; ++r) {
        const ParamLayout l(m, tp, r);
        ASSERT_EQ(declared.size(), size_t(l.num_units()));
        int64_t replicated = 0;
        for (const auto& p : l.params()) replicated += p.replicated ? p.numel : 0;
        for (int u = 0; u < l.num_units(); ++u) {
          EXPECT_EQ(declared[size_t(u)], l.unit_size(u)) << name << " tp" << tp;
        }
        if (tp > 1 && !m.llama()) {  // (the llama family's: its RMSNorms, and k/v when kv_heads < tp)
          EXPECT_EQ(replicated, replicated_params(m)) << name << " tp" << tp;
        }
      }
    }
  }
}

TEST(TpLayout, HeadsNotDividedByTpNameBothNumbers) {
  try {
    ParamLayout l(named_model("tiny-tp"), 5, 0);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tp5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("12"), std::string::npos) << e.what();
  }
}

RunSpec spec(int dp, int tp, bool sp, Recompute r, dp::Shard shard = dp::Shard::none) {
  RunSpec s;
  s.train.model = named_model("tiny-tp");
  s.train.batch = 2 * dp;
  s.train.seq = 12;
  s.train.steps = 3;
  s.train.microbatches = 1;
  s.mesh.dp = dp;
  s.mesh.tp = tp;
  s.tensor.sp = sp;
  s.tensor.recompute = r;
  s.data.shard = shard;
  return s;
}

TEST(TpRank, VocabularyPaddingNeverTouchesParamsOrGrads) {
  for (auto shard : {dp::Shard::none, dp::Shard::zero3}) {
    const RunSpec s = spec(2, 3, false, Recompute::none, shard);  // V = 67: tp3 pads 2 rows
    std::mutex mu;
    double worst = 0;
    run_local(s.world(), [&](Communicator& c) {
      TpRank<float> r(s, c);
      for (int i = 0; i < s.train.steps; ++i) r.step();
      const double p = r.padding_max_abs(false), g = r.padding_max_abs(true);
      std::lock_guard lk(mu);
      worst = std::max({worst, p, g});
    });
    EXPECT_EQ(worst, 0.0);
  }
}

TEST(TpRank, ActivationBytesEqualDeclaredForEveryRecomputeAndSp) {
  for (bool sp : {false, true})
    for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
      const RunSpec s = spec(1, 2, sp, r);
      std::mutex mu;
      std::vector<int64_t> measured, measured_ws;
      run_local(s.world(), [&](Communicator& c) {
        TpRank<bf16> rank(RunSpec{s}, c);
        rank.step();
        std::lock_guard lk(mu);
        measured.push_back(int64_t(rank.memory().peak(MemTag::activations)));
        measured_ws.push_back(int64_t(rank.memory().peak(MemTag::workspace)));
      });
      RunSpec b = s;
      b.train.precision = Precision::bf16_mixed;
      const int64_t declared = activation_bytes(tp_shape(b));
      for (int64_t m : measured) EXPECT_EQ(m, declared) << "sp " << sp << " recompute " << recompute_name(r);
      // The workspace the planner declares is what the rank allocates.
      const int64_t ws = runner_workspace_bytes(s.train.model, options_of(s), s.train.batch / s.mesh.dp, s.train.seq,
                                                Precision::bf16_mixed);
      for (int64_t m : measured_ws) EXPECT_EQ(m, ws) << "workspace, sp " << sp << " recompute " << recompute_name(r);
    }
}

}  // namespace
}  // namespace pb::tp
