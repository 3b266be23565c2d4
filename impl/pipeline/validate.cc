// Schedule validator (see validate.h for the checks). Positions of every
// (op, microbatch, chunk) are indexed per rank once; each stage reads them.
#include "impl/pipeline/validate.h"

#include <map>
#include <tuple>

#include "harness/status.h"

namespace pb::pipeline {
namespace {

using Slot = std::tuple<Op, int, int>;  // (op, microbatch, chunk)
using Positions = std::map<Slot, std::vector<int>>;

std::string where(const Schedule& s, int rank, int mb, int chunk) {
  return "microbatch " + std::to_string(mb) + " chunk " + std::to_string(chunk) + " (virtual stage " +
         std::to_string(s.virtual_stage(rank, chunk)) + ")";
}

class Checker {
 public:
  Checker(const Schedule& s, std::vector<Issue>& out) : s_(s), out_(out) {}

  void fields() {
    const int last = s_.num_virtual_stages() - 1;
    for (int r = 0; r < s_.pp; ++r) {
      const auto& list = s_.ranks[size_t(r)];
      for (int i = 0; i < int(list.size()); ++i) {
        const Action& a = list[size_t(i)];
        if (a.microbatch < 0 || a.microbatch >= s_.total_microbatches()) {
          add(r, i, "microbatch out of range [0, " + std::to_string(s_.total_microbatches()) + ")");
          continue;
        }
        if (a.chunk < 0 || a.chunk >= s_.virtual_stages) {
          add(r, i, "chunk out of range [0, " + std::to_string(s_.virtual_stages) + ")");
          continue;
        }
        if (is_compute(a.op)) continue;
        if (s_.pp == 1) {
          add(r, i, "communication with pp = 1 (consecutive chunks hand over locally)");
          continue;
        }
        const int vs = s_.virtual_stage(r, a.chunk);
        const bool to_next = a.op == Op::send_act || a.op == Op::recv_grad;
        if (to_next ? vs == last : vs == 0) {
          add(r, i, std::string(to_next ? "the last" : "the first") + " virtual stage has no " +
                        (to_next ? "successor" : "predecessor"));
          continue;
        }
        const int want = s_.rank_of(to_next ? vs + 1 : vs - 1);
        if (a.peer != want) add(r, i, "peer must be rank " + std::to_string(want));
      }
    }
  }

  void index() {
    pos_.assign(size_t(s_.pp), {});
    for (int r = 0; r < s_.pp; ++r)
      for (int i = 0; i < int(s_.ranks[size_t(r)].size()); ++i) {
        const Action& a = s_.ranks[size_t(r)][size_t(i)];
        pos_[size_t(r)][{a.op, a.microbatch, a.chunk}].push_back(i);
      }
  }

  // Stages 2 and 3: per (rank, chunk, microbatch).
  void compute_and_data() {
    for (int r = 0; r < s_.pp; ++r)
      for (int c = 0; c < s_.virtual_stages; ++c)
        for (int j = 0; j < s_.total_microbatches(); ++j) slot(r, c, j);
    // Every in-range action belongs to one of these slots (fields() rejected
    // the rest), so a stray or duplicated action is always reported here.
  }

  void matching() {
    std::map<MessageKey, std::pair<int, int>> sends, recvs;  // key -> (rank, index)
    std::map<std::tuple<int, int, bool>, std::vector<std::pair<MessageKey, int>>> sent, received;
    for (int r = 0; r < s_.pp; ++r)
      for (int i = 0; i < int(s_.ranks[size_t(r)].size()); ++i) {
        const Action& a = s_.ranks[size_t(r)][size_t(i)];
        if (is_compute(a.op)) continue;
        const MessageKey k = message_key(s_, r, a);
        const bool is_send = a.op == Op::send_act || a.op == Op::send_grad;
        auto& table = is_send ? sends : recvs;
        if (!table.emplace(k, std::pair{r, i}).second) add(r, i, "the same message appears twice");
        if (is_send) sent[{r, a.peer, k.grad}].push_back({k, i});
        else received[{a.peer, r, k.grad}].push_back({k, i});
      }
    for (const auto& [k, ri] : sends)
      if (!recvs.count(k)) add(ri.first, ri.second, "no matching receive on the peer");
    for (const auto& [k, ri] : recvs)
      if (!sends.count(k)) add(ri.first, ri.second, "no matching send on the peer");
    for (const auto& [ch, rx] : received) {
      const auto& tx = sent[ch];
      for (size_t n = 0; n < rx.size() && n < tx.size(); ++n)
        if (rx[n].first != tx[n].first) {
          add(std::get<1>(ch), rx[n].second,
              "out of order on channel r" + std::to_string(std::get<0>(ch)) + "->r" +
                  std::to_string(std::get<1>(ch)) + (std::get<2>(ch) ? " (grad)" : " (act)") +
                  ": the sender's message number " + std::to_string(n) + " is " +
                  action_str(s_.ranks[size_t(std::get<0>(ch))][size_t(tx[n].second)]));
          break;
        }
    }
  }

