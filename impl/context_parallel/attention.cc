#include "impl/context_parallel/attention.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>

#include "harness/status.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"

namespace pb::cp {

namespace k = kernels;
using k::detail::add_into;

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<Placement> placements(int Tn, int cp, bool zigzag) {
  std::vector<Placement> p;
  for (int r = 0; r < cp; ++r) p.emplace_back(Tn, cp, r, zigzag);
  return p;
}

// Visible (query, key) pairs of a causal block by position.
int64_t visible_pairs(int Tq, int Tk, int q0, int k0, bool causal) {
  if (!causal) return int64_t(Tq) * Tk;
  int64_t n = 0;
  for (int i = 0; i < Tq; ++i) n += std::clamp(q0 + i - k0 + 1, 0, Tk);
  return n;
}

// Merge without the rescaling (the merge_no_rescale fault).
template <class A>
void merge_unscaled(A* o, A* m, A* l, const A* o2, const A* m2, const A* l2, int Tq, int hs) {
  for (int i = 0; i < Tq; ++i) {
    if (m2[i] == -std::numeric_limits<A>::infinity()) continue;
    for (int c = 0; c < hs; ++c) o[size_t(i) * hs + c] += o2[size_t(i) * hs + c];
    l[i] += l2[i];
    m[i] = std::max(m[i], m2[i]);
  }
}
}  // namespace

// ---- ring ------------------------------------------------------------------

template <class T>
RingAttention<T>::RingAttention(const CpOptions& o, Communicator* cp, MemoryTracker* mt, int Bm, int Tn, int H,
                                int hs, bool overlap, const k::DeviceOps<T>& ops, int KV)
    : o_(o), comm_(cp), ops_(&ops), overlap_(overlap), Bm_(Bm), Tn_(Tn), H_(H), hs_(hs) {
  require(cp && cp->size() == o.cp, "cp: the group's size differs from cp");
  require(ops.is_host() || !o.has(Fault::merge_no_rescale), "cp: the merge_no_rescale fault runs on the CPU only");
  KV_ = KV > 0 ? KV : H;
  require(H % KV_ == 0, "cp: the ring's kv heads must divide its query heads");
  KVc_ = KV_ * hs;
  g_ = H / KV_;
  Tl_ = Tn / o.cp;
  Ct_ = H * hs;
  N_ = Bm * Tl_;
  place_ = placements(Tn, o.cp, o.zigzag);
  const size_t N = size_t(N_), Ct = size_t(Ct_), KVc = size_t(KVc_), rows = size_t(Bm) * H * Tl_;
  const MemTag w = MemTag::workspace;
  kv_a_ = Buffer<T>(mt, w, 2 * N * KVc);
  kv_b_ = Buffer<T>(mt, w, 2 * N * KVc);
  o_acc_ = Buffer<A>(mt, w, N * Ct);
  m_ = Buffer<A>(mt, w, rows);
  l_ = Buffer<A>(mt, w, rows);
  o2_ = Buffer<A>(mt, w, size_t(Tl_) * hs);
  m2_ = Buffer<A>(mt, w, size_t(Tl_));
  l2_ = Buffer<A>(mt, w, size_t(Tl_));
  D_ = Buffer<A>(mt, w, rows);
  dq_ = Buffer<A>(mt, w, N * Ct);
  dkv_own_ = Buffer<A>(mt, w, 2 * N * KVc);
  part_a_ = Buffer<A>(mt, w, 2 * N * KVc);
  part_b_ = Buffer<A>(mt, w, 2 * N * KVc);
  trav_ = Buffer<A>(mt, w, 2 * N * KVc);
}

template <class T>
int64_t RingAttention<T>::workspace_bytes(int Bm, int Tn, int cp, int H, int hs, int KV) {
  const int64_t Tl = Tn / cp, N = int64_t(Bm) * Tl, Ct = int64_t(H) * hs, rows = int64_t(Bm) * H * Tl;
  const int64_t KVc = int64_t(KV > 0 ? KV : H) * hs, t = sizeof(T), a = sizeof(A);
  return 2 * (2 * N * KVc) * t + a * (N * Ct + 2 * rows + Tl * hs + 2 * Tl + rows + N * Ct + 4 * (2 * N * KVc));
}

