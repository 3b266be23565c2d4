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
#include <string>
#include <string_view>
#include <vector>

namespace pb {

struct MeshShape {
  int dp = 1, tp = 1, cp = 1, pp = 1;
  int ranks_per_node = 0;  // 0: the whole world is one node
  int ep = 1;              // expert parallel; divides dp * cp
  bool operator==(const MeshShape&) const = default;
};

enum class MeshAxis { dp, tp, cp, pp, ep, edp, dp_cp };
std::string_view axis_name(MeshAxis a);

struct MeshCoord {
  int dp = 0, tp = 0, cp = 0, pp = 0;
  int ep = 0, edp = 0;  // expert view of (cp, dp)
};

// InputError naming the field and the rule broken.
void validate(const MeshShape& m);

// The mesh's one text form (CLI --mesh, TOML strategy.mesh, the CSV `mesh`
// column, labels): "dp2.tp2.pp2", axes in the order dp tp cp ep pp, size-1
// axes left out ("dp1" when all are 1), ".rpn<N>" for N ranks per node.
// parse_mesh(mesh_text(m)) == m; parse_mesh takes the axes in any order, each
// once, and throws InputError naming the part that is wrong and the allowed form.
std::string mesh_text(const MeshShape& m);
MeshShape parse_mesh(std::string_view text, std::string_view field = "mesh");
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

// Logical two-level split: every group cut into consecutive blocks of `size`
// members (inner, e.g. HSDP's shard groups of F) and the members holding the
// same position across its blocks (outer, HSDP's replica groups). InputError
// naming `field` when size does not divide a group.
TwoLevelGroups split_consecutive(const std::vector<std::vector<int>>& groups, int size,
                                 std::string_view field);

// One group of every rank of a world of n: the "check" and scalar groups.
std::vector<std::vector<int>> whole_world(int n);

}  // namespace pb