  // Stage 5: blocking receives; sends per `mode`.
  void deadlock(SendMode mode) {
    const int p = s_.pp;
    std::vector<size_t> at(size_t(p), 0);
    std::map<MessageKey, bool> posted;  // buffered: message sent
    auto head = [&](int r) -> const Action* {
      const auto& l = s_.ranks[size_t(r)];
      return at[size_t(r)] < l.size() ? &l[at[size_t(r)]] : nullptr;
    };
    auto is_recv = [](Op op) { return op == Op::recv_act || op == Op::recv_grad; };
    for (bool progress = true; progress;) {
      progress = false;
      for (int r = 0; r < p; ++r)
        while (const Action* a = head(r)) {
          if (is_compute(a->op)) {
          } else if (is_recv(a->op)) {
            if (mode == SendMode::buffered) {
              if (!posted[message_key(s_, r, *a)]) break;
            } else {
              const Action* peer = head(a->peer);
              if (!peer || is_compute(peer->op) || is_recv(peer->op) ||
                  message_key(s_, a->peer, *peer) != message_key(s_, r, *a))
                break;
              ++at[size_t(a->peer)];  // the rendezvous completes both sides
            }
          } else if (mode == SendMode::buffered) {
            posted[message_key(s_, r, *a)] = true;
          } else {
            break;  // a rendezvous send completes from its receiver's side
          }
          ++at[size_t(r)];
          progress = true;
        }
    }
    for (int r = 0; r < p; ++r)
      if (const Action* a = head(r)) {
        std::string why = "deadlock: blocked here";
        if (!is_compute(a->op)) {
          const Action* peer = head(a->peer);
          why += ", waiting for rank " + std::to_string(a->peer) + ", which " +
                 (peer ? "is blocked at action " + std::to_string(at[size_t(a->peer)]) + " (" +
                             action_str(*peer) + ")"
                       : std::string("has finished"));
        }
        add(r, int(at[size_t(r)]), why);
      }
  }

 private:
  void add(int r, int i, std::string why) { out_.push_back({r, i, std::move(why)}); }

  const std::vector<int>& at(int r, Op op, int j, int c) {
    static const std::vector<int> none;
    auto it = pos_[size_t(r)].find({op, j, c});
    return it == pos_[size_t(r)].end() ? none : it->second;
  }

  // Exactly one `op` for (j, c) on rank r; returns its index or -1 (reported).
  int once(int r, Op op, int j, int c, const std::string& role) {
    const auto& v = at(r, op, j, c);
    if (v.empty()) add(r, -1, where(s_, r, j, c) + " has no " + std::string(op_name(op)) + role);
    if (v.size() > 1)
      add(r, v[1], "second " + std::string(op_name(op)) + " of " + where(s_, r, j, c) +
                       " (first at action " + std::to_string(v[0]) + ")");
    return v.empty() ? -1 : v[0];
  }
  void none(int r, Op op, int j, int c, const std::string& why) {
    for (int i : at(r, op, j, c)) add(r, i, why);
  }

