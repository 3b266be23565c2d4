// The collectives of a mixture-of-experts layer across ranks
// (reference/moe.h MoeExchange says what each one means): global capacity's
// count exchange over the ranks sharing a microbatch's capacity, expert
// parallel's dispatch and combine (an all-to-all of the per-expert counts,
// then all-to-all(v) of the rows) over the ep group, and expert tensor
// parallel's all-reduce over the tp group. A rank builds its MoE layer's
// scope with moe_scope.
// Invariant: the same bytes in the same order as the layer's reference
// arithmetic expects; counts travel as f64 (exact below 2^53).
#pragma once
#include <memory>
#include <set>

#include "harness/comm/comm.h"
#include "reference/moe.h"

namespace pb::ep {

class CommMoeExchange final : public MoeExchange {
 public:
  // Each group null or of size 1: none on that axis. The groups outlive this.
  CommMoeExchange(Communicator* capacity, Communicator* ep, Communicator* tp);
  int capacity_ranks() const override { return capacity_ ? capacity_->size() : 1; }
  int capacity_rank() const override { return capacity_ ? capacity_->rank() : 0; }
  int ep_size() const override { return ep_ ? ep_->size() : 1; }
  int tp_size() const override { return tp_ ? tp_->size() : 1; }
  void gather_routed(const double* mine, double* all, size_t n) const override;
  void sum_probs(double* p, size_t n) const override;
  void exchange_counts(const int32_t* count, int32_t* recv, int experts) const override;
  void dispatch(void* dst, const void* src, const MoeRows& r) const override;
  void combine(void* dst, const void* src, const MoeRows& r, bool permute) const override;
  void tp_sum(void* rows, size_t n, DType t) const override;

 private:
  Communicator* capacity_;
  Communicator* ep_;
  Communicator* tp_;
};

// A rank's MoE scope: `capacity` the ranks sharing a microbatch's capacity
// (global capacity; null: this rank alone), `ep` the expert-parallel group,
// `tp` the tensor-parallel group splitting each expert (null: whole experts).
MoeScope moe_scope(Communicator* capacity, Communicator* ep, Communicator* tp, std::set<MoeFault> faults);

}  // namespace pb::ep