// Posts `cur` to the next rank and the previous rank's block into `nxt`
// (receive first); the caller groups it with the step's other messages.
template <class T>
typename RingAttention<T>::Hop RingAttention<T>::post_kv(const T* cur, T* nxt) const {
  const int cp = o_.cp, me = comm_->rank();
  const size_t kvn = size_t(2) * N_ * KVc_;
  Hop h;
  h.recv = comm_->irecv(nxt, kvn, dtype_of<T>(), (me + cp - 1) % cp, 1);
  h.send = comm_->isend(cur, kvn, dtype_of<T>(), (me + 1) % cp, 1);
  return h;
}

template <class T>
void RingAttention<T>::pack_kv(T* kv, const T* qkv) const {
  ops_->copy_rows(kv, size_t(2) * KVc_, qkv + Ct_, size_t(Ct_ + 2 * KVc_), size_t(2) * KVc_, size_t(N_));
}

// The block pairs of this rank's queries against rank src's keys: f(b, h,
// query run, key run, causal, q_pos0, k_pos0), fully masked pairs skipped.
template <class T>
template <class F>
void RingAttention<T>::blocks(int src, F&& f) const {
  const int me = comm_->rank();
  const bool by_rank = o_.has(Fault::causal_by_rank);
  if (by_rank && src > me) return;  // the fault: a later rank's keys are all masked
  for (int b = 0; b < Bm_; ++b)
    for (int h = 0; h < H_; ++h)
      for (const Run& q : place_[size_t(me)].runs())
        for (const Run& kr : place_[size_t(src)].runs()) {
          if (by_rank) {  // earlier rank: all visible; own: causal on local indices
            f(b, h, q, kr, src == me, q.local, kr.local);
            continue;
          }
          if (kr.pos > q.pos + q.len - 1) continue;  // every key after every query
          f(b, h, q, kr, true, q.pos, kr.pos);
        }
}

template <class T>
void RingAttention<T>::forward(T* out, A* lse, const T* qkv) {
  const int cp = o_.cp, me = comm_->rank();
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  pack_kv(kv_a_.data(), qkv);
  ops_->fill_acc(o_acc_.data(), 0, o_acc_.size());
  ops_->fill_acc(m_.data(), kNegInf, m_.size());
  ops_->fill_acc(l_.data(), 0, l_.size());
  T* cur = kv_a_.data();
  T* nxt = kv_b_.data();
  const int C3 = Ct_ + 2 * KVc_, C2 = 2 * KVc_;
  for (int j = 0; j < cp; ++j) {
    const int src = (me - j + cp) % cp;
    Hop hop;
    const bool more = j + 1 < cp;
    if (more && overlap_) hop = post_hop(cur, nxt);
    const auto t0 = Clock::now();
    int last_b = -1, last_h = -1;
    const Run* last_q = nullptr;
    auto flush = [&] {  // merge the partial state of the last (b, h, query run)
      if (!last_q) return;
      const size_t s = (size_t(last_b) * H_ + last_h) * Tl_ + last_q->local;
      if (o_.has(Fault::merge_no_rescale))
        merge_unscaled(o_acc_.data() + s * hs_, m_.data() + s, l_.data() + s, o2_.data(), m2_.data(), l2_.data(),
                       last_q->len, hs_);
      else
        ops_->attention_block_merge(o_acc_.data() + s * hs_, m_.data() + s, l_.data() + s, o2_.data(), m2_.data(),
                                    l2_.data(), last_q->len, hs_);
      last_q = nullptr;
    };
    blocks(src, [&](int b, int h, const Run& q, const Run& kr, bool causal, int q0, int k0) {
      if (!last_q || b != last_b || h != last_h || q.local != last_q->local) {
        flush();
        ops_->fill_acc(o2_.data(), 0, size_t(q.len) * hs_);
        ops_->fill_acc(m2_.data(), kNegInf, size_t(q.len));
        ops_->fill_acc(l2_.data(), 0, size_t(q.len));
        last_b = b, last_h = h, last_q = &q;
      }
      const T* qp = qkv + (size_t(b) * Tl_ + q.local) * C3 + size_t(h) * hs_;
      const T* kp = cur + (size_t(b) * Tl_ + kr.local) * C2 + size_t(h / g_) * hs_;
      ops_->attention_block_forward(o2_.data(), m2_.data(), l2_.data(), qp, kp, kp + KVc_, q.len, kr.len, hs_, C3, C2,
                                    q0, k0, causal);
      stats_.flops += 4 * int64_t(hs_) * visible_pairs(q.len, kr.len, q0, k0, causal);
    });
    flush();
    stats_.compute_s += since(t0);
    if (more) {
      const auto t1 = Clock::now();
      if (!overlap_) hop = post_hop(cur, nxt);
      hop.wait();
      stats_.wait_s += since(t1);
      std::swap(cur, nxt);
    }
  }
  for (int b = 0; b < Bm_; ++b)
    for (int h = 0; h < H_; ++h) {
      const size_t s = (size_t(b) * H_ + h) * Tl_;
      ops_->attention_block_finalize(out + size_t(b) * Tl_ * Ct_ + size_t(h) * hs_, lse + s, o_acc_.data() + s * hs_,
                                     m_.data() + s, l_.data() + s, Tl_, hs_, Ct_);
    }
}

