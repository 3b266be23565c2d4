#include "impl/context_parallel/options.h"

#include "harness/status.h"
#include "harness/names.h"

namespace pb::cp {

namespace {
const Names<Fault>& names() {
  static const Names<Fault> n{{Fault::causal_by_rank, "causal_by_rank"},
                              {Fault::merge_no_rescale, "merge_no_rescale"},
                              {Fault::dkv_not_returned, "dkv_not_returned"},
                              {Fault::zigzag_positions, "zigzag_positions"},
                              {Fault::zigzag_targets, "zigzag_targets"},
                              {Fault::loss_per_rank, "loss_per_rank"}};
  return n;
}
}  // namespace

std::string fault_name(Fault f) { return names().name(f); }

bool is_fault(const std::string& s) { return names().has(s); }

Fault parse_fault(const std::string& s, const std::string& field) {
  return names().parse(s, field, "context-parallel fault");
}

std::vector<Fault> faults_for(const CpOptions& o) {
  std::vector<Fault> f;
  if (o.cp == 1) return f;
  if (o.algo == CpAlgo::ring) {
    if (o.zigzag) f.push_back(Fault::causal_by_rank);
    f.push_back(Fault::merge_no_rescale);
    f.push_back(Fault::dkv_not_returned);
  }
  if (o.zigzag) f.push_back(Fault::zigzag_positions), f.push_back(Fault::zigzag_targets);
  f.push_back(Fault::loss_per_rank);
  return f;
}

Placement::Placement(int Tn, int cp, int rank, bool zigzag) : Tn_(Tn), cp_(cp), rank_(rank) {
  require(cp >= 1 && rank >= 0 && rank < cp && Tn % cp == 0, "cp: bad placement");
  if (!zigzag || cp == 1) {
    runs_ = {{0, rank * (Tn / cp), Tn / cp}};
    return;
  }
  require(Tn % (2 * cp) == 0, "cp: zigzag needs Tn % 2cp == 0");
  const int Tc = Tn / (2 * cp);
  runs_ = {{0, rank * Tc, Tc}, {Tc, (2 * cp - 1 - rank) * Tc, Tc}};
}

int Placement::position(int t) const {
  for (const Run& r : runs_)
    if (t >= r.local && t < r.local + r.len) return r.pos + (t - r.local);
  return -1;
}

void validate_seq(int Tn, int cp, bool zigzag, const std::string& field) {
  if (cp <= 1) return;
  const int parts = zigzag ? 2 * cp : cp;
  require(Tn % parts == 0, field + ": seq " + std::to_string(Tn) + " does not split into " + std::to_string(parts) +
                               (zigzag ? " zigzag chunks (2 x cp" + std::to_string(cp) + ")"
                                       : " contiguous chunks (cp" + std::to_string(cp) + ")") +
                               ": seq % " + std::to_string(parts) + " = " + std::to_string(Tn % parts));
}

}  // namespace pb::cp
