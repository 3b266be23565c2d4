#include "impl/spec/groups.h"

#include <stdexcept>
#include <string>

namespace pb {

const char* group_name(Group g) {
  switch (g) {
    case Group::check: return "check";
    case Group::dp: return "dp";
    case Group::dp_shard: return "dp_shard";
    case Group::dp_replica: return "dp_replica";
    case Group::dp_intra: return "dp_intra";
    case Group::dp_inter: return "dp_inter";
    case Group::dp_scalar: return "dp_scalar";
    case Group::ep_scalar: return "ep_scalar";
    case Group::pp_scalar: return "pp_scalar";
    case Group::moe: return "moe";
    case Group::ep: return "ep";
    case Group::tp: return "tp";
    case Group::cp: return "cp";
    case Group::pp: return "pp";
    case Group::pp_tied: return "pp_tied";
    case Group::count_: break;
  }
  throw std::logic_error("group_name: not a group");
}

Communicator* RankGroups::split(Group g, MeshAxis axis) { return split(g, mesh_groups(mesh_, axis)); }

Communicator* RankGroups::split(Group g, const std::vector<std::vector<int>>& groups) {
  auto& c = comms_[size_t(g)];
  if (split_[size_t(g)]++) throw std::logic_error(std::string("RankGroups: group ") + group_name(g) + " split twice");
  c = world_.split_groups(groups, group_name(g));
  return c.get();
}

Communicator* RankGroups::split_world(Group g) { return split(g, whole_world(world_.size())); }

Communicator& RankGroups::operator[](Group g) const {
  if (!comms_[size_t(g)]) throw std::logic_error(std::string("RankGroups: group ") + group_name(g) + " not split");
  return *comms_[size_t(g)];
}

}  // namespace pb