// One step's hop alone, as one group (the forward's, and the backward's
// without accumulators to move).
template <class T>
typename RingAttention<T>::Hop RingAttention<T>::post_hop(const T* cur, T* nxt) const {
  comm_->group_start();
  Hop h = post_kv(cur, nxt);
  comm_->group_end();
  return h;
}

// Backward. Messages between a pair match in order where the backend has no
// tags (nccl), so each step posts its messages as one group in the same order
// on both sides of every pair: the accumulator the previous step finished
// (dkv(j-1), to the next rank; from the previous one, the accumulator of the
// block now visiting), then the K/V hop. A finished accumulator is sent at
// the start of the next step (or after the last), never alone, so no rank's
// send waits on a receive its neighbour has not posted.
template <class T>
void RingAttention<T>::backward(T* dqkv, const T* dout, const T* qkv, const T* out, const A* lse) {
  const int cp = o_.cp, me = comm_->rank(), next = (me + 1) % cp, prev = (me + cp - 1) % cp;
  const size_t kvn = size_t(2) * N_ * KVc_, half = size_t(N_) * KVc_;
  const int C3 = Ct_ + 2 * KVc_, C2 = 2 * KVc_;
  // D = rowsum(dO * O), per (b, h, t).
  for (int b = 0; b < Bm_; ++b)
    for (int h = 0; h < H_; ++h) {
      const size_t at = size_t(b) * Tl_ * Ct_ + size_t(h) * hs_;
      ops_->attention_row_dot(D_.data() + (size_t(b) * H_ + h) * Tl_, dout + at, out + at, Tl_, hs_, Ct_);
    }
  pack_kv(kv_a_.data(), qkv);
  ops_->fill_acc(dq_.data(), 0, dq_.size());
  ops_->fill_acc(dkv_own_.data(), 0, dkv_own_.size());
  T* cur = kv_a_.data();
  T* nxt = kv_b_.data();
  A* parts[2] = {part_a_.data(), part_b_.data()};
  Request part_sent[2];
  Request trav_rq;
  const bool keep_last = o_.has(Fault::dkv_not_returned);
  for (int j = 0; j < cp; ++j) {
    const int src = (me - j + cp) % cp;
    const bool more = j + 1 < cp;
    Hop hop;
    comm_->group_start();
    if (j >= 2) {  // dkv(j-1) on to the next rank; the previous rank's, for src's block, in
      part_sent[(j - 1) % 2] = comm_->isend(parts[(j - 1) % 2], kvn, dtype_of<A>(), next, 2);
      trav_rq = comm_->irecv(trav_.data(), kvn, dtype_of<A>(), prev, 2);
    }
    if (more && overlap_) hop = post_kv(cur, nxt);
    comm_->group_end();
    A* dkv = dkv_own_.data();
    if (j > 0) {
      part_sent[j % 2].wait();  // the buffer's send (of dkv(j-2)) is done
      dkv = parts[j % 2];
      ops_->fill_acc(dkv, 0, kvn);
    }
    const auto t0 = Clock::now();
    blocks(src, [&](int b, int h, const Run& q, const Run& kr, bool causal, int q0, int k0) {
      const size_t sq0 = (size_t(b) * H_ + h) * Tl_ + q.local, sk0 = (size_t(b) * KV_ + h / g_) * Tl_ + kr.local;
      const T* qp = qkv + (size_t(b) * Tl_ + q.local) * C3 + size_t(h) * hs_;
      const T* kp = cur + (size_t(b) * Tl_ + kr.local) * C2 + size_t(h / g_) * hs_;
      const T* dop = dout + (size_t(b) * Tl_ + q.local) * Ct_ + size_t(h) * hs_;
      ops_->attention_block_backward(dq_.data() + sq0 * hs_, dkv + sk0 * hs_, dkv + half + sk0 * hs_, qp, kp,
                                     kp + KVc_, dop, lse + sq0, D_.data() + sq0, q.len, kr.len, hs_, C3, C2, Ct_, q0,
                                     k0, causal);
    });
    stats_.compute_s += since(t0);
    const auto t1 = Clock::now();
    if (j >= 2) {
      trav_rq.wait();
      ops_->accumulate_acc(dkv, trav_.data(), kvn);
    }
    if (more) {
      if (!overlap_) hop = post_hop(cur, nxt);
      hop.wait();
      std::swap(cur, nxt);
    }
    stats_.wait_s += since(t1);
  }
  // The last accumulator on to the next rank, and this rank's block's home
  // from the previous one.
  if (cp > 1) {
    A* last = parts[(cp - 1) % 2];
    if (keep_last) {  // the fault: the neighbour's gradient stays here
      ops_->accumulate_acc(dkv_own_.data(), last, kvn);
    } else {
      comm_->group_start();
      part_sent[(cp - 1) % 2] = comm_->isend(last, kvn, dtype_of<A>(), next, 2);
      Request home = comm_->irecv(trav_.data(), kvn, dtype_of<A>(), prev, 2);
      comm_->group_end();
      home.wait();
      ops_->accumulate_acc(dkv_own_.data(), trav_.data(), kvn);
    }
  }
  part_sent[0].wait();
  part_sent[1].wait();
  for (int b = 0; b < Bm_; ++b) {
    T* d = dqkv + size_t(b) * Tl_ * C3;
    for (int h = 0; h < H_; ++h) {
      const size_t s = (size_t(b) * H_ + h) * Tl_ * hs_;
      ops_->accumulate_rows_acc(d + size_t(h) * hs_, size_t(C3), dq_.data() + s, size_t(hs_), size_t(hs_),
                                size_t(Tl_));
    }
    for (int h = 0; h < KV_; ++h) {
      const size_t s = (size_t(b) * KV_ + h) * Tl_ * hs_;
      T* dk = d + Ct_ + size_t(h) * hs_;
      ops_->accumulate_rows_acc(dk, size_t(C3), dkv_own_.data() + s, size_t(hs_), size_t(hs_), size_t(Tl_));
      ops_->accumulate_rows_acc(dk + KVc_, size_t(C3), dkv_own_.data() + half + s, size_t(hs_), size_t(hs_),
                                size_t(Tl_));
    }
  }
}

