// Schedule validator (see validate.h for the checks). Positions of every
// (op, microbatch, chunk) are indexed densely, one rank at a time (every
// structural check reads a single rank); messages are indexed by
// message_index(), so the whole validation is linear in the schedule size.
#include "impl/pipeline/validate.h"

#include <map>
#include <tuple>

#include "harness/status.h"

namespace pb::pipeline {
namespace {

// Where one (op, microbatch, chunk) occurs in a rank's list: the first two
// indices (-1: none) and how often. Dense over [op][chunk][microbatch].
struct Pos {
  int first = -1, second = -1, count = 0;
};

class RankIndex {
 public:
  RankIndex(const Schedule& s, int rank)
      : m_(s.total_microbatches()), v_(s.virtual_stages), table_(size_t(kOps) * size_t(v_) * size_t(m_)) {
    const auto& list = s.ranks[size_t(rank)];
    for (int i = 0; i < int(list.size()); ++i) {
      const Action& a = list[size_t(i)];
      Pos& p = table_[slot(a.op, a.microbatch, a.chunk)];  // in range: fields() ran first
      if (p.count == 0) p.first = i;
      if (p.count == 1) p.second = i;
      ++p.count;
    }
  }
  const Pos& at(Op op, int j, int c) const { return table_[slot(op, j, c)]; }

