#include "impl/spec/rank_base.h"

#include "harness/status.h"
#include "kernels/cpu/ops.h"

namespace pb {

template <class T>
RankBase<T>::RankBase(const std::string& who, Communicator& world, int world_needed, const std::string& mesh,
                      int threads, RankOps<T> ops, RankMemory memory)
    : ops_(kernels::ops_or_cpu<T>(std::move(ops))), device_memory_(std::move(memory)) {
  require(ops_->is_host() || device_memory_ != nullptr, who + ": a device rank needs the device's memory");
  mem_.set_device_memory(device_memory_.get());
  require(world.size() == world_needed, "mesh: " + mesh + " needs a world of " + std::to_string(world_needed) +
                                            " ranks, got " + std::to_string(world.size()));
  kernels::set_blas_threads(threads);
}

template class RankBase<double>;
template class RankBase<float>;
template class RankBase<bf16>;

}  // namespace pb
