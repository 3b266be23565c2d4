#include "impl/context_parallel/options.h"

#include "harness/status.h"

namespace pb::cp {

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

std::vector<Fault> faults_for(const CpOptions& o, const ModelConfig& m) {
  std::vector<Fault> f = faults_for(o);
  if (o.cp > 1 && m.llama()) f.push_back(Fault::rope_local_positions);
  return f;
}

CpOptions options_of(const RunSpec& s) {
  CpOptions o;
  o.cp = s.mesh.cp;
  o.algo = s.context.algo;
  o.zigzag = s.context.zigzag;
  for (Fault f : fault_values<Fault>(s.faults, FaultAxis::context)) o.faults.insert(f);
  return o;
}

namespace {
std::vector<Fault> faults_for_spec(const RunSpec& s) { return faults_for(options_of(s), s.train.model); }
}  // namespace

std::span<const FaultDecl> fault_decls() {
  using enum Fault;
  constexpr FaultAxis X = FaultAxis::context;
  static const FaultDecl d[] = {
      {"causal_by_rank", X, uint8_t(causal_by_rank),
       "ring: blocks masked by rank order, right only for the contiguous placement",
       listed_for<causal_by_rank, faults_for_spec>},
      {"merge_no_rescale", X, uint8_t(merge_no_rescale),
       "ring: partial outputs merged without rescaling by exp(m - m_new)",
       listed_for<merge_no_rescale, faults_for_spec>},
      {"dkv_not_returned", X, uint8_t(dkv_not_returned),
       "ring backward: the last dK/dV hop is skipped; the rank keeps its neighbour's gradient",
       listed_for<dkv_not_returned, faults_for_spec>},
      {"zigzag_positions", X, uint8_t(zigzag_positions),
       "zigzag: position embeddings of the contiguous placement, not the true ones",
       listed_for<zigzag_positions, faults_for_spec>},
      {"zigzag_targets", X, uint8_t(zigzag_targets),
       "zigzag: targets of the contiguous placement, not of the tokens held",
       listed_for<zigzag_targets, faults_for_spec>},
      {"loss_per_rank", X, uint8_t(loss_per_rank),
       "the loss normalized by the rank's own tokens, not the global batch's",
       listed_for<loss_per_rank, faults_for_spec>},
      {"rope_local_positions", X, uint8_t(rope_local_positions),
       "llama: RoPE by each held token's rank-local index 0..Tl-1, not its true position",
       listed_for<rope_local_positions, faults_for_spec>}};
  return d;
}

std::string fault_name(Fault f) { return fault_name_of(fault_decls(), FaultAxis::context, uint8_t(f)); }

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
