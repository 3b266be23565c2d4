// The strategies' fault declarations (impl/spec/fault.h): every declared
// fault has a name, what it breaks and where it applies; a name means one
// fault whichever strategy declares it; a spec's fault names are checked once
// where its strategy is found, a wrong one refused naming the declared ones
// by axis, a declared one accepted.
#include "impl/registry.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "harness/status.h"
#include "impl/context_parallel/options.h"
#include "impl/data_parallel/options.h"
#include "impl/expert_parallel/faults.h"
#include "impl/tensor_parallel/options.h"

namespace pb {
namespace {

TEST(Registry, EveryStrategyDeclaresItsFaultsOnce) {
  std::map<std::string, std::pair<FaultAxis, uint8_t>> seen;
  for (const Strategy* st : strategies()) {
    EXPECT_FALSE(st->faults.empty()) << st->name;
    std::map<std::string, int> here;
    for (const FaultDecl& f : st->faults) {
      EXPECT_EQ(++here[std::string(f.name)], 1) << st->name << " declares " << f.name << " twice";
      EXPECT_FALSE(f.breaks.empty()) << f.name;
      EXPECT_NE(f.applies, nullptr) << f.name;
      const auto it = seen.emplace(std::string(f.name), std::pair{f.axis, f.value}).first;
      EXPECT_EQ(it->second, (std::pair{f.axis, f.value})) << f.name << " means two faults";
    }
  }
  EXPECT_EQ(seen.size(), 30u);  // 9 data-parallel, 5 MoE, 6 tensor, 6 context, 4 pipeline
}

// Each axis prints and reads its typed faults by their declared names.
TEST(Registry, AxesPrintTheirFaultsByTheDeclaredNames) {
  for (const FaultDecl& d : dp::fault_decls()) EXPECT_EQ(dp::fault_name(dp::Fault(d.value)), d.name);
  for (const FaultDecl& d : tp::fault_decls()) EXPECT_EQ(tp::fault_name(tp::Fault(d.value)), d.name);
  for (const FaultDecl& d : cp::fault_decls()) EXPECT_EQ(cp::fault_name(cp::Fault(d.value)), d.name);
  for (const FaultDecl& d : ep::moe_fault_decls()) EXPECT_EQ(ep::moe_fault_name(MoeFault(d.value)), d.name);
  RunSpec s;
  s.faults = {"no_copy_back", "skip_bucket", "bias_tp_times", "moe_aux_per_rank"};
  EXPECT_EQ(dp::faults_of(s.faults), (std::set<dp::Fault>{dp::Fault::no_copy_back, dp::Fault::skip_bucket}));
  EXPECT_EQ(ep::moe_faults_of(s.faults), std::set<MoeFault>{MoeFault::aux_per_rank});
}

TEST(Registry, FaultNamesAreCheckedAgainstTheDeclarations) {
  RunSpec s;
  s.mesh.dp = 2;
  s.faults = {"skip_bucket"};
  EXPECT_EQ(strategy_for(s).name, "data_parallel");
  s.faults = {"bogus"};
  try {
    strategy_for(s);
    ADD_FAILURE() << "accepted an undeclared fault";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("strategy.faults: unknown fault 'bogus'"), std::string::npos) << m;
    EXPECT_NE(m.find("data-parallel faults: grad_not_averaged, skip_bucket"), std::string::npos) << m;
    EXPECT_NE(m.find("mixture-of-experts faults: moe_local_capacity"), std::string::npos) << m;
    EXPECT_EQ(m.find("tensor-parallel"), std::string::npos) << m;  // not data parallel's
  }
  s.mesh = MeshShape{1, 2, 1, 1, 0};
  s.faults = {"drop_w"};  // the pipeline's, not tensor parallel's
  try {
    strategy_for(s);
    ADD_FAILURE() << "accepted a pipeline fault on tensor parallel";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor-parallel faults: bias_tp_times"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pb