// ---- Ulysses -----------------------------------------------------------------

template <class T>
UlyssesAttention<T>::UlyssesAttention(const CpOptions& o, Communicator* cp, MemoryTracker* mt, int Bm, int Tn, int H,
                                      int hs, const k::DeviceOps<T>& ops, int KV)
    : o_(o), comm_(cp), ops_(&ops), Bm_(Bm), Tn_(Tn), H_(H), hs_(hs) {
  require(cp && cp->size() == o.cp, "cp: the group's size differs from cp");
  require(H % o.cp == 0, "cp: Ulysses needs the heads to split over cp");
  KV_ = KV > 0 ? KV : H;
  require(H % KV_ == 0 && KV_ % o.cp == 0, "cp: Ulysses needs the kv heads to divide the heads and split over cp");
  Tl_ = Tn / o.cp;
  Ct_ = H * hs;
  N_ = Bm * Tl_;
  Hc_ = H / o.cp;
  Cc_ = Hc_ * hs;
  KVc_ = KV_ * hs;
  KVcc_ = KVc_ / o.cp;
  place_ = placements(Tn, o.cp, o.zigzag);
  const size_t N = size_t(N_), Ct = size_t(Ct_), att = size_t(Bm) * Hc_ * Tn * Tn;
  const MemTag w = MemTag::workspace;
  send_ = Buffer<T>(mt, w, N * Ct);
  recv_ = Buffer<T>(mt, w, N * Ct);
  outh_ = Buffer<T>(mt, w, N * Ct);
  douth_ = Buffer<T>(mt, w, N * Ct);
  dqkvh_ = Buffer<T>(mt, w, N * (Ct + 2 * size_t(KVc_)));
  datt_ = Buffer<T>(mt, w, att);
  if (ops.is_host())  // a device keeps its own
    ws_ = Buffer<A>(mt, w, k::attention_workspace_elems_gqa<T>(Tn, Cc_, Hc_, KV_ / o.cp));
}

