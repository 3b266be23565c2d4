// The named process groups of a rank, and the one place a rank splits them
// from its world. A group's name is what its communicator records traffic
// under (harness/comm/comm_log.h) and what the declared costs name
// (rank.h Declared), so both sides take it from Group, never from a literal.
// Invariant: split_groups is collective over the world — every rank splits
// the same groups in the same order, whichever of them it uses.
#pragma once
#include <array>
#include <memory>
#include <vector>

#include "harness/comm/comm.h"
#include "harness/mesh.h"

namespace pb {

enum class Group {
  check,      // the whole world: the checks' gathers (rank.h full_params)
  // A data-parallel component's (impl/data_parallel/component.h DpComms):
  dp,          // its ranks (the mesh's dp, or dp x cp)
  dp_shard,    // HSDP: F consecutive dp ranks
  dp_replica,  // HSDP: the same position across them
  dp_intra,    // hZeRO: the members on one node
  dp_inter,    // hZeRO: the same position across nodes
  dp_scalar,  // a data axis's loss and squared-norm partials
  ep_scalar,  // the expert component's squared-norm partials
  pp_scalar,  // a pipeline's loss and norm partials (the whole world)
  moe,        // global capacity's expert counts (the ranks that share it)
  ep,         // the expert-parallel all-to-alls
  tp,
  cp,
  pp,         // a pipeline replica's point to point
  pp_tied,    // its first and last rank (the tied embedding)
  count_
};
const char* group_name(Group g);
// An expert component's groups are its data-axis groups with this prefix
// ("edp", "edp_shard", ...: the expert-data-parallel group).
inline constexpr const char* kExpertGroupPrefix = "e";

// A rank's communicators by Group, split from `world` along the mesh.
class RankGroups {
 public:
  RankGroups(Communicator& world, const MeshShape& mesh) : world_(world), mesh_(mesh) {}
  // Splits g along a mesh axis, over explicit groups, or as the whole world
  // (collective over the world); returns this rank's communicator, null when
  // the groups leave it out.
  Communicator* split(Group g, MeshAxis axis);
  Communicator* split(Group g, const std::vector<std::vector<int>>& groups);
  Communicator* split_world(Group g);
  // A group split before (std::logic_error otherwise); find: null then.
  Communicator& operator[](Group g) const;
  Communicator* find(Group g) const { return comms_[size_t(g)].get(); }
  Communicator& world() const { return world_; }
  const MeshShape& mesh() const { return mesh_; }
  MeshCoord coord() const { return mesh_coord(mesh_, world_.rank()); }

 private:
  Communicator& world_;
  MeshShape mesh_;
  std::array<std::unique_ptr<Communicator>, size_t(Group::count_)> comms_;
  std::array<int, size_t(Group::count_)> split_{};
};

}  // namespace pb