  void slot(int r, int c, int j) {
    const int vs = s_.virtual_stage(r, c), last = s_.num_virtual_stages() - 1;
    const bool remote = s_.pp > 1;
    const int f = once(r, Op::forward, j, c, "");
    int bin = -1;  // the backward that produces the input gradient (B or BW)
    if (s_.split_backward) {
      none(r, Op::backward, j, c, "BW in a split-backward schedule (expected B then W)");
      bin = once(r, Op::backward_input, j, c, "");
      const int w = once(r, Op::backward_weight, j, c, "");
      if (w >= 0 && bin >= 0 && w < bin) add(r, w, "W before its B (at action " + std::to_string(bin) + ")");
    } else {
      none(r, Op::backward_input, j, c, "B in a schedule without split backward (expected BW)");
      none(r, Op::backward_weight, j, c, "W in a schedule without split backward (expected BW)");
      bin = once(r, Op::backward, j, c, "");
    }
    if (f >= 0 && bin >= 0 && bin < f)
      add(r, bin, std::string(op_name(s_.ranks[size_t(r)][size_t(bin)].op)) + " before its F (at action " +
                      std::to_string(f) + ")");
    if (vs > 0) {  // input activation
      if (!remote) {
        const auto& prev = at(r, Op::forward, j, c - 1);
        if (f >= 0 && !prev.empty() && prev[0] > f)
          add(r, f, "F before the F of virtual stage " + std::to_string(vs - 1) + " that feeds it");
      } else {
        const int rx = once(r, Op::recv_act, j, c, " (its F's input)");
        if (rx >= 0 && f >= 0 && rx > f) add(r, f, "F before the RECV_ACT of its input (at action " + std::to_string(rx) + ")");
      }
    }
    if (vs < last) {  // output gradient
      if (!remote) {
        const Op bop = s_.split_backward ? Op::backward_input : Op::backward;
        const auto& next = at(r, bop, j, c + 1);
        if (bin >= 0 && !next.empty() && next[0] > bin)
          add(r, bin, "backward before the backward of virtual stage " + std::to_string(vs + 1) + " that feeds it");
      } else {
        const int rx = once(r, Op::recv_grad, j, c, " (its backward's output gradient)");
        if (rx >= 0 && bin >= 0 && rx > bin)
          add(r, bin, "backward before the RECV_GRAD of its gradient (at action " + std::to_string(rx) + ")");
        const int tx = once(r, Op::send_act, j, c, " (its F's output)");
        if (tx >= 0 && f >= 0 && tx < f) add(r, tx, "SEND_ACT before the F that produces it (at action " + std::to_string(f) + ")");
      }
    }
    if (vs > 0 && remote) {
      const int tx = once(r, Op::send_grad, j, c, " (its input gradient)");
      if (tx >= 0 && bin >= 0 && tx < bin)
        add(r, tx, "SEND_GRAD before the backward that produces it (at action " + std::to_string(bin) + ")");
    }
  }

  const Schedule& s_;
  std::vector<Issue>& out_;
  std::vector<Positions> pos_;
};

}  // namespace

std::string issue_str(const Schedule& s, const Issue& i) {
  std::string head = "rank " + std::to_string(i.rank);
  if (i.index >= 0) {
    head += ", action " + std::to_string(i.index);
    if (i.rank >= 0 && i.rank < s.pp && i.index < int(s.ranks[size_t(i.rank)].size()))
      head += " (" + action_str(s.ranks[size_t(i.rank)][size_t(i.index)]) + ")";
  }
  return head + ": " + i.reason;
}

std::vector<Issue> find_issues(const Schedule& s, SendMode mode) {
  std::vector<Issue> out;
  if (s.pp < 1 || int(s.ranks.size()) != s.pp || s.microbatches < 1 || s.virtual_stages < 1 || s.steps < 1) {
    out.push_back({0, -1, "metadata: pp, microbatches, virtual_stages, steps must be >= 1 and ranks.size() == pp"});
    return out;
  }
  Checker c(s, out);
  c.fields();
  if (!out.empty()) return out;
  c.index();
  c.compute_and_data();
  if (!out.empty()) return out;
  c.matching();
  if (!out.empty()) return out;
  c.deadlock(mode);
  return out;
}

void validate(const Schedule& s, SendMode mode) {
  const auto issues = find_issues(s, mode);
  if (issues.empty()) return;
  std::string msg = "schedule " + s.name + ": invalid:";
  const size_t shown = std::min<size_t>(issues.size(), 8);
  for (size_t n = 0; n < shown; ++n) msg += "\n  " + issue_str(s, issues[n]);
  if (issues.size() > shown) msg += "\n  ... and " + std::to_string(issues.size() - shown) + " more";
  throw InputError(msg);
}

}  // namespace pb::pipeline
