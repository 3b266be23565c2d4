// The run spec as the planner's input (see plan_input.h).
#include "suites/planner/plan_input.h"

#include <algorithm>
#include <cstdint>

namespace pb::planner {

bool ddp_overlaps(const RunSpec& s) {
  return s.data.shard == dp::Shard::none && s.data.overlap && s.mesh.pp == 1 && !s.pipe.schedule;
}

void set_parallelism(PlanInput& in, const RunSpec& s) {
  in.dp = s.mesh.dp;
  in.ep = s.mesh.ep;
  in.tp = s.mesh.tp;
  in.cp = s.mesh.cp;
  in.pp = s.mesh.pp;
  in.ranks_per_node = s.mesh.ranks_per_node;
  in.cp_algo = s.context.algo;
  in.zigzag = s.context.zigzag;
  in.sp = s.tensor.sp;
  in.recompute = s.tensor.recompute;
  in.schedule = s.pipe.schedule.value_or(pipeline::ScheduleKind::one_f_one_b);
  in.virtual_stages = s.pipe.virtual_stages;
  in.shard = s.data.shard;
  in.hsdp_group = s.data.shard_group;
  in.prefetch = s.data.prefetch;
  in.offload = s.data.offload;
  in.overlap = ddp_overlaps(s);
}

PlanInput plan_input_of(const RunSpec& s) {
  PlanInput in;
  set_parallelism(in, s);
  in.shape = s.train.model;
  in.seq = s.train.seq;
  in.precision = s.train.precision;
  in.global_batch = s.train.batch;
  in.microbatch_size = std::max<int64_t>(1, int64_t(s.train.batch) / (int64_t(s.mesh.dp) * s.train.microbatches));
  return in;
}

}  // namespace pb::planner
