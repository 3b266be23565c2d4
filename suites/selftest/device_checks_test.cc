// The selftest's device checks, run here on stand-in devices: one whose ops
// are the CPU's (every output identical, every buffer reached only through
// the seam: the stand-in's memory faults on any other access), and one with
// a deliberate bug that the checks must name.
#include "suites/selftest/device_checks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "reference/device_testing.h"

namespace pb::selftest {
namespace {

using testing::CountingMemory;
using testing::StandInOps;

TEST(SelftestDevice, AStandInWithTheCpusOpsMatchesExactlyThroughGuardedMemory) {
  testing::StandInDevices devices(/*guarded=*/true);
  const std::shared_ptr<TrainDevice> dev = devices.open();
  const std::vector<DeviceCheck> checks = check_device_ops(*dev);
  std::map<std::string, std::set<std::string>> shapes;  // op -> shapes
  int f32 = 0, b16 = 0;
  for (const DeviceCheck& c : checks) {
    EXPECT_TRUE(c.pass) << c.op << " " << c.shape;
    EXPECT_EQ(c.error, 0.0) << c.op << " " << c.shape << ": the same kernels on the same inputs";
    EXPECT_EQ(c.tolerance, device_tolerance(c.match, c.dtype));
    shapes[c.op].insert(c.shape);
    (c.dtype == DType::f32 ? f32 : b16) += c.dtype == DType::f32 || c.dtype == DType::bf16;
  }
  EXPECT_EQ(f32, b16);
  EXPECT_EQ(f32 + b16, int(checks.size()));
  // Every op of the seam (kernels/common/device_ops.h), each output, and
  // the shapes that cross the CUDA kernels' tiles.
  for (const char* op :
       {"copy", "zero", "encoder_forward", "encoder_backward.dwte", "encoder_backward.dwpe", "layernorm_forward.out",
        "layernorm_forward.mean", "layernorm_forward.rstd", "layernorm_backward.dinp", "layernorm_backward.dweight",
        "layernorm_backward.dbias", "matmul_forward", "matmul_backward.dinp", "matmul_backward.dweight",
        "matmul_backward.dbias", "matmul_backward.dbias (null: untouched)", "attention_forward.out", "attention_forward.att", "attention_backward.datt",
        "attention_backward.dqkv", "attention_block_forward.o", "attention_block_forward.m",
        "attention_block_forward.l", "attention_block_merge.o", "attention_block_finalize.out",
        "attention_block_finalize.lse", "attention_block_backward.dq", "attention_block_backward.dk",
        "attention_block_backward.dv", "attention_row_dot", "gelu_forward", "gelu_backward", "residual_forward",
        "accumulate", "fill_acc", "accumulate_acc", "copy_rows", "accumulate_rows", "accumulate_rows_acc",
        "crossentropy_forward.losses", "crossentropy_forward.probs", "crossentropy_forward.probs in place",
        "crossentropy_backward", "embedding_lookup", "add_rows", "add_rows (bias)", "add_rows_backward",
        "add_rows_backward (bias)", "vocab_logit_max", "vocab_sum_exp.sum", "vocab_sum_exp.target_logit",
        "vocab_softmax_loss.losses", "vocab_softmax_loss.probs", "vocab_crossentropy_backward", "moe_scatter_rows",
        "moe_combine (weighted)", "moe_combine (accumulated)", "moe_combine_backward.dy",
        "moe_combine_backward.dw", "adamw_step.master", "adamw_step.m", "adamw_step.v", "adamw_step.params",
        "sum_squares", "sum"})
    EXPECT_TRUE(shapes.count(op)) << op;
  EXPECT_TRUE(shapes["attention_forward.out"].count("B=1 T=300 C=128 NH=2 (hs 64)"));
  EXPECT_TRUE(shapes["attention_block_backward.dq"].count("Tq=Tk=150 hs=64 causal"));
  EXPECT_TRUE(shapes["layernorm_backward.dinp"].count("N=6 C=1600"));
  EXPECT_TRUE(shapes["crossentropy_backward"].count("N=4 V=50257"));
  EXPECT_TRUE(shapes["attention_block_backward.dk"].count("Tq=Tk=40 hs=192 full"));
  for (const auto& [op, s] : shapes) {
    if (op == "copy" || op == "zero") continue;
    EXPECT_GE(s.size(), 2u) << op << ": two shapes at least";
  }
  // Nothing left allocated on the device.
  for (const auto& m : devices.memories()) EXPECT_EQ(m->live(), 0u);
}

// A device whose LayerNorm backward drops dbias (a skipped output), whose
// blockwise attention ignores the causal mask in the backward, and whose
// cross-entropy backward drops the softmax term (small next to the one-hot
// term): those outputs, and only those, fail.
template <class T>
class Wrong final : public StandInOps<T> {
 public:
  using A = typename StandInOps<T>::A;
  void layernorm_backward(T* di, T* dw, T*, const T* d, const T* i, const T* w, const A* m, const A* r, int N,
                          int C) const override {
    StandInOps<T>::layernorm_backward(di, dw, nullptr, d, i, w, m, r, N, C);
  }
  void attention_block_backward(A* dq, A* dk, A* dv, const T* q, const T* k, const T* v, const T* d, const A* lse,
                                const A* D, int Tq, int Tk, int hs, int qs, int kvs, int ds, int q0, int k0,
                                bool) const override {
    StandInOps<T>::attention_block_backward(dq, dk, dv, q, k, v, d, lse, D, Tq, Tk, hs, qs, kvs, ds, q0, k0, false);
  }
  void crossentropy_backward(T* d, const T*, const int32_t* t, double s, int N, int V) const override {
    const std::vector<T> no_probs(size_t(N) * V, cast<T>(0.0));
    StandInOps<T>::crossentropy_backward(d, no_probs.data(), t, s, N, V);
  }
};

TEST(SelftestDevice, AWrongDeviceIsNamedOpByOp) {
  TrainDevice dev;
  dev.name = "wrong stand-in";
  dev.f32 = std::make_shared<Wrong<float>>();
  dev.bf16_ops = std::make_shared<Wrong<bf16>>();
  dev.memory = std::make_shared<CountingMemory>();
  std::set<std::string> failed;
  for (const DeviceCheck& c : check_device_ops(dev)) {
    if (c.pass) continue;
    failed.insert(c.op + " " + c.shape);
    EXPECT_GT(c.error, 2 * c.tolerance) << c.op << " " << c.shape << ": a wrong result is well outside";
  }
  const std::string table = device_check_table(check_device_ops(dev));
  EXPECT_NE(table.find("layernorm_backward.dbias"), std::string::npos) << table;
  EXPECT_NE(table.find("FAIL layernorm_backward.dbias at bf16, N=6 C=1600: error "), std::string::npos) << table;
  std::set<std::string> expected = {"layernorm_backward.dbias N=37 C=300", "layernorm_backward.dbias N=6 C=1600",
                                     "crossentropy_backward N=64 V=7", "crossentropy_backward N=13 V=1000 accumulating",
                                     "crossentropy_backward N=4 V=50257"};
  for (const char* shape : {"Tq=Tk=20 hs=16 causal", "Tq=Tk=150 hs=64 causal", "Tq=Tk=40 hs=192 causal"})
    for (const char* out : {"dq", "dk", "dv"})
      expected.insert(std::string("attention_block_backward.") + out + " " + shape);
  EXPECT_EQ(failed, expected);
  EXPECT_NE(table.find("FAIL crossentropy_backward at bf16, N=64 V=7: error "), std::string::npos) << table;
}

TEST(SelftestDevice, TolerancesAreStated) {
  EXPECT_EQ(device_tolerance(Match::exact, DType::bf16), 0.0);
  EXPECT_DOUBLE_EQ(device_tolerance(Match::stat, DType::bf16), 128 * 1.1920928955078125e-07);
  EXPECT_DOUBLE_EQ(device_tolerance(Match::storage, DType::f32), 128 * 1.1920928955078125e-07);
  EXPECT_DOUBLE_EQ(device_tolerance(Match::storage, DType::bf16), 2 * 0.0078125);
  EXPECT_DOUBLE_EQ(device_tolerance(Match::total, DType::f32), 1e-12);
}

}  // namespace
}  // namespace pb::selftest
