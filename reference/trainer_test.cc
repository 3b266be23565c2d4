#include "reference/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "harness/status.h"
#include "reference/runner.h"

namespace pb {
namespace {

TrainConfig tiny(Precision p, int steps = 8) {
  TrainConfig c;
  c.model = named_model("tiny");
  c.precision = p;
  c.steps = steps;
  c.batch = 8;
  c.seq = 16;
  c.optim.lr = 3e-3;
  c.optim.min_lr = 3e-4;
  return c;
}

std::vector<StepStats> train(TrainerBase& t, int steps) {
  std::vector<StepStats> out;
  for (int i = 0; i < steps; ++i) out.push_back(t.step());
  return out;
}

double max_rel_gap(const std::vector<StepStats>& a, const std::vector<StepStats>& b) {
  double g = 0;
  for (size_t i = 0; i < a.size(); ++i)
    g = std::max(g, std::abs(a[i].loss - b[i].loss) / std::abs(b[i].loss));
  return g;
}

// The declared workspace (what the planner reports) is what a runner allocates.
template <class T>
void expect_workspace_declared(const char* model, int Bm, int Tn, Precision p) {
  const ModelConfig m = named_model(model);
  const ParamLayout layout(m);
  const MarkovSource data(m.V, 1);
  MemoryTracker mt;
  MicrobatchRunner<T> runner(layout, data, &mt, Bm, Tn);
  EXPECT_EQ(int64_t(mt.peak(MemTag::workspace)), runner_workspace_bytes(m, Bm, Tn, p))
      << model << " " << precision_name(p) << " Bm " << Bm << " T " << Tn;
}

TEST(ReferenceRunner, WorkspaceIsDeclared) {
  expect_workspace_declared<double>("tiny", 2, 16, Precision::fp64);
  expect_workspace_declared<float>("tiny", 8, 16, Precision::fp32);
  expect_workspace_declared<float>("small", 3, 64, Precision::fp32);
  expect_workspace_declared<bf16>("small", 2, 40, Precision::bf16_mixed);
  expect_workspace_declared<bf16>("wide", 1, 128, Precision::bf16_mixed);
}

TEST(ReferenceTrainer, Fp32AndBf16TrackTheFp64Truth) {
  const int steps = 12;
  auto truth = make_reference_trainer(tiny(Precision::fp64, steps));
  auto f32 = make_reference_trainer(tiny(Precision::fp32, steps));
  auto b16 = make_reference_trainer(tiny(Precision::bf16_mixed, steps));
  auto t = train(*truth, steps), a = train(*f32, steps), b = train(*b16, steps);
  double gap32 = max_rel_gap(a, t), gap16 = max_rel_gap(b, t);
  RecordProperty("fp32_max_rel_loss_gap", std::to_string(gap32));
  RecordProperty("bf16_max_rel_loss_gap", std::to_string(gap16));
  // fp32 carries ~7 digits; over 12 steps of Adam the loss gap stays tiny.
  EXPECT_LT(gap32, 1e-5);
  EXPECT_GT(gap32, 0.0);  // it is a different precision, not the same run
  // bf16 has 8 mantissa bits (eps 2^-8): a gap of a few percent at most.
  EXPECT_LT(gap16, 3e-2);
  EXPECT_GT(gap16, gap32);
}

TEST(ReferenceTrainer, TwoRunsAreBitwiseIdenticalAndSeedsDiffer) {
  for (Precision p : {Precision::fp32, Precision::bf16_mixed, Precision::fp64}) {
    auto c = tiny(p, 4);
    auto x = make_reference_trainer(c), y = make_reference_trainer(c);
    auto sx = train(*x, 4), sy = train(*y, 4);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(sx[i].loss, sy[i].loss);
    EXPECT_EQ(x->params_f64(), y->params_f64());
    c.seed += 1;
    auto z = make_reference_trainer(c);
    auto sz = train(*z, 4);
    EXPECT_NE(sz[0].loss, sx[0].loss);
    EXPECT_NE(z->params_f64(), x->params_f64());
  }
}

TEST(ReferenceTrainer, LossFallsTowardTheEntropyFloor) {
  TrainConfig c = tiny(Precision::fp32, 150);
  c.batch = 16;
  c.optim.lr = 1e-2;
  c.optim.min_lr = 1e-3;
  c.optim.warmup = 10;
  c.optim.weight_decay = 0.0;
  MarkovSource src(c.model.V, c.data.seed, c.data.branching, c.data.mix);
  const double floor = src.entropy_rate(), start = std::log(double(c.model.V));
  auto t = make_reference_trainer(c);
  auto s = train(*t, c.steps);
  double first = s.front().loss, last = 0;
  for (int i = c.steps - 10; i < c.steps; ++i) last += s[i].loss / 10;
  RecordProperty("entropy_floor", std::to_string(floor));
  RecordProperty("final_loss", std::to_string(last));
  EXPECT_NEAR(first, start, 0.1);  // uniform predictions at init
  // Within 150 steps the loss closes 90% of the gap between log V and the floor.
  EXPECT_LT(last - floor, 0.1 * (start - floor)) << "floor " << floor << " last " << last;
  EXPECT_GT(last, floor - 0.05);  // nothing beats the entropy rate (up to sampling noise)
}

TEST(ReferenceTrainer, ModelStateMemoryIsExactlyTheZeroAccounting) {
  struct Case { Precision p; size_t param, grad, opt; };
  for (auto cs : {Case{Precision::fp32, 4, 4, 8}, Case{Precision::bf16_mixed, 2, 2, 12},
                  Case{Precision::fp64, 8, 8, 16}}) {
    auto c = tiny(cs.p, 1);
    auto t = make_reference_trainer(c);
    t->step();
    const size_t n = size_t(c.model.num_params());
    const auto& m = t->memory();
    EXPECT_EQ(m.peak(MemTag::params), cs.param * n) << precision_name(cs.p);
    EXPECT_EQ(m.peak(MemTag::grads), cs.grad * n) << precision_name(cs.p);
    EXPECT_EQ(m.peak(MemTag::optimizer), cs.opt * n) << precision_name(cs.p);
    EXPECT_GT(m.peak(MemTag::activations), 0u);
  }
}

TEST(ReferenceTrainer, SplitPlanKeepsTheMathAndRejectsBadSplits) {
  auto c = tiny(Precision::fp64, 2);
  auto whole = make_reference_trainer(c);
  SplitPlan plan;
  plan.groups = 2;
  plan.micro = 2;
  plan.separate_head_grad = true;
  plan.norm_parts = {{{0, 1000}}, {{1000, 2000}, {2000, c.model.num_params()}}};
  auto split = make_reference_trainer(c, plan);
  auto a = train(*whole, 2), b = train(*split, 2);
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(a[i].loss, b[i].loss, 1e-12);
  auto pa = whole->params_f64(), pb = split->params_f64();
  for (size_t i = 0; i < pa.size(); ++i) ASSERT_NEAR(pa[i], pb[i], 1e-10) << i;
  plan.groups = 3;
  EXPECT_THROW(make_reference_trainer(c, plan), InputError);
}

TEST(TrainConfig, RejectsBadValuesNamingTheField) {
  auto expect_field = [](TrainConfig c, const char* field) {
    try {
      c.validate();
      ADD_FAILURE() << field << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  auto c = tiny(Precision::fp32);
  c.steps = 0;
  expect_field(c, "train.steps");
  c = tiny(Precision::fp32);
  c.seq = 1000;
  expect_field(c, "train.seq");
  c = tiny(Precision::fp32);
  c.microbatches = 3;
  expect_field(c, "train.microbatches");
  c = tiny(Precision::fp32);
  c.optim.lr = -1;
  expect_field(c, "optim.lr");
  EXPECT_THROW(parse_precision("fp8"), InputError);
}

}  // namespace
}  // namespace pb
