// Options of the context axis as a rank runs them (the run spec's
// ContextOptions with the mesh's cp), where each token of a sequence lives,
// and the test-only faults the checker's teeth are tested with.
//
// Token placement. A sequence of Tn tokens is cut over cp ranks:
//  - contiguous: rank r holds positions [r*Tn/cp, (r+1)*Tn/cp);
//  - zigzag (causal load balancing, Megatron-LM's context parallel and
//    ring-flash-attn's zigzag): the sequence is cut into 2*cp chunks of
//    Tc = Tn/(2cp) and rank r holds chunks r and 2cp-1-r, in that order, so
//    every rank has the same causal work (an early chunk sees few keys, its
//    partner many).
// Every token keeps its true position: the position embedding, the causal
// mask and the target are those of its position in the whole sequence.
#pragma once
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "impl/spec/fault.h"
#include "impl/spec/run_spec.h"

namespace pb::cp {

// Injected faults (test-only): each must make the conformance engine fail.
enum class Fault : uint8_t {
  causal_by_rank,     // ring: blocks masked by rank order (earlier rank: all visible, later: none,
                      //   own: causal on local indices), right only for contiguous placement
  merge_no_rescale,   // ring: partial outputs merged without rescaling by exp(m - m_new)
  dkv_not_returned,   // ring backward: the last dK/dV hop is skipped; the rank keeps its
                      //   neighbour's accumulated gradient (Megatron-LM issue 1464's class)
  zigzag_positions,   // zigzag: position embeddings of the contiguous placement, not the true ones
  zigzag_targets,     // zigzag: targets of the contiguous placement, not of the tokens held
  loss_per_rank,      // the loss normalized by the rank's own tokens, not the global batch's
  rope_local_positions,  // llama: RoPE turns each held token by its rank-local index 0..Tl-1, not its
                         //   true position (issue 46's class; cross-rank query-key pairs see wrong offsets)
};
std::string fault_name(Fault f);
std::span<const FaultDecl> fault_decls();  // impl/spec/fault.h

struct CpOptions {
  int cp = 1;
  CpAlgo algo = CpAlgo::ring;
  bool zigzag = true;
  std::set<Fault> faults;
  bool has(Fault f) const { return faults.count(f) > 0; }
};
// The faults that apply to these options (none at cp = 1); with the model,
// the llama family's too (RoPE: zigzag_positions turns by the contiguous
// placement's positions there, there being no position embedding).
std::vector<Fault> faults_for(const CpOptions& o);
std::vector<Fault> faults_for(const CpOptions& o, const ModelConfig& m);
// The context axis of `s`, its faults included.
CpOptions options_of(const RunSpec& s);

// One run of consecutive positions a rank holds: local tokens
// [local, local + len) are positions [pos, pos + len).
struct Run {
  int local = 0, pos = 0, len = 0;
};

// Where rank `rank`'s tokens of a sequence of Tn sit.
class Placement {
 public:
  Placement(int Tn, int cp, int rank, bool zigzag);
  int tokens() const { return Tn_ / cp_; }    // per sequence, on this rank
  int position(int t) const;                  // true position of local token t
  const std::vector<Run>& runs() const { return runs_; }
  int rank() const { return rank_; }

 private:
  int Tn_, cp_, rank_;
  std::vector<Run> runs_;
};
// The rule a sequence length must meet: Tn % cp == 0, and % 2cp with zigzag.
// InputError naming `field` otherwise.
void validate_seq(int Tn, int cp, bool zigzag, const std::string& field);

}  // namespace pb::cp
