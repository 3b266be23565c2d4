#include "impl/tensor_parallel/strategy.h"

#include <algorithm>

#include "harness/status.h"
#include "impl/data_parallel/component.h"
#include "impl/data_parallel/replay.h"
#include "impl/data_parallel/shard.h"
#include "impl/data_parallel/strategy.h"
#include "impl/expert_parallel/faults.h"
#include "impl/expert_parallel/options.h"
#include "impl/tensor_parallel/tp_rank.h"

namespace pb::tp {

TpOptions options_of(const RunSpec& s) {
  TpOptions o;
  o.tp = s.mesh.tp;
  o.sp = s.tensor.sp;
  o.recompute = s.tensor.recompute;
  for (Fault f : fault_values<Fault>(s.faults, FaultAxis::tensor)) o.faults.insert(f);
  o.context = cp::options_of(s);
  return o;
}

dp::DpOptions data_options_of(const RunSpec& s) {
  dp::DpOptions o = dp::options_of(s);  // the data axis's faults (and the MoE layer's) alone
  // The data axis counts data-parallel ranks per node: the tp x cp ranks of
  // a replica share its node (validated: tp x cp divides ranks_per_node).
  const int inner = s.mesh.tp * s.mesh.cp;
  if (s.mesh.ranks_per_node && s.mesh.ranks_per_node % inner == 0) o.ranks_per_node /= inner;
  return o;
}

void declare_cp_comm(Declared& d, const TpShape& x, int64_t layer_microbatches) {
  if (x.cp == 1) return;
  const cp::CpLayerComm l = cp::layer_comm(attn_shape(x), x.recompute);
  if (l.send()) d.add_comm(Group::cp, CommOp::send, l.send() * layer_microbatches);
  if (l.all_to_all()) d.add_comm(Group::cp, CommOp::all_to_all, l.all_to_all() * layer_microbatches);
}

dp::DpOptions component_options(const dp::DpOptions& data, int cp) {
  dp::DpOptions o = data;
  o.dp *= cp;
  o.ranks_per_node *= cp;
  return o;
}

dp::DpOptions component_options_of(const RunSpec& s) { return component_options(data_options_of(s), s.mesh.cp); }

TpShape tp_shape(const RunSpec& s) {
  TpShape x = make_shape(s.train.model, s.mesh.tp, s.tensor.sp, s.tensor.recompute,
                         s.train.batch / s.mesh.dp / s.train.microbatches, s.train.seq, s.train.precision);
  x.cp = s.mesh.cp;
  x.algo = s.context.algo;
  return x;
}

int64_t replicated_grads_held(const RunSpec& s, int rank) {
  const ParamLayout l(s.train.model, s.mesh.tp, 0);  // every tp rank has the same replicated ranges
  const dp::DpOptions o = component_options_of(s);
  // The dense component's units (ep > 1: the experts are a second component, tp_rank.cc).
  const dp::ShardLayout sl(s.mesh.ep > 1 ? dp::dense_units(l) : dp::model_units(l), o.shard == dp::Shard::none ? 1 : dp::shard_group(o),
                           o.shard == dp::Shard::none ? 0 : dp::owned_slice(o, rank));
  const auto ranges = tp_reduced_ranges(l, s.tensor.sp);
  int64_t held = 0;
  for (int u = 0; u < sl.num_units(); ++u) {
    const auto& us = sl.unit(u);
    auto [lo, hi] = o.shard == dp::Shard::none ? std::pair{us.begin, us.begin + us.size} : sl.owned(u);
    for (const auto& [a, b] : ranges) held += std::max<int64_t>(0, std::min(hi, b) - std::max(lo, a));
  }
  return held;
}

std::vector<std::pair<int64_t, int64_t>> tp_reduced_ranges(const ParamLayout& l, bool sp) {
  if (l.tp() == 1 || (sp && l.model().moe.experts == 0)) return l.replicated_ranges();
  std::vector<std::pair<int64_t, int64_t>> r;
  auto ends = [](const std::string& n, const std::string& x) {
    return n.size() >= x.size() && n.compare(n.size() - x.size(), x.size(), x) == 0;
  };
  // SP: every replicated parameter but the MoE MLP's (router, experts' c_proj
  // bias: every tp rank computes their gradients whole, from every token).
  auto moe = [](const std::string& n) {
    return n.find(".router.") != std::string::npos || n.find(".experts.") != std::string::npos ||
           n.find("block_sparse_moe.") != std::string::npos;
  };
  for (const auto& p : l.params()) {
    if (!p.replicated || (sp ? moe(p.name) : !(ends(p.name, "k_proj.weight") || ends(p.name, "v_proj.weight"))))
      continue;
    if (!r.empty() && r.back().second == p.offset) r.back().second += p.numel;
    else r.push_back({p.offset, p.offset + p.numel});
  }
  return r;
}

namespace {
bool runs(const RunSpec& s) {
  // ep > 1 with tp > 1 or recompute: experts split over both (tp_rank.h); ep alone is expert_parallel's.
  const bool recompute = s.tensor.recompute != Recompute::none;
  return (s.mesh.tp > 1 || recompute) && s.mesh.cp == 1 && (s.mesh.ep == 1 || s.mesh.tp > 1 || recompute) &&
         s.mesh.pp == 1 && !s.pipe.schedule;
}
// cp > 1, with or without ep: experts over the ep group folded over dp x cp (tp_rank.h).
bool runs_context(const RunSpec& s) { return s.mesh.cp > 1 && s.mesh.pp == 1 && !s.pipe.schedule; }
}  // namespace

void validate_spec(const RunSpec& s) {
  const ModelConfig& m = s.train.model;
  const int tp = s.mesh.tp, cp = s.mesh.cp;
  require(cp > 1 || s.context == ContextOptions{},
          "strategy: context options (cp_algo, zigzag) need cp > 1 in the mesh");
  require(m.NH % tp == 0, "mesh.tp: tp" + std::to_string(tp) + " does not divide model.heads = " +
                              std::to_string(m.NH) + " (" + std::to_string(m.NH) + " % " + std::to_string(tp) +
                              " = " + std::to_string(m.NH % tp) + ")");
  if (m.llama() && tp > 1) {  // the shards of reference/layout.cc add_llama
    require(m.ffn % tp == 0, "mesh.tp: tp" + std::to_string(tp) + " does not divide model.ffn = " +
                                 std::to_string(m.ffn) + " (" + std::to_string(m.ffn) + " % " + std::to_string(tp) +
                                 " = " + std::to_string(m.ffn % tp) + ")");
    require(m.kv_heads % tp == 0 || tp % m.kv_heads == 0,
            "mesh.tp: tp" + std::to_string(tp) + " and model.kv_heads = " + std::to_string(m.kv_heads) +
                " must divide one another (kv heads split over tp when tp divides them, replicated when tp is a "
                "multiple of them)");
  }
  if (cp > 1) {
    cp::validate_seq(s.train.seq, cp, s.context.zigzag, "train.seq");
    const int heads = m.NH / tp;
    require(s.context.algo != CpAlgo::ulysses || heads % cp == 0,
            "strategy.cp_algo: ulysses shards the heads over cp: model.heads" +
                (tp > 1 ? " / tp" + std::to_string(tp) : std::string()) + " = " + std::to_string(heads) +
                " is not divisible by cp" + std::to_string(cp) + " (" + std::to_string(heads) + " % " +
                std::to_string(cp) + " = " + std::to_string(heads % cp) + "); use cp_algo=ring");
  }
  require(!s.tensor.sp || tp > 1, "strategy.sp: sequence parallel needs tp > 1 in the mesh");
  const int Bm = s.train.batch / s.mesh.dp / s.train.microbatches;
  const int64_t held = int64_t(Bm) * s.train.seq / cp;  // a microbatch's tokens on one cp rank
  require(!s.tensor.sp || held % tp == 0,
          "strategy.sp: a microbatch's " + std::to_string(held) + " tokens (batch / dp / microbatches x seq" +
              (cp > 1 ? " / cp" : "") + ") do not split over tp" + std::to_string(tp));
  require(s.mesh.ranks_per_node % (tp * cp) == 0,
          "mesh: rpn" + std::to_string(s.mesh.ranks_per_node) + " must be a multiple of " +
              (cp > 1 ? "tp x cp = " + std::to_string(tp * cp) : "tp" + std::to_string(tp)) +
              " (a replica's " + (cp > 1 ? "tp x cp" : "tp") + " ranks share a node)");
  if (s.mesh.ep > 1) ep::validate(s);  // the experts split over ep too: their component over edp
  const dp::DpOptions d = data_options_of(s);
  if (cp == 1) {
    dp::validate(d, s.train);
  } else {  // the component's structure over dp x cp ranks; the batch over the dp replicas
    dp::validate(component_options_of(s));
    dp::DpOptions replicas;
    replicas.dp = d.dp;
    dp::validate(replicas, s.train);
    require(!d.has(dp::Fault::sync_wrong_microbatch) || s.train.microbatches >= 2,
            "strategy.faults: sync_wrong_microbatch needs train.microbatches >= 2 (the first is the last)");
  }
  require(!ep::moe_faults_of(s.faults).count(MoeFault::recompute_aux_twice) || s.tensor.recompute == Recompute::full,
          "strategy.faults: moe_recompute_aux_twice needs recompute=full (the backward's rerun of the MoE block)");
  ep::require_moe_faults_apply_under_cp(s);  // (dp's validate sees the replicas alone)
  const TpOptions o = options_of(s);
  check_precision(o.faults, s.train.precision);
  auto refuse = [&](const std::string& f, const std::string& ok) {
    throw InputError("strategy.faults: " + f + " does not apply to " + mesh_text(s.mesh) + " " + strategy_text(s) +
                     " (faults that apply here: " + (ok.empty() ? "none" : ok) + ")");
  };
  const auto tp_ok = faults_for(m, tp, o.sp, o.recompute);
  const auto cp_ok = cp::faults_for(o.context, m);
  std::string where;
  for (Fault g : tp_ok) where += (where.empty() ? "" : ", ") + fault_name(g);
  for (cp::Fault g : cp_ok) where += (where.empty() ? "" : ", ") + cp::fault_name(g);
  for (Fault f : o.faults)
    if (std::find(tp_ok.begin(), tp_ok.end(), f) == tp_ok.end()) refuse(fault_name(f), where);
  for (cp::Fault f : o.context.faults)
    if (std::find(cp_ok.begin(), cp_ok.end(), f) == cp_ok.end()) refuse(cp::fault_name(f), where);
}

// Row-parallel GEMMs sum partial products over tp, context parallel merges
// attention blocks by log-sum-exp: not the reference's order.
bool bitwise(const RunSpec&, BackendKind) { return false; }

Replay replay(const RunSpec& s) {
  dp::DpOptions d = data_options_of(s);
  if (s.mesh.cp > 1) {  // not bitwise: the dp replicas' plain split, whatever the component's groups over dp x cp
    d.shard = dp::Shard::none;
    d.offload = dp::Offload::none;
    d.shard_group = 0;
    d.faults.clear();
  }
  return {dp::replay_plan(d, s.train), false};
}

std::optional<RunSpec> bitwise_twin(const RunSpec& s) {
  if (s.tensor.recompute == Recompute::none) return std::nullopt;
  RunSpec t = s;  // faults too: recompute must not change what they do
  t.tensor.recompute = Recompute::none;
  return t;
}

std::unique_ptr<Rank> make_rank(const RunSpec& s, Communicator& world, const TrainDevice* device) {
  return make_typed_rank_on<TpRank>(device, s.train.precision, s, world);
}

std::vector<FaultDecl> tp_cp_fault_decls() {
  return pb::fault_decls({fault_decls(), cp::fault_decls(), dp::fault_decls(), ep::moe_fault_decls()});
}

const Strategy& strategy() {
  static const Strategy s{"tensor_parallel", runs,      validate_spec, bitwise,
                          replay,            make_rank, bitwise_twin,  tp_cp_fault_decls()};
  return s;
}

const Strategy& context_strategy() {
  static const Strategy s{"context_parallel", runs_context, validate_spec, bitwise,
                          replay,             make_rank,    bitwise_twin,
                          tp_cp_fault_decls()};
  return s;
}

}  // namespace pb::tp
