// A rank's side of a sharded checkpoint (harness/io/checkpoint.h,
// docs/checkpoint.md): the flat parameter vector (reference/layout.h) and the
// optimizer state laid over the model's named tensors, so a rank at any mesh
// writes the flat ranges it holds and reads the ranges it will hold, whatever
// mesh wrote them. Tensors are "KIND/NAME" with NAME the GPT-2 parameter name
// and KIND one of
//   param   the parameters in the storage type (fp64, fp32, bf16);
//   master  the fp32 master copy (bf16-mixed only);
//   adam_m, adam_v  AdamW's moments in the master type;
// a flat range that crosses tensors is cut at their boundaries. The step
// count and the data position travel in the index (CheckpointRun).
// Also the injected faults of a load (FaultAxis::checkpoint), the bugs
// frameworks shipped in resharding: moments dropped, the step counter reset
// (bias correction restarts), a shard offset computed for even shards, the
// data position not restored. Only `check --reshard` injects them.
// Invariant: every flat element of the model is written by exactly one rank
// of a run (a component's writer rule, impl/data_parallel/component.h), so the
// written pieces tile every tensor.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "harness/io/checkpoint.h"
#include "impl/spec/fault.h"
#include "reference/layout.h"

namespace pb {

enum class CkptFault : uint8_t { drop_moments, step_reset, uneven_offset, data_position };
// The checkpoint faults' declarations (FaultAxis::checkpoint).
std::span<const FaultDecl> ckpt_fault_decls();

// What a rank writes: pieces of flat ranges, and its counters.
class RankCheckpointOut {
 public:
  // layout: the whole model's (tp = 1), which names the tensors and their shapes.
  RankCheckpointOut(const ParamLayout& layout, int rank) : full_(&layout), layout_(&layout), shard_(rank) {}
  // The flat ranges put from here on index `local` (a tensor-parallel rank's
  // layout, ParamLayout(model, tp, tp_rank)): each local element goes to its
  // place in the full tensor (ParamInfo::full_index; a replicated tensor's
  // element to the same place; vocabulary padding nowhere).
  void use_layout(const ParamLayout& local) { layout_ = &local; }
  // Flat elements [lo, hi) of `kind` from data (hi - lo values of X).
  template <class X>
  void put(const char* kind, int64_t lo, int64_t hi, const X* data) {
    put_raw(kind, lo, hi, st_dtype_of<X>(), data);
  }
  CheckpointShardWriter& shard() { return shard_; }
  int64_t step = -1, data_position = -1;  // set by the rank (-1: not set)

 private:
  void put_raw(const char* kind, int64_t lo, int64_t hi, StDType dt, const void* data);
  const ParamLayout* full_;
  const ParamLayout* layout_;
  CheckpointShardWriter shard_;
};

// What a rank reads: any range of any kind, and the counters, with the
// injected faults of the load.
class RankCheckpointIn {
 public:
  RankCheckpointIn(std::shared_ptr<const CheckpointReader> reader, const ParamLayout& layout,
                   std::vector<CkptFault> faults = {})
      : reader_(std::move(reader)), full_(&layout), layout_(&layout), faults_(std::move(faults)) {}
  // The same checkpoint read into ranges of `local` (as RankCheckpointOut::use_layout).
  RankCheckpointIn with_layout(const ParamLayout& local) const {
    RankCheckpointIn r = *this;
    r.layout_ = &local;
    return r;
  }
  template <class X>
  void get(const char* kind, int64_t lo, int64_t hi, X* out) const {
    get_raw(kind, lo, hi, st_dtype_of<X>(), out);
  }
  bool has(CkptFault f) const;
  int64_t step() const { return reader_->index().run.step; }
  int64_t data_position() const { return reader_->index().run.data_position; }

 private:
  void get_raw(const char* kind, int64_t lo, int64_t hi, StDType dt, void* out) const;
  std::shared_ptr<const CheckpointReader> reader_;
  const ParamLayout* full_;
  const ParamLayout* layout_;
  std::vector<CkptFault> faults_;
};

}  // namespace pb