 private:
  static constexpr int kOps = int(Op::recv_grad) + 1;
  size_t slot(Op op, int j, int c) const {
    return (size_t(op) * size_t(v_) + size_t(c)) * size_t(m_) + size_t(j);
  }
  int m_, v_;
  std::vector<Pos> table_;
};

bool is_send(Op op) { return op == Op::send_act || op == Op::send_grad; }

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
          add(r, i,
              std::string(to_next ? "the last" : "the first") + " virtual stage has no " +
                  (to_next ? "successor" : "predecessor"));
          continue;
        }
        const int want = s_.rank_of(to_next ? vs + 1 : vs - 1);
        if (a.peer != want) add(r, i, "peer must be rank " + std::to_string(want));
      }
    }
  }

  // Stages 2 and 3: per (rank, chunk, microbatch); every check reads one rank.
  void compute_and_data() {
    for (int r = 0; r < s_.pp; ++r) {
      const RankIndex idx(s_, r);
      for (int c = 0; c < s_.virtual_stages; ++c)
        for (int j = 0; j < s_.total_microbatches(); ++j) slot(idx, r, c, j);
    }
    // Every in-range action belongs to one of these slots (fields() rejected
    // the rest), so a stray or duplicated action is always reported here.
  }

  void matching(SendMode mode) {
    const size_t n = size_t(num_messages(s_));
    std::vector<std::pair<int, int>> sends(n, {-1, -1}), recvs(n, {-1, -1});  // -> (rank, index)
    std::map<std::tuple<int, int, bool>, std::vector<std::pair<int64_t, int>>> sent, received;
    for (int r = 0; r < s_.pp; ++r)
      for (int i = 0; i < int(s_.ranks[size_t(r)].size()); ++i) {
        const Action& a = s_.ranks[size_t(r)][size_t(i)];
        if (is_compute(a.op)) continue;
        const MessageKey k = message_key(s_, r, a);
        const int64_t id = message_index(s_, k);
        const bool tx = is_send(a.op);
        auto& slot = (tx ? sends : recvs)[size_t(id)];
        if (slot.first >= 0) add(r, i, "the same message appears twice");
        slot = {r, i};
        const bool kind = mode == SendMode::grouped ? false : k.grad;  // no tags: one channel per pair
        if (tx)
          sent[{r, a.peer, kind}].push_back({id, i});
        else
          received[{a.peer, r, kind}].push_back({id, i});
      }
    for (size_t id = 0; id < n; ++id) {
      if (sends[id].first >= 0 && recvs[id].first < 0)
        add(sends[id].first, sends[id].second, "no matching receive on the peer");
      if (recvs[id].first >= 0 && sends[id].first < 0)
        add(recvs[id].first, recvs[id].second, "no matching send on the peer");
    }
    for (const auto& [ch, rx] : received) {
      const auto& tx = sent[ch];
      const auto [src, dst, grad] = ch;
      for (size_t k = 0; k < rx.size() && k < tx.size(); ++k)
        if (rx[k].first != tx[k].first) {
          add(dst, rx[k].second,
              "out of order on channel r" + std::to_string(src) + "->r" + std::to_string(dst) +
                  (mode == SendMode::grouped ? " (untagged)" : grad ? " (grad)" : " (act)") +
                  ": the sender's message number " + std::to_string(k) +
                  " is " + action_str(s_.ranks[size_t(src)][size_t(tx[k].second)]));
          break;
        }
    }
  }

  // Stage 5: blocking receives; sends per `mode`. Worklist: a rank runs until
  // it blocks; completing a message re-queues the peer.
  void deadlock(SendMode mode) {
    const int p = s_.pp;
    const size_t n = size_t(num_messages(s_));
    std::vector<size_t> at(size_t(p), 0);
    std::vector<size_t> end(size_t(p), 0);  // grouped: the end of the run posted at at[r] (> at[r]: posted)
    std::vector<char> sent(n, 0), received(n, 0);  // the halves posted (buffered: sent only)
    auto head = [&](int r) -> const Action* {
      const auto& l = s_.ranks[size_t(r)];
      return at[size_t(r)] < l.size() ? &l[at[size_t(r)]] : nullptr;
    };
    auto id_of = [&](int r, const Action& a) { return size_t(message_index(s_, message_key(s_, r, a))); };
    auto complete = [&](size_t id) { return sent[id] && received[id]; };
    std::vector<std::vector<std::pair<size_t, size_t>>> groups(static_cast<size_t>(p));  // grouped: the executor's posting
    std::vector<size_t> gi(size_t(p), 0);
    if (mode == SendMode::grouped)
      for (int r = 0; r < p; ++r) groups[size_t(r)] = posting_groups(s_, r);
    std::vector<int> work;
    std::vector<char> queued(size_t(p), 1);
    for (int r = p - 1; r >= 0; --r) work.push_back(r);
    auto wake = [&](int r) {
      if (queued[size_t(r)]) return;
      queued[size_t(r)] = 1;
      work.push_back(r);
    };
    while (!work.empty()) {
      const int r = work.back();
      work.pop_back();
      queued[size_t(r)] = 0;
      const auto& list = s_.ranks[size_t(r)];
      while (const Action* a = head(r)) {
        if (!is_compute(a->op)) {
          if (mode == SendMode::buffered) {
            if (is_send(a->op)) {
              sent[id_of(r, *a)] = 1;
              wake(a->peer);
            } else if (!sent[id_of(r, *a)]) {
              break;
            }
          } else if (mode == SendMode::rendezvous) {  // completes when both sides are at their halves
            const Action* b = head(a->peer);
            if (!b || is_compute(b->op) || is_send(b->op) == is_send(a->op) || id_of(a->peer, *b) != id_of(r, *a))
              break;
            ++at[size_t(a->peer)];
            wake(a->peer);
          } else {  // grouped: post the group, go on when all of its messages are complete
            size_t& e = end[size_t(r)];
            if (e <= at[size_t(r)]) {
              while (groups[size_t(r)][gi[size_t(r)]].first != at[size_t(r)]) ++gi[size_t(r)];
              const size_t last = groups[size_t(r)][gi[size_t(r)]].second;
              for (e = at[size_t(r)]; e < last; ++e) {
                (is_send(list[e].op) ? sent : received)[id_of(r, list[e])] = 1;
                wake(list[e].peer);
              }
            }
            bool done = true;
            for (size_t i = at[size_t(r)]; i < e && done; ++i) done = complete(id_of(r, list[i]));
            if (!done) break;
            at[size_t(r)] = e;
            continue;
          }
        }
        ++at[size_t(r)];
      }
    }
    // What a blocked rank waits for: its head, or (grouped) its run's first incomplete message.
    auto blocked_at = [&](int r) {
      size_t i = at[size_t(r)];
      if (mode == SendMode::grouped)
        while (i + 1 < end[size_t(r)] && complete(id_of(r, s_.ranks[size_t(r)][i]))) ++i;
      return i;
    };
    for (int r = 0; r < p; ++r)
      if (const Action* a = head(r)) {
        const size_t i = blocked_at(r);
        a = &s_.ranks[size_t(r)][i];
        std::string why = "deadlock: blocked here";
        if (!is_compute(a->op)) {
          const Action* peer = head(a->peer);
          why += ", waiting for rank " + std::to_string(a->peer) + ", which " +
                 (peer ? "is blocked at action " + std::to_string(blocked_at(a->peer)) + " (" +
                             action_str(s_.ranks[size_t(a->peer)][blocked_at(a->peer)]) + ")"
                       : std::string("has finished"));
        }
        add(r, int(i), why);
      }
  }

 private:
  void add(int r, int i, std::string why) { out_.push_back({r, i, std::move(why)}); }

  // Exactly one `op` for (j, c) on rank r; returns its index or -1 (reported).
  int once(const RankIndex& idx, int r, Op op, int j, int c, const std::string& role) {
    const Pos& p = idx.at(op, j, c);
    if (p.count == 0) add(r, -1, where(s_, r, j, c) + " has no " + std::string(op_name(op)) + role);
    if (p.count > 1)
      add(r, p.second,
          "second " + std::string(op_name(op)) + " of " + where(s_, r, j, c) + " (first at action " +
              std::to_string(p.first) + ")");
    return p.first;
  }
  void none(const RankIndex& idx, int r, Op op, int j, int c, const std::string& why) {
    if (idx.at(op, j, c).count > 0) add(r, idx.at(op, j, c).first, why);
  }

  void slot(const RankIndex& idx, int r, int c, int j) {
    const int vs = s_.virtual_stage(r, c), last = s_.num_virtual_stages() - 1;
    const bool remote = s_.pp > 1;
    const int f = once(idx, r, Op::forward, j, c, "");
    int bin = -1;  // the backward that produces the input gradient (B or BW)
    if (s_.split_backward) {
      none(idx, r, Op::backward, j, c, "BW in a split-backward schedule (expected B then W)");
      bin = once(idx, r, Op::backward_input, j, c, "");
      const int w = once(idx, r, Op::backward_weight, j, c, "");
      if (w >= 0 && bin >= 0 && w < bin) add(r, w, "W before its B (at action " + std::to_string(bin) + ")");
    } else {
      none(idx, r, Op::backward_input, j, c, "B in a schedule without split backward (expected BW)");
      none(idx, r, Op::backward_weight, j, c, "W in a schedule without split backward (expected BW)");
      bin = once(idx, r, Op::backward, j, c, "");
    }
    if (f >= 0 && bin >= 0 && bin < f)
      add(r, bin,
          std::string(op_name(s_.ranks[size_t(r)][size_t(bin)].op)) + " before its F (at action " +
              std::to_string(f) + ")");
    if (vs > 0) {  // input activation
      if (!remote) {
        const int prev = idx.at(Op::forward, j, c - 1).first;
        if (f >= 0 && prev > f)
          add(r, f, "F before the F of virtual stage " + std::to_string(vs - 1) + " that feeds it");
      } else {
        const int rx = once(idx, r, Op::recv_act, j, c, " (its F's input)");
        if (rx >= 0 && f >= 0 && rx > f)
          add(r, f, "F before the RECV_ACT of its input (at action " + std::to_string(rx) + ")");
      }
    }
    if (vs < last) {  // output gradient
      if (!remote) {
        const Op bop = s_.split_backward ? Op::backward_input : Op::backward;
        const int next = idx.at(bop, j, c + 1).first;
        if (bin >= 0 && next > bin)
          add(r, bin,
              "backward before the backward of virtual stage " + std::to_string(vs + 1) + " that feeds it");
      } else {
        const int rx = once(idx, r, Op::recv_grad, j, c, " (its backward's output gradient)");
        if (rx >= 0 && bin >= 0 && rx > bin)
          add(r, bin, "backward before the RECV_GRAD of its gradient (at action " + std::to_string(rx) + ")");
        const int tx = once(idx, r, Op::send_act, j, c, " (its F's output)");
        if (tx >= 0 && f >= 0 && tx < f)
          add(r, tx, "SEND_ACT before the F that produces it (at action " + std::to_string(f) + ")");
      }
    }
    if (vs > 0 && remote) {
      const int tx = once(idx, r, Op::send_grad, j, c, " (its input gradient)");
      if (tx >= 0 && bin >= 0 && tx < bin)
        add(r, tx, "SEND_GRAD before the backward that produces it (at action " + std::to_string(bin) + ")");
    }
  }

  const Schedule& s_;
  std::vector<Issue>& out_;
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
    out.push_back(
        {0, -1, "metadata: pp, microbatches, virtual_stages, steps must be >= 1 and ranks.size() == pp"});
    return out;
  }
  Checker c(s, out);
  c.fields();
  if (!out.empty()) return out;
  c.compute_and_data();
  if (!out.empty()) return out;
  c.matching(mode);
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

Schedule posted_without_tags(Schedule s, std::string_view transport) {
  const std::vector<Issue> as_is = find_issues(s, SendMode::grouped);
  if (as_is.empty()) return s;
  Schedule paired = pair_forward_backward(s);
  if (find_issues(paired, SendMode::grouped).empty()) return paired;
  throw InputError("schedule: " + s.name + " cannot run on " + std::string(transport) +
                   " (messages match in order, sends wait for their receives), not even with each forward and "
                   "backward between one exchange: " +
                   issue_str(s, as_is.front()));
}

}  // namespace pb::pipeline
