#include "impl/tensor_parallel/strategy.h"

#include <algorithm>

#include "harness/status.h"
#include "impl/data_parallel/component.h"
#include "impl/data_parallel/replay.h"
#include "impl/data_parallel/shard.h"
#include "impl/data_parallel/strategy.h"
#include "impl/tensor_parallel/tp_rank.h"

namespace pb::tp {

TpOptions options_of(const RunSpec& s) {
  TpOptions o;
  o.tp = s.mesh.tp;
  o.sp = s.tensor.sp;
  o.recompute = s.tensor.recompute;
  for (const auto& f : s.faults)
    if (is_fault(f)) o.faults.insert(parse_fault(f));
  return o;
}

dp::DpOptions data_options_of(const RunSpec& s) {
  RunSpec data_only = s;
  data_only.faults.clear();
  for (const auto& f : s.faults)
    if (!is_fault(f)) data_only.faults.push_back(f);
  try {
    dp::DpOptions o = dp::options_of(data_only);
    // The data axis counts data-parallel ranks per node: tp ranks of a
    // replica share its node (validated: tp divides ranks_per_node).
    if (s.mesh.ranks_per_node && s.mesh.ranks_per_node % s.mesh.tp == 0) o.ranks_per_node /= s.mesh.tp;
    return o;
  } catch (const InputError& e) {  // name the tensor-parallel faults too
    std::string known;
    for (Fault f : faults_for(2, false, Recompute::full, true)) known += ", " + fault_name(f);
    known += ", " + fault_name(Fault::skip_sp_grad_reduce);
    throw InputError(std::string(e.what()) + "; tensor-parallel faults: " + known.substr(2));
  }
}

TpShape tp_shape(const RunSpec& s) {
  return make_shape(s.train.model, s.mesh.tp, s.tensor.sp, s.tensor.recompute,
                    s.train.batch / s.mesh.dp / s.train.microbatches, s.train.seq, s.train.precision);
}

int64_t replicated_grads_held(const RunSpec& s, int dp_rank) {
  const ParamLayout l(s.train.model, s.mesh.tp, 0);  // every tp rank has the same replicated ranges
  const dp::DpOptions o = data_options_of(s);
  const dp::ShardLayout sl(dp::model_units(l), o.shard == dp::Shard::none ? 1 : dp::shard_group(o),
                           o.shard == dp::Shard::none ? 0 : dp::owned_slice(o, dp_rank));
  int64_t held = 0;
  for (int u = 0; u < sl.num_units(); ++u) {
    const auto& us = sl.unit(u);
    auto [lo, hi] = o.shard == dp::Shard::none ? std::pair{us.begin, us.begin + us.size} : sl.owned(u);
    for (const auto& [a, b] : l.replicated_ranges()) held += std::max<int64_t>(0, std::min(hi, b) - std::max(lo, a));
  }
  return held;
}

namespace {

bool runs(const RunSpec& s) {
  return (s.mesh.tp > 1 || s.tensor.recompute != Recompute::none) && s.mesh.cp == 1 && s.mesh.ep == 1 &&
         s.mesh.pp == 1 && !s.pipe.schedule;
}

void validate_spec(const RunSpec& s) {
  const ModelConfig& m = s.train.model;
  const int tp = s.mesh.tp;
  require(s.context == ContextOptions{}, "strategy: context options (cp_algo, zigzag) need cp > 1 in the mesh");
  require(m.NH % tp == 0, "mesh.tp: tp" + std::to_string(tp) + " does not divide model.heads = " +
                              std::to_string(m.NH) + " (" + std::to_string(m.NH) + " % " + std::to_string(tp) +
                              " = " + std::to_string(m.NH % tp) + ")");
  require(!s.tensor.sp || tp > 1, "strategy.sp: sequence parallel needs tp > 1 in the mesh");
  const int Bm = s.train.batch / s.mesh.dp / s.train.microbatches;
  require(!s.tensor.sp || (int64_t(Bm) * s.train.seq) % tp == 0,
          "strategy.sp: a microbatch's " + std::to_string(int64_t(Bm) * s.train.seq) +
              " tokens (batch / dp / microbatches x seq) do not split over tp" + std::to_string(tp));
  require(s.mesh.ranks_per_node % tp == 0,
          "mesh: rpn" + std::to_string(s.mesh.ranks_per_node) + " must be a multiple of tp" + std::to_string(tp) +
              " (a replica's tp ranks share a node)");
  const dp::DpOptions d = data_options_of(s);
  dp::validate(d, s.train);
  const TpOptions o = options_of(s);
  const auto ok = faults_for(tp, o.sp, o.recompute, m.V % tp != 0);
  for (Fault f : o.faults) {
    if (std::find(ok.begin(), ok.end(), f) != ok.end()) continue;
    std::string where;
    for (Fault g : ok) where += (where.empty() ? "" : ", ") + fault_name(g);
    throw InputError("strategy.faults: " + fault_name(f) + " does not apply to " + mesh_text(s.mesh) + " " +
                     strategy_text(s) + " (faults that apply here: " + (where.empty() ? "none" : where) + ")");
  }
}

std::string describe(const RunSpec& s) {
  std::string d = "tp" + std::to_string(s.mesh.tp);
  if (s.tensor.sp) d += " sp";
  if (s.tensor.recompute != Recompute::none) d += " recompute=" + std::string(recompute_name(s.tensor.recompute));
  d += " x " + data_options_of(s).describe();
  if (s.train.microbatches > 1) d += " accum" + std::to_string(s.train.microbatches);
  return d;
}

// Row-parallel GEMMs sum partial products over tp: not the reference's order.
bool bitwise(const RunSpec&, BackendKind) { return false; }

Replay replay(const RunSpec& s) { return {dp::replay_plan(data_options_of(s), s.train), false}; }

std::optional<RunSpec> bitwise_twin(const RunSpec& s) {
  if (s.tensor.recompute == Recompute::none) return std::nullopt;
  RunSpec t = s;  // faults too: recompute must not change what they do
  t.tensor.recompute = Recompute::none;
  return t;
}

std::unique_ptr<Rank> make_rank(const RunSpec& s, Communicator& world) {
  return make_typed_rank<TpRank>(s.train.precision, s, world);
}

}  // namespace

const Strategy& strategy() {
  static const Strategy s{"tensor_parallel", runs, validate_spec, describe, bitwise, replay, make_rank, bitwise_twin};
  return s;
}

}  // namespace pb::tp
