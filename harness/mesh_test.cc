// Mesh groups against hand-worked examples (rank = tp + TP*(cp + CP*(dp + DP*pp))).
#include "harness/mesh.h"

#include <gtest/gtest.h>

#include "harness/status.h"

namespace pb {
namespace {

using Groups = std::vector<std::vector<int>>;

TEST(Mesh, Dp2Tp2Pp2) {
  // rank = tp + 2*(dp + 2*pp): 0=(dp0,tp0,pp0) 1=(dp0,tp1,pp0) 2=(dp1,tp0,pp0) 3=(dp1,tp1,pp0), 4..7 = pp1.
  MeshShape m{.dp = 2, .tp = 2, .cp = 1, .pp = 2};
  EXPECT_EQ(world_size(m), 8);
  EXPECT_EQ(mesh_groups(m, MeshAxis::tp), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(mesh_groups(m, MeshAxis::dp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(mesh_groups(m, MeshAxis::pp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(mesh_groups(m, MeshAxis::cp), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  MeshCoord c = mesh_coord(m, 6);  // 6 = tp0 + 2*(dp1 + 2*pp1)
  EXPECT_EQ(c.tp, 0);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(mesh_rank(m, /*dp=*/1, /*tp=*/1, /*cp=*/0, /*pp=*/0), 3);
  EXPECT_EQ(mesh_group_of(m, MeshAxis::pp, 5), (std::vector<int>{1, 5}));
}

TEST(Mesh, ContextAndExpertGroups) {
  // tp2 cp2 dp2: rank = tp + 2*(cp + 2*dp).
  MeshShape m{.dp = 2, .tp = 2, .cp = 2, .pp = 1, .ranks_per_node = 0, .ep = 2};
  EXPECT_EQ(mesh_groups(m, MeshAxis::cp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(mesh_groups(m, MeshAxis::dp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(mesh_groups(m, MeshAxis::dp_cp), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  // Expert view: f = cp + 2*dp = ep + 2*edp, so ep follows cp and edp follows dp here.
  EXPECT_EQ(mesh_groups(m, MeshAxis::ep), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(mesh_groups(m, MeshAxis::edp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  m.ep = 4;  // one expert group spans every (cp, dp) pair of a tp rank
  EXPECT_EQ(mesh_groups(m, MeshAxis::ep), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(mesh_groups(m, MeshAxis::edp).size(), 8u);
  MeshCoord c = mesh_coord(m, 6);  // tp0, cp1, dp1 -> f = 3
  EXPECT_EQ(c.cp, 1);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.ep, 3);
  EXPECT_EQ(c.edp, 0);
}

TEST(Mesh, EveryRankInExactlyOneGroupPerAxis) {
  MeshShape m{.dp = 3, .tp = 2, .cp = 2, .pp = 2, .ranks_per_node = 4, .ep = 3};
  for (MeshAxis a : {MeshAxis::dp, MeshAxis::tp, MeshAxis::cp, MeshAxis::pp, MeshAxis::ep, MeshAxis::edp,
                     MeshAxis::dp_cp}) {
    std::vector<int> seen(24, 0);
    for (const auto& g : mesh_groups(m, a))
      for (int r : g) ++seen[size_t(r)];
    for (int s : seen) EXPECT_EQ(s, 1) << axis_name(a);
  }
}

TEST(Mesh, NodesAndTwoLevelSplit) {
  // dp4 x tp2 with 4 ranks per node: dp groups {0,2,4,6} and {1,3,5,7} span nodes {0,1}.
  MeshShape m{.dp = 4, .tp = 2, .cp = 1, .pp = 1, .ranks_per_node = 4};
  EXPECT_EQ(num_nodes(m), 2);
  EXPECT_EQ(node_of(m, 3), 0);
  EXPECT_EQ(node_of(m, 4), 1);
  TwoLevelGroups t = split_by_node(mesh_groups(m, MeshAxis::dp), m.ranks_per_node);
  EXPECT_EQ(t.intra, (Groups{{0, 2}, {4, 6}, {1, 3}, {5, 7}}));
  EXPECT_EQ(t.inter, (Groups{{0, 4}, {2, 6}, {1, 5}, {3, 7}}));
  // Irregular: {0,1,2} with 2 ranks per node puts 2 on node 0 and 1 on node 1.
  EXPECT_THROW(split_by_node({{0, 1, 2}}, 2), InputError);
}

TEST(Mesh, ValidationNamesTheField) {
  auto message = [](MeshShape m) {
    try {
      validate(m);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({.dp = 0}).find("mesh.dp"), std::string::npos);
  EXPECT_NE(message({.dp = 2, .tp = 2, .ranks_per_node = 3}).find("mesh.ranks_per_node"), std::string::npos);
  EXPECT_NE(message({.dp = 2, .tp = 1, .cp = 1, .pp = 1, .ranks_per_node = 0, .ep = 4}).find("mesh.ep"),
            std::string::npos);
  EXPECT_EQ(message({.dp = 2, .tp = 2, .cp = 1, .pp = 1, .ranks_per_node = 2}), "");
}

}  // namespace
}  // namespace pb
