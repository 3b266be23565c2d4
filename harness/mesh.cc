// Mesh groups by Megatron's masked orthogonal construction over an ordered
// list of axis sizes (see mesh.h).
#include "harness/mesh.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdint>
#include <map>
#include <string>

#include "harness/status.h"

namespace pb {
namespace {

// Megatron's generate_masked_orthogonal_rank_groups: dims in rank order
// (fastest first); masked dims index the members, the others the groups.
std::vector<std::vector<int>> masked_groups(const std::vector<int>& sizes, const std::vector<bool>& mask) {
  std::vector<int> stride(sizes.size());
  int s = 1;
  for (size_t i = 0; i < sizes.size(); ++i) stride[i] = s, s *= sizes[i];
  const int world = s;
  std::vector<size_t> in, out;
  for (size_t i = 0; i < sizes.size(); ++i) (mask[i] ? in : out).push_back(i);
  int group_size = 1;
  for (size_t i : in) group_size *= sizes[i];
  // rank of (group index g, member index k): decompose each over its dims, fastest first
  auto place = [&](const std::vector<size_t>& dims, int idx) {
    int r = 0;
    for (size_t d : dims) r += (idx % sizes[d]) * stride[d], idx /= sizes[d];
    return r;
  };
  std::vector<std::vector<int>> groups(size_t(world / group_size));
  for (int g = 0; g < world / group_size; ++g)
    for (int k = 0; k < group_size; ++k) groups[size_t(g)].push_back(place(out, g) + place(in, k));
  return groups;
}

}  // namespace

std::string_view axis_name(MeshAxis a) {
  switch (a) {
    case MeshAxis::dp: return "dp";
    case MeshAxis::tp: return "tp";
    case MeshAxis::cp: return "cp";
    case MeshAxis::pp: return "pp";
    case MeshAxis::ep: return "ep";
    case MeshAxis::edp: return "edp";
    case MeshAxis::dp_cp: return "dp_cp";
  }
  return "?";
}

void validate(const MeshShape& m) {
  auto positive = [](int v, const char* f) {
    require(v >= 1, std::string("mesh.") + f + ": must be >= 1, got " + std::to_string(v));
  };
  positive(m.dp, "dp");
  positive(m.tp, "tp");
  positive(m.cp, "cp");
  positive(m.pp, "pp");
  positive(m.ep, "ep");
  int64_t product = 1;  // each factor and each partial product < 2^31: no overflow
  for (int v : {m.dp, m.tp, m.cp, m.pp}) {
    product *= v;
    require(product <= INT_MAX, "mesh: the world size dp*tp*cp*pp = " + std::to_string(m.dp) + "*" +
                                    std::to_string(m.tp) + "*" + std::to_string(m.cp) + "*" + std::to_string(m.pp) +
                                    " must be < 2^31");
  }
  const int w = int(product);
  require(m.ranks_per_node >= 0, "mesh.ranks_per_node: must be >= 0 (0 = one node), got " +
                                     std::to_string(m.ranks_per_node));
  require(m.ranks_per_node == 0 || w % m.ranks_per_node == 0,
          "mesh.ranks_per_node: must divide the world size dp*tp*cp*pp = " + std::to_string(w) + ", got " +
              std::to_string(m.ranks_per_node));
  require((m.dp * m.cp) % m.ep == 0, "mesh.ep: must divide dp*cp = " + std::to_string(m.dp * m.cp) + ", got " +
                                         std::to_string(m.ep));
}

int world_size(const MeshShape& m) { return m.dp * m.tp * m.cp * m.pp; }

MeshCoord mesh_coord(const MeshShape& m, int rank) {
  MeshCoord c;
  c.tp = rank % m.tp;
  rank /= m.tp;
  c.cp = rank % m.cp;
  rank /= m.cp;
  c.dp = rank % m.dp;
  c.pp = rank / m.dp;
  const int f = c.cp + m.cp * c.dp;
  c.ep = f % m.ep;
  c.edp = f / m.ep;
  return c;
}

int mesh_rank(const MeshShape& m, int dp, int tp, int cp, int pp) { return tp + m.tp * (cp + m.cp * (dp + m.dp * pp)); }

std::vector<std::vector<int>> mesh_groups(const MeshShape& m, MeshAxis a) {
  validate(m);
  const std::vector<int> dense = {m.tp, m.cp, m.dp, m.pp};
  const std::vector<int> expert = {m.tp, m.ep, m.dp * m.cp / m.ep, m.pp};
  switch (a) {
    case MeshAxis::tp: return masked_groups(dense, {true, false, false, false});
    case MeshAxis::cp: return masked_groups(dense, {false, true, false, false});
    case MeshAxis::dp: return masked_groups(dense, {false, false, true, false});
    case MeshAxis::pp: return masked_groups(dense, {false, false, false, true});
    case MeshAxis::dp_cp: return masked_groups(dense, {false, true, true, false});
    case MeshAxis::ep: return masked_groups(expert, {false, true, false, false});
    case MeshAxis::edp: return masked_groups(expert, {false, false, true, false});
  }
  return {};
}

std::vector<int> mesh_group_of(const MeshShape& m, MeshAxis a, int rank) {
  for (auto& g : mesh_groups(m, a))
    if (std::find(g.begin(), g.end(), rank) != g.end()) return g;
  throw InputError("mesh: rank " + std::to_string(rank) + " is outside the world of " +
                   std::to_string(world_size(m)) + " ranks");
}

int node_of(const MeshShape& m, int rank) { return m.ranks_per_node > 0 ? rank / m.ranks_per_node : 0; }

int num_nodes(const MeshShape& m) { return m.ranks_per_node > 0 ? world_size(m) / m.ranks_per_node : 1; }

TwoLevelGroups split_by_node(const std::vector<std::vector<int>>& groups, int ranks_per_node) {
  TwoLevelGroups out;
  for (const auto& g : groups) {
    std::vector<std::vector<int>> parts;  // by node, in order of first appearance
    std::map<int, size_t> part_of_node;
    for (int r : g) {
      int node = ranks_per_node > 0 ? r / ranks_per_node : 0;
      auto [it, fresh] = part_of_node.emplace(node, parts.size());
      if (fresh) parts.emplace_back();
      parts[it->second].push_back(r);
    }
    for (const auto& p : parts)
      require(p.size() == parts[0].size(),
              "ranks_per_node: " + std::to_string(ranks_per_node) +
                  " puts unequal numbers of a group's ranks on its nodes, so no inter-node group is regular");
    for (const auto& p : parts) out.intra.push_back(p);
    for (size_t k = 0; k < parts[0].size(); ++k) {
      std::vector<int> inter;
      for (const auto& p : parts) inter.push_back(p[k]);
      out.inter.push_back(std::move(inter));
    }
  }
  return out;
}

TwoLevelGroups split_consecutive(const std::vector<std::vector<int>>& groups, int size,
                                 std::string_view field) {
  TwoLevelGroups out;
  for (const auto& g : groups) {
    require(size > 0 && int(g.size()) % size == 0,
            std::string(field) + ": " + std::to_string(size) + " does not divide a group of " +
                std::to_string(g.size()) + " ranks");
    const int blocks = int(g.size()) / size;
    for (int b = 0; b < blocks; ++b) out.intra.emplace_back(g.begin() + b * size, g.begin() + (b + 1) * size);
    for (int k = 0; k < size; ++k) {
      std::vector<int> outer;
      for (int b = 0; b < blocks; ++b) outer.push_back(g[size_t(b * size + k)]);
      out.inter.push_back(std::move(outer));
    }
  }
  return out;
}

std::vector<std::vector<int>> whole_world(int n) {
  std::vector<int> all(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) all[size_t(i)] = i;
  return {all};
}

namespace {

std::vector<std::string_view> split_dots(std::string_view s) {
  std::vector<std::string_view> out;
  size_t b = 0;
  while (true) {
    const size_t e = s.find('.', b);
    out.push_back(s.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b));
    if (e == std::string_view::npos) return out;
    b = e + 1;
  }
}

std::string quoted(std::string_view s) {
  std::string q(1, '\'');
  q.append(s);
  q.push_back('\'');
  return q;
}

// A positive decimal integer that fits an int; InputError naming the part.
int parse_size(std::string_view digits, std::string_view part, std::string_view field) {
  int v = 0;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  require(!digits.empty() && ec == std::errc() && p == digits.data() + digits.size() && v >= 1,
          std::string(field) + ": " + quoted(part) + " needs a size, a whole number >= 1 (e.g. dp2)");
  return v;
}

}  // namespace

