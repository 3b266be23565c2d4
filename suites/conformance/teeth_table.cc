// Prints the catch table (suites/conformance/teeth.h) as markdown: every
// injected fault of every strategy at fp32 and bf16-mixed, and which checks
// caught it. docs/numerics.md#the-teeth-table is this program's output.
// `teeth_table moe` / `teeth_table tp`: the mixture-of-experts or the
// tensor-parallel block alone.
#include <cstdio>
#include <exception>
#include <string>

#include "suites/conformance/teeth.h"

int main(int argc, char** argv) {
  try {
    const bool moe_only = argc > 1 && std::string(argv[1]) == "moe";
    const bool tp_only = argc > 1 && std::string(argv[1]) == "tp";
    if (argc > 2 || (argc == 2 && !moe_only && !tp_only)) {
      std::fprintf(stderr, "teeth_table: unknown argument (usage: teeth_table [moe|tp])\n");
      return 2;
    }
    std::vector<pb::FaultCatch> dp, pipe, tp, cp, moe;
    for (pb::Precision p : {pb::Precision::fp32, pb::Precision::bf16_mixed}) {
      if (moe_only) {
        for (auto& c : pb::moe_fault_catches(p)) moe.push_back(std::move(c));
        continue;
      }
      if (tp_only) {
        for (auto& c : pb::tp_fault_catches(p)) tp.push_back(std::move(c));
        continue;
      }
      for (auto& c : pb::dp_fault_catches(p)) dp.push_back(std::move(c));
      for (auto& c : pb::pipeline_fault_catches(p)) pipe.push_back(std::move(c));
      for (auto& c : pb::tp_fault_catches(p)) tp.push_back(std::move(c));
      for (auto& c : pb::cp_fault_catches(p)) cp.push_back(std::move(c));
      for (auto& c : pb::moe_fault_catches(p)) moe.push_back(std::move(c));
    }
    if (moe_only || tp_only) {
      const auto& rows = moe_only ? moe : tp;
      std::printf("%s", pb::catch_table_markdown(rows).c_str());
      for (const auto& c : rows)
        if (!c.caught()) return 1;
      return 0;
    }
    std::printf("%s\n%s\n%s\n%s\n%s", pb::catch_table_markdown(dp).c_str(), pb::catch_table_markdown(pipe).c_str(),
                pb::catch_table_markdown(tp).c_str(), pb::catch_table_markdown(cp).c_str(),
                pb::catch_table_markdown(moe).c_str());
    for (const auto* rows : {&dp, &pipe, &tp, &cp, &moe})
      for (const auto& c : *rows)
        if (!c.caught()) return 1;
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "teeth_table: %s\n", e.what());
    return 2;
  }
}
