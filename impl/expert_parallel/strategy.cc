#include "impl/expert_parallel/strategy.h"

#include "impl/data_parallel/replay.h"
#include "impl/data_parallel/strategy.h"
#include "impl/expert_parallel/ep_rank.h"
#include "impl/expert_parallel/faults.h"
#include "impl/expert_parallel/options.h"

namespace pb::ep {

namespace {

bool runs(const RunSpec& s) {
  // With pp > 1 or a schedule the pipeline runs the experts (pipeline/executor.h).
  return s.mesh.ep > 1 && s.mesh.tp == 1 && s.mesh.cp == 1 && s.mesh.pp == 1 && !s.pipe.schedule &&
         s.tensor.recompute == Recompute::none;
}

// Experts run on rows gathered from several ranks and their gradients are
// summed there and over edp: not the reference's order, so the ratio rule.
bool bitwise(const RunSpec&, BackendKind) { return false; }

// The same tokens meet the same experts as under data parallel: the reference
// replays the dp ranks' microbatches (jointly under global capacity).
Replay replay(const RunSpec& s) { return {dp::replay_plan(dp::options_of(s), s.train), false}; }

std::unique_ptr<Rank> make_rank(const RunSpec& s, Communicator& world, const TrainDevice* device) {
  return make_typed_rank_on<EpRank>(device, s.train.precision, s, world);
}

}  // namespace

const Strategy& strategy() {
  static const Strategy s{"expert_parallel", runs,      validate, bitwise,
                          replay,            make_rank, nullptr,
                          fault_decls({dp::fault_decls(), moe_fault_decls()})};
  return s;
}

}  // namespace pb::ep
