#include "impl/expert_parallel/faults.h"

#include "harness/status.h"
#include "impl/spec/run_spec.h"

namespace pb::ep {

namespace {
bool moe(const RunSpec& s) { return s.train.model.moe.experts > 0; }
// The capacity scope spans data ranks: global capacity over dp >= 2; or the
// cp ranks sharing a data rank's microbatch (either capacity mode).
bool shared(const RunSpec& s) {
  return moe(s) && ((s.train.model.moe.capacity == MoeCapacity::global && s.mesh.dp > 1) || s.mesh.cp > 1);
}
// Local capacity differs from global only where a choice can be dropped: a
// capacity factor of at least E / top_k admits every token's choices
// (tiny-mixtral's), so the fault changes nothing there.
bool capacity_bites(const RunSpec& s) {
  const MoeConfig& c = s.train.model.moe;
  return shared(s) && c.capacity_factor * c.top_k < c.experts;
}
// The missing router gradient moves a rule-only local-capacity expert-parallel
// run by only ~1.5x the floor in three steps (the expert outputs it weighs
// are near each other at init): it bites under global capacity, and under
// data parallel's local capacity (bitwise there).
bool router_bites(const RunSpec& s) {
  return moe(s) && (s.train.model.moe.capacity == MoeCapacity::global || s.mesh.ep == 1);
}
bool expert_parallel(const RunSpec& s) { return moe(s) && s.mesh.ep > 1; }
// Full recompute reruns the MoE block's forward (routing and its aux term).
bool full_recompute(const RunSpec& s) { return moe(s) && s.tensor.recompute == Recompute::full; }
}  // namespace

std::span<const FaultDecl> moe_fault_decls() {
  using enum MoeFault;
  constexpr FaultAxis M = FaultAxis::moe;
  static const FaultDecl d[] = {
      {"moe_local_capacity", M, uint8_t(local_capacity),
       "global capacity computed and admitted over this rank's tokens alone", capacity_bites},
      {"moe_aux_per_rank", M, uint8_t(aux_per_rank),
       "the load-balancing loss's f and P over this rank's tokens, not the scope's", shared},
      {"moe_router_grad_missing", M, uint8_t(router_grad_missing),
       "no gradient to the router through the top-k weights (only the aux's)", router_bites},
      {"ep_combine_permuted", M, uint8_t(ep_combine_permuted),
       "expert parallel: each expert's returned rows land on its tokens in reverse order", expert_parallel},
      {"ep_expert_grads_dp", M, uint8_t(ep_expert_grads_dp),
       "expert parallel: expert gradients reduced over the whole data group, not edp", expert_parallel},
      {"ep_grads_ep_times", M, uint8_t(ep_grads_ep_times),
       "expert parallel: the reduced expert gradients are ep times too large (averaged over edp, not dp)",
       expert_parallel, "pytorch #160285, Megatron-LM PR #5956, DeepSpeed PR #5259"},
      {"moe_recompute_aux_twice", M, uint8_t(recompute_aux_twice),
       "full recompute: the rerun of the MoE block adds its load-balancing term again (loss and router gradient)",
       full_recompute}};
  return d;
}

std::string moe_fault_name(MoeFault f) { return fault_name_of(moe_fault_decls(), FaultAxis::moe, uint8_t(f)); }

std::set<MoeFault> moe_faults_of(const Faults& faults) {
  const auto v = fault_values<MoeFault>(faults, FaultAxis::moe);
  return {v.begin(), v.end()};
}

void require_moe_faults_apply_under_cp(const RunSpec& s) {
  if (s.mesh.cp == 1) return;
  for (const FaultDecl* f : s.faults)
    require(f->axis != FaultAxis::moe || !f->applies || f->applies(s),
            "strategy.faults: " + std::string(f->name) + " does not apply to " + mesh_text(s.mesh) +
                " (the MoE faults that do under context parallel: moe_aux_per_rank, moe_local_capacity where a "
                "choice can drop, moe_router_grad_missing, moe_recompute_aux_twice with recompute=full, the ep_* "
                "faults with ep > 1)");
}

}  // namespace pb::ep