std::string mesh_text(const MeshShape& m) {
  std::string s;
  auto add = [&](const char* axis, int n) {
    if (n <= 1) return;
    if (!s.empty()) s.push_back('.');
    s.append(axis).append(std::to_string(n));
  };
  add("dp", m.dp);
  add("tp", m.tp);
  add("cp", m.cp);
  add("ep", m.ep);
  add("pp", m.pp);
  if (s.empty()) s = "dp1";
  if (m.ranks_per_node > 0) s.append(".rpn").append(std::to_string(m.ranks_per_node));
  return s;
}

MeshShape parse_mesh(std::string_view text, std::string_view field) {
  require(!text.empty(), std::string(field) + ": empty; give axes like dp2.tp2.pp2 (axes dp, tp, cp, ep, pp, rpn)");
  MeshShape m;
  std::vector<std::string> seen;
  for (std::string_view part : split_dots(text)) {
    size_t i = 0;
    while (i < part.size() && part[i] >= 'a' && part[i] <= 'z') ++i;
    const std::string axis(part.substr(0, i));
    const std::string_view digits = part.substr(i);
    int* slot = axis == "dp" ? &m.dp : axis == "tp" ? &m.tp : axis == "cp" ? &m.cp : axis == "ep" ? &m.ep
                : axis == "pp" ? &m.pp : axis == "rpn" ? &m.ranks_per_node : nullptr;
    require(slot != nullptr, std::string(field) + ": " + quoted(part) +
                                 " is not an axis (allowed: dp, tp, cp, ep, pp, rpn, each with a size, e.g. dp2.pp2)");
    require(std::find(seen.begin(), seen.end(), axis) == seen.end(),
            std::string(field) + ": axis " + axis + " given twice in " + quoted(text));
    seen.push_back(axis);
    *slot = parse_size(digits, part, field);
  }
  try {
    validate(m);
  } catch (const InputError& e) {
    throw InputError(std::string(field) + ": " + quoted(text) + ": " + e.what());
  }
  return m;
}

}  // namespace pb
