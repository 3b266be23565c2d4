// The device mesh, as pure data: world = dp x tp x cp x pp, with expert
// parallel (ep) reusing the dp x cp ranks, and ranks_per_node marking node
// boundaries. No communicator here: groups are rank lists that
// Communicator::split_groups turns into communicators.
//
// Rank order is Megatron-core's default "tp-cp-ep-dp-pp" (RankGenerator and
// initialize_model_parallel(order=...) in megatron/core/parallel_state.py),
// with ep = 1 for the dense layers:
//     rank = tp + TP * (cp + CP * (dp + DP * pp))        (tp fastest)
// Expert layers use Megatron's expert RankGenerator (tp, ep, edp, pp): the
// flattened (cp, dp) index f = cp + CP*dp is re-split as f = ep + EP*edp, so
// an expert-parallel group is EP consecutive values of f (same tp, pp), and
// the expert-data-parallel group strides over them.
// Groups are listed like Megatron's generate_masked_orthogonal_rank_groups:
// the member index runs over the group's own axes (fastest first), the group
// index over the remaining axes (fastest first).
#pragma once
#include <string_view>
#include <vector>

namespace pb {

struct MeshShape {
  int dp = 1, tp = 1, cp = 1, pp = 1;
  int ranks_per_node = 0;  // 0: the whole world is one node
  int ep = 1;              // expert parallel; divides dp * cp
};

enum class MeshAxis { dp, tp, cp, pp, ep, edp, dp_cp };
std::string_view axis_name(MeshAxis a);

struct MeshCoord {
  int dp = 0, tp = 0, cp = 0, pp = 0;
  int ep = 0, edp = 0;  // expert view of (cp, dp)
};

// InputError naming the field and the rule broken.
void validate(const MeshShape& m);
int world_size(const MeshShape& m);
MeshCoord mesh_coord(const MeshShape& m, int rank);
int mesh_rank(const MeshShape& m, int dp, int tp, int cp, int pp);

// Every group along the axis; group member i is rank i of that group.
std::vector<std::vector<int>> mesh_groups(const MeshShape& m, MeshAxis a);
// The group of `rank` along the axis.
std::vector<int> mesh_group_of(const MeshShape& m, MeshAxis a, int rank);

int node_of(const MeshShape& m, int rank);
int num_nodes(const MeshShape& m);

// Two-level split of groups by node (ranks_per_node as in MeshShape): intra =
// the members of a group that share a node; inter = the members holding the
// same position within their node's part. A hierarchical collective runs
// intra, then inter, then intra. Each group's node parts must have equal size
// (InputError naming ranks_per_node otherwise).
struct TwoLevelGroups {
  std::vector<std::vector<int>> intra, inter;
};
TwoLevelGroups split_by_node(const std::vector<std::vector<int>>& groups, int ranks_per_node);

}  // namespace pb
