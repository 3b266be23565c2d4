// The strategies' fault declarations (impl/spec/fault.h): every declared
// fault has a name, what it breaks and where it applies; a name means one
// fault whichever strategy declares it; a spec's fault names are resolved once
// by the parser (a wrong one refused naming every declared one by axis) and
// checked against its strategy's declarations where the strategy is found.
#include "impl/registry.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "harness/io/config.h"
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
  EXPECT_EQ(seen.size(), 46u);  // 12 data-parallel, 7 MoE, 10 tensor, 7 context, 10 pipeline
}

// Each axis prints and reads its typed faults by their declared names.
TEST(Registry, AxesPrintTheirFaultsByTheDeclaredNames) {
  for (const FaultDecl& d : dp::fault_decls()) EXPECT_EQ(dp::fault_name(dp::Fault(d.value)), d.name);
  for (const FaultDecl& d : tp::fault_decls()) EXPECT_EQ(tp::fault_name(tp::Fault(d.value)), d.name);
  for (const FaultDecl& d : cp::fault_decls()) EXPECT_EQ(cp::fault_name(cp::Fault(d.value)), d.name);
  for (const FaultDecl& d : ep::moe_fault_decls()) EXPECT_EQ(ep::moe_fault_name(MoeFault(d.value)), d.name);
  RunSpec s;
  s.faults = parse_faults(fault_catalogue(), "no_copy_back+skip_bucket+bias_tp_times+moe_aux_per_rank", "faults");
  EXPECT_EQ(dp::faults_of(s.faults), (std::set<dp::Fault>{dp::Fault::no_copy_back, dp::Fault::skip_bucket}));
  EXPECT_EQ(ep::moe_faults_of(s.faults), std::set<MoeFault>{MoeFault::aux_per_rank});
}

// The catalogue the parser resolves names against holds every strategy's
// declarations, each axis's rows together, one row per name.
TEST(Registry, TheCatalogueHoldsEveryDeclaration) {
  std::map<std::string, const FaultDecl*> rows;
  const FaultCatalogue cat = fault_catalogue();
  for (size_t i = 0; i < cat.size(); ++i) {
    EXPECT_TRUE(rows.emplace(std::string(cat[i].name), &cat[i]).second) << cat[i].name << " twice";
    for (size_t j = 0; j + 1 < i; ++j)  // an axis's rows stand together (the messages list them by axis)
      EXPECT_FALSE(cat[j].axis == cat[i].axis && cat[j + 1].axis != cat[i].axis) << cat[i].name;
  }
  for (const Strategy* st : strategies())
    for (const FaultDecl& f : st->faults) {
      ASSERT_TRUE(rows.count(std::string(f.name))) << st->name << ": " << f.name << " not in the catalogue";
      EXPECT_EQ(rows[std::string(f.name)]->axis, f.axis) << f.name;
      EXPECT_EQ(rows[std::string(f.name)]->value, f.value) << f.name;
    }
  EXPECT_EQ(rows.size(), 46u);
}

// A name is resolved when the spec is parsed: an unknown one is refused
// there, naming every declared fault by axis; strategy_for refuses a fault
// its strategy does not declare, naming the ones it does.
TEST(Registry, FaultNamesAreResolvedAtParseAndCheckedAgainstTheStrategy) {
  RunSpec s;
  s.mesh.dp = 2;
  apply_strategy_text(s, "faults=skip_bucket", fault_catalogue(), "--strategy");
  ASSERT_EQ(s.faults.size(), 1u);
  EXPECT_EQ(s.faults[0]->axis, FaultAxis::data);
  EXPECT_EQ(dp::Fault(s.faults[0]->value), dp::Fault::skip_bucket);
  EXPECT_EQ(strategy_for(s).name, "data_parallel");
  try {
    apply_strategy_text(s, "faults=bogus", fault_catalogue(), "--strategy");
    ADD_FAILURE() << "accepted an undeclared fault";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--strategy.faults: unknown fault 'bogus'"), std::string::npos) << m;
    EXPECT_NE(m.find("data-parallel faults: grad_not_averaged, skip_bucket"), std::string::npos) << m;
    EXPECT_NE(m.find("mixture-of-experts faults: moe_local_capacity"), std::string::npos) << m;
    EXPECT_NE(m.find("tensor-parallel faults: bias_tp_times"), std::string::npos) << m;
    EXPECT_NE(m.find("pipeline faults: skip_microbatch"), std::string::npos) << m;
  }
  ConfigReader r = ConfigReader::from_string("[strategy]\nmesh = 'dp2'\nfaults = ['skip_buckets']\n");
  try {
    read_run_spec(r, fault_catalogue());
    ADD_FAILURE() << "accepted an undeclared fault";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("strategy.faults: unknown fault 'skip_buckets' (data-parallel faults: "),
              std::string::npos)
        << e.what();
  }
  s.mesh = MeshShape{1, 2, 1, 1, 0};
  s.faults = parse_faults(fault_catalogue(), "drop_w", "faults");  // the pipeline's, not tensor parallel's
  try {
    strategy_for(s);
    ADD_FAILURE() << "accepted a pipeline fault on tensor parallel";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("strategy.faults: 'drop_w' is not a fault of the tensor_parallel strategy"), std::string::npos)
        << m;
    EXPECT_NE(m.find("tensor-parallel faults: bias_tp_times"), std::string::npos) << m;
    EXPECT_EQ(m.find("pipeline faults"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace pb
