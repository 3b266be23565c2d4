// Pipeline executor, part 3: a rank's checkpoint (executor.h,
// docs/checkpoint.md). A stage's states are its data-parallel components
// (the dense units and, in an MoE model, the stage's experts), so the
// component's writer rule and reader serve every schedule and every sharding
// inside a stage; a tensor-parallel stage maps its layout onto the full
// tensors as the tensor-parallel rank does. The last stage's tied wte copy is
// a unit outside the norm: it is not written (the first stage's wte is), and
// a load fills it, its master and its moments from wte's, which it equals
// (the tied sum gives both the same gradient every step).
// PipeDream-2BW is refused: inside its window a rank holds W(k), W(k-1) and
// the gradient of a group still in flight on other stages, so no point of
// the window is one consistent state, and the window spans the whole run
// (train.steps), whose end is the only flush.
#include "harness/status.h"
#include "impl/pipeline/executor.h"

namespace pb::pipeline {

namespace {
void require_synchronous(const Schedule& s, const char* what) {
  require(!s.async_weights, std::string("checkpoint: 2bw ") + what +
                                " no checkpoint: its window (the whole run) has no flush before its end, where "
                                "two weight versions and a gradient in flight are the state (docs/checkpoint.md)");
}
}  // namespace

template <class T>
void PipelineRank<T>::save_state(RankCheckpointOut& out) {
  require_synchronous(s_, "writes");
  if (o_.tp() > 1) out.use_layout(layout_);
  states_->save_state(out);
  out.step = step_;
  out.data_position = step_ + data_shift_;
}

template <class T>
void PipelineRank<T>::load_state(const RankCheckpointIn& in) {
  require_synchronous(s_, "reads");
  states_->load_state(o_.tp() > 1 ? in.with_layout(layout_) : in);
  const int64_t step = in.has(CkptFault::step_reset) ? 0 : in.step();
  const int64_t data = in.has(CkptFault::data_position) ? 0 : in.data_position();
  step_ = int(step);
  data_shift_ = int(data - step);
}

#define PB_PIPELINE_CHECKPOINT(T)                                \
  template void PipelineRank<T>::save_state(RankCheckpointOut&); \
  template void PipelineRank<T>::load_state(const RankCheckpointIn&);
PB_PIPELINE_CHECKPOINT(double)
PB_PIPELINE_CHECKPOINT(float)
PB_PIPELINE_CHECKPOINT(bf16)
#undef PB_PIPELINE_CHECKPOINT

}  // namespace pb::pipeline
