#include "impl/expert_parallel/options.h"

#include "harness/mesh.h"
#include "harness/status.h"
#include "impl/data_parallel/strategy.h"

namespace pb::ep {

int edp_size(const MeshShape& m) { return m.dp * m.cp / m.ep; }

dp::DpOptions dense_options(const RunSpec& s) {
  dp::DpOptions o = dp::options_of(s);
  const int inner = s.mesh.tp * s.mesh.cp;
  if (s.mesh.ranks_per_node && s.mesh.ranks_per_node % inner == 0) o.ranks_per_node /= inner;
  return o;
}

dp::DpOptions dense_component_options(const RunSpec& s) {
  dp::DpOptions o = dense_options(s);
  o.dp *= s.mesh.cp;
  o.ranks_per_node *= s.mesh.cp;
  return o;
}

dp::DpOptions expert_options(const RunSpec& s) {
  dp::DpOptions o = dp::options_of(s);
  const int ep = s.mesh.ep, F = dp::shard_group(o);
  o.dp = edp_size(s.mesh);
  o.faults.clear();
  if (o.shard == dp::Shard::hsdp) {
    require(F % ep == 0 || ep % F == 0, "strategy.shard_group: with ep" + std::to_string(ep) +
                                            " the hsdp shard group (" + std::to_string(F) +
                                            ") must be a multiple of ep or divide it");
    o.shard_group = F % ep == 0 ? F / ep : 1;
  }
  if (s.mesh.ranks_per_node > 0) {  // the edp group's members on one node
    const std::vector<int> g = mesh_group_of(s.mesh, MeshAxis::edp, 0);
    int n = 0;
    for (int r : g) n += node_of(s.mesh, r) == node_of(s.mesh, g[0]);
    o.ranks_per_node = n;
  }
  return o;
}

std::vector<int64_t> sizes(const std::vector<dp::UnitSpan>& u) {
  std::vector<int64_t> s;
  for (const auto& x : u) s.push_back(x.size);
  return s;
}

void validate(const RunSpec& s) {
  const ModelConfig& m = s.train.model;
  const int ep = s.mesh.ep;
  require(m.moe.experts > 0, "mesh: ep" + std::to_string(ep) +
                                 " needs a mixture-of-experts model (model.moe.experts > 0; e.g. --model tiny-moe)");
  require(m.moe.experts % ep == 0, "mesh: ep" + std::to_string(ep) + " must divide model.moe.experts (" +
                                       std::to_string(m.moe.experts) + ")");
  // (recompute alone runs in the tensor-parallel runner at tp 1 too)
  require(s.mesh.tp > 1 || s.mesh.cp > 1 || (!s.tensor.sp && s.context == ContextOptions{}),
          "strategy: tensor and context options (sp, recompute, cp_algo, zigzag) need tp > 1 or cp > 1 in the mesh");
  if (s.mesh.cp == 1)
    dp::validate(dense_options(s), s.train);
  else  // the batch over the dp replicas is the tensor-parallel strategy's check
    dp::validate(dense_component_options(s));
  const dp::DpOptions e = expert_options(s);
  if (e.shard == dp::Shard::hzero)
    require(e.ranks_per_node > 0 && e.ranks_per_node < e.dp,
            "strategy.ranks_per_node: hzero with ep" + std::to_string(ep) + " needs the expert-data-parallel group (edp" +
                std::to_string(e.dp) + ") to span nodes too");
  dp::validate(e);
}

}  // namespace pb::ep
