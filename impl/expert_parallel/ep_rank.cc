#include "impl/expert_parallel/ep_rank.h"

#include <algorithm>

#include "harness/mesh.h"
#include "harness/status.h"
#include "impl/data_parallel/replay.h"
#include "impl/data_parallel/strategy.h"
#include "impl/expert_parallel/exchange.h"
#include "impl/expert_parallel/cost.h"
#include "impl/expert_parallel/options.h"

namespace pb::ep {

template <class T>
EpRank<T>::EpRank(const RunSpec& s, Communicator& world, RankOps<T> ops, RankMemory memory)
    : dp::DpRank<T>(s.train, dp::options_of(s), expert_options(s), mesh_text(s.mesh), world, std::move(ops),
                    std::move(memory)),
      spec_(s) {}

template <class T>
Declared EpRank<T>::declared(int steps) const {
  // The all-to-alls from the routing this rank recorded (every step since
  // construction: the conformance engine declares a fresh rank's whole run).
  Declared d = declared_costs(spec_, steps);
  const MoeLoad& l = this->runner().moe_load();
  d.add_comm(Group::ep, CommOp::all_to_all, a2a_bytes(spec_.train.model, l.calls, l.sent_rows, l.owner_rows, int(sizeof(T))));
  return d;
}

template class EpRank<double>;
template class EpRank<float>;
template class EpRank<bf16>;

}  // namespace pb::ep