template <class T>
int64_t UlyssesAttention<T>::workspace_bytes(int Bm, int Tn, int cp, int H, int hs, bool kernel_ws, int KV) {
  const int64_t N = int64_t(Bm) * (Tn / cp), Ct = int64_t(H) * hs, Hc = H / cp, kv = KV > 0 ? KV : H;
  return int64_t(sizeof(T)) * (4 * N * Ct + N * (Ct + 2 * kv * hs) + int64_t(Bm) * Hc * Tn * Tn) +
         (kernel_ws ? int64_t(sizeof(A)) *
                          int64_t(k::attention_workspace_elems_gqa<T>(Tn, int(Hc * hs), int(Hc), int(kv / cp)))
                    : 0);
}

// dst (Bm, Tn, dst_cols) at column dst_off <- this rank's heads of every rank's
// src (N, src_cols) at column src_off: one all-to-all of N * cc per peer (cc:
// a head group's columns). The moves are row copies: per peer its head
// group, per sender and sequence each run of consecutive positions.
template <class T>
void UlyssesAttention<T>::to_heads(T* dst, int dst_cols, int dst_off, const T* src, int src_cols, int src_off,
                                   int cc) {
  const int cp = o_.cp;
  for (int d = 0; d < cp; ++d)
    ops_->copy_rows(send_.data() + size_t(d) * N_ * cc, size_t(cc), src + src_off + size_t(d) * cc,
                    size_t(src_cols), size_t(cc), size_t(N_));
  comm_->all_to_all(send_.data(), recv_.data(), size_t(N_) * cc, dtype_of<T>());
  for (int s = 0; s < cp; ++s)
    for (int b = 0; b < Bm_; ++b)
      for (const Run& r : place_[size_t(s)].runs())
        ops_->copy_rows(dst + (size_t(b) * Tn_ + r.pos) * dst_cols + dst_off, size_t(dst_cols),
                        recv_.data() + (size_t(s) * N_ + size_t(b) * Tl_ + r.local) * cc, size_t(cc), size_t(cc),
                        size_t(r.len));
}

// The inverse: dst (N, dst_cols) at column dst_off + (head group of the
// sender) <- src (Bm, Tn, src_cols) at src_off, each token back to its rank.
template <class T>
void UlyssesAttention<T>::to_sequence(T* dst, int dst_cols, int dst_off, const T* src, int src_cols, int src_off,
                                      int cc, bool add) {
  const int cp = o_.cp;
  for (int d = 0; d < cp; ++d)
    for (int b = 0; b < Bm_; ++b)
      for (const Run& r : place_[size_t(d)].runs())
        ops_->copy_rows(send_.data() + (size_t(d) * N_ + size_t(b) * Tl_ + r.local) * cc, size_t(cc),
                        src + (size_t(b) * Tn_ + r.pos) * src_cols + src_off, size_t(src_cols), size_t(cc),
                        size_t(r.len));
  comm_->all_to_all(send_.data(), recv_.data(), size_t(N_) * cc, dtype_of<T>());
  for (int s = 0; s < cp; ++s) {
    T* o = dst + dst_off + size_t(s) * cc;
    const T* r = recv_.data() + size_t(s) * N_ * cc;
    if (add)
      ops_->accumulate_rows(o, size_t(dst_cols), r, size_t(cc), size_t(cc), size_t(N_));
    else
      ops_->copy_rows(o, size_t(dst_cols), r, size_t(cc), size_t(cc), size_t(N_));
  }
}

// This rank's heads over whole sequences (multi-head: the kernels' ordinary
// attention, which a device has; grouped-query: the CPU's GQA kernel).
template <class T>
void UlyssesAttention<T>::attention(T* out, T* att, const T* qkvh) {
  if (KV_ == H_)
    ops_->attention_forward(out, att, qkvh, Bm_, Tn_, Cc_, Hc_, ws_.data());
  else
    ops_->attention_forward_gqa(out, att, qkvh, Bm_, Tn_, Cc_, Hc_, KV_ / o_.cp, ws_.data());
}

template <class T>
void UlyssesAttention<T>::forward(T* out, T* qkvh, T* att, const T* qkv) {
  const int cols = Ct_ + 2 * KVc_, hcols = Cc_ + 2 * KVcc_;
  to_heads(qkvh, hcols, 0, qkv, cols, 0, Cc_);
  to_heads(qkvh, hcols, Cc_, qkv, cols, Ct_, KVcc_);
  to_heads(qkvh, hcols, Cc_ + KVcc_, qkv, cols, Ct_ + KVc_, KVcc_);
  const auto t0 = Clock::now();
  attention(outh_.data(), att, qkvh);
  stats_.compute_s += since(t0);
  stats_.flops += 4 * int64_t(hs_) * Bm_ * Hc_ * (int64_t(Tn_) * (Tn_ + 1) / 2);
  to_sequence(out, Ct_, 0, outh_.data(), Cc_, 0, Cc_, false);
}

template <class T>
void UlyssesAttention<T>::probabilities(T* att, const T* qkvh) {
  attention(outh_.data(), att, qkvh);
}

template <class T>
void UlyssesAttention<T>::backward(T* dqkv, const T* dout, const T* qkvh, const T* att) {
  const int cols = Ct_ + 2 * KVc_, hcols = Cc_ + 2 * KVcc_;
  to_heads(douth_.data(), Cc_, 0, dout, Ct_, 0, Cc_);
  ops_->zero(dqkvh_.data(), dqkvh_.size() * sizeof(T));
  const auto t0 = Clock::now();
  if (KV_ == H_)
    ops_->attention_backward(dqkvh_.data(), datt_.data(), douth_.data(), qkvh, att, Bm_, Tn_, Cc_, Hc_, ws_.data());
  else
    ops_->attention_backward_gqa(dqkvh_.data(), datt_.data(), douth_.data(), qkvh, att, Bm_, Tn_, Cc_, Hc_,
                                 KV_ / o_.cp, ws_.data());
  stats_.compute_s += since(t0);
  to_sequence(dqkv, cols, 0, dqkvh_.data(), hcols, 0, Cc_, true);
  to_sequence(dqkv, cols, Ct_, dqkvh_.data(), hcols, Cc_, KVcc_, true);
  to_sequence(dqkv, cols, Ct_ + KVc_, dqkvh_.data(), hcols, Cc_ + KVcc_, KVcc_, true);
}

template class RingAttention<double>;
template class RingAttention<float>;
template class RingAttention<bf16>;
template class UlyssesAttention<double>;
template class UlyssesAttention<float>;
template class UlyssesAttention<bf16>;

}  // namespace pb::cp
