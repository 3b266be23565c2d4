#include "impl/tensor_parallel/runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>
#include <utility>

#include "harness/status.h"
#include "kernels/cpu/ops.h"

namespace pb::tp {

namespace k = kernels;

namespace {
// The llama family's widths on a tp rank (runner.h): kv heads held and
// attended with, q|k|v widths of attention (Wl) and of the projection (Wf).
// Under Ulysses (cp > 1), KVu kv heads go over cp and We = Ct + 2 KVu hs is
// the width of the q|k|v rows it moves (KVu = KVl when cp divides them).
struct LlamaWidths {
  bool kv_rep = false;
  int KVl = 0, Wl = 0, Wf = 0, Ft = 0, KVu = 0, We = 0;
};
LlamaWidths llama_widths(const ModelConfig& m, int tp, int cp = 1) {
  LlamaWidths w;
  const int hs = m.C / m.NH, Ct = m.C / tp;
  w.kv_rep = m.kv_heads % tp != 0;  // fewer kv heads than tp (the layout requires tp % kv_heads == 0 then)
  w.KVl = w.kv_rep ? 1 : m.kv_heads / tp;
  w.Wl = Ct + 2 * w.KVl * hs;
  w.Wf = w.kv_rep ? Ct + 2 * m.kv_heads * hs : w.Wl;
  w.Ft = m.ffn / tp;
  w.KVu = std::lcm(w.KVl, cp);
  w.We = Ct + 2 * w.KVu * hs;
  return w;
}
}  // namespace

template <class T>
void TpModel<T>::alloc_block(Block& b, MemoryTracker* mt, bool xout_only, bool dense_mlp) const {
  const size_t N = size_t(N_), Nl = size_t(Nl_), C = size_t(C_), Ct = size_t(Ct_);
  const MemTag act = MemTag::activations;
  if (!xout_only && llama_) {  // RMSNorm keeps no mean
    const int cp = o_.context.cp;
    const bool ring = cp > 1 && o_.context.algo == CpAlgo::ring;
    b.ln1 = Buffer<T>(mt, act, Nl * C);
    b.ln1_rstd = Buffer<A>(mt, act, Nl);
    b.qkv = Buffer<T>(mt, act, N * size_t(Wl_));
    if (ring) b.lse = Buffer<A>(mt, act, size_t(Bm_) * H_ * Tl_);
    if (cp > 1 && !ring) b.qkvh = Buffer<T>(mt, act, N * size_t(Ct_ + 2 * KVu_ * (C_ / layout_->model().NH)));
    if (o_.recompute == Recompute::none && !ring)
      b.att = Buffer<T>(mt, act, size_t(Bm_) * (H_ / cp) * Tn_ * Tn_);
    b.atty = Buffer<T>(mt, act, N * Ct);
    b.xmid = Buffer<T>(mt, act, Nl * C);
    b.ln2 = Buffer<T>(mt, act, Nl * C);
    b.ln2_rstd = Buffer<A>(mt, act, Nl);
    if (dense_mlp) {  // (an MoE block's MLP keeps MoeActs instead)
      b.fch = Buffer<T>(mt, act, N * 2 * size_t(Ft_));
      b.fchg = Buffer<T>(mt, act, N * size_t(Ft_));
    }
  } else if (!xout_only) {
    b.ln1 = Buffer<T>(mt, act, Nl * C);
    b.ln1_mean = Buffer<A>(mt, act, Nl);
    b.ln1_rstd = Buffer<A>(mt, act, Nl);
    b.qkv = Buffer<T>(mt, act, N * 3 * Ct);
    const int cp = o_.context.cp;
    if (cp > 1 && o_.context.algo == CpAlgo::ring) {
      b.lse = Buffer<A>(mt, act, size_t(Bm_) * H_ * Tl_);
    } else {
      if (cp > 1) b.qkvh = Buffer<T>(mt, act, N * 3 * Ct);
      if (o_.recompute == Recompute::none) b.att = Buffer<T>(mt, act, size_t(Bm_) * (H_ / cp) * Tn_ * Tn_);
    }
    b.atty = Buffer<T>(mt, act, N * Ct);
    b.xmid = Buffer<T>(mt, act, Nl * C);
    b.ln2 = Buffer<T>(mt, act, Nl * C);
    b.ln2_mean = Buffer<A>(mt, act, Nl);
    b.ln2_rstd = Buffer<A>(mt, act, Nl);
    if (dense_mlp) {
      b.fch = Buffer<T>(mt, act, N * 4 * Ct);
      b.fchg = Buffer<T>(mt, act, N * 4 * Ct);
    }
  }
  b.xout = Buffer<T>(mt, act, Nl * C);
}

template <class T>
void TpModel<T>::alloc_head(Head& h, MemoryTracker* mt) const {
  const MemTag act = MemTag::activations;
  h.lnf = Buffer<T>(mt, act, size_t(Nl_) * C_);
  if (!llama_) h.lnf_mean = Buffer<A>(mt, act, size_t(Nl_));
  h.lnf_rstd = Buffer<A>(mt, act, size_t(Nl_));
  h.probs = Buffer<T>(mt, act, size_t(N_) * Vr_);
  h.losses = Buffer<A>(mt, act, size_t(N_));
}

template <class T>
TpModel<T>::TpModel(const ParamLayout& l, const TpOptions& o, Communicator* tp, Communicator* cp, MemoryTracker* mt,
                    int Bm, int Tn, MoeScope moe, const k::DeviceOps<T>& ops)
    : layout_(&l), ops_(&ops), o_(o), tp_(tp), cp_(cp), Bm_(Bm), Tn_(Tn), moe_scope_(std::move(moe)) {
  const auto& m = l.model();
  const int ncp = o.context.cp;
  require(l.tp() == o.tp, "tp: the layout's tp differs from the options'");
  require(o.tp == 1 || (tp && tp->size() == o.tp), "tp: the group's size differs from tp");
  require(ncp == 1 || (cp && cp->size() == ncp), "cp: the group's size differs from cp");
  Tl_ = Tn / ncp;
  N_ = Bm * Tl_;
  require(!o.sp || N_ % o.tp == 0, "strategy.sp: the microbatch's " + std::to_string(N_) +
                                       " tokens do not split over tp" + std::to_string(o.tp));
  Nl_ = o.sp ? N_ / o.tp : N_;
  C_ = m.C;
  Ct_ = m.C / o.tp;
  H_ = m.NH / o.tp;
  Vr_ = int(l.vocab_rows());
  vb_ = l.vocab_begin();
  valid_ = int(std::clamp<int64_t>(m.V - vb_, 0, Vr_));
  if (o.has(Fault::padded_vocab_in_loss)) valid_ = Vr_;
  if (m.llama()) {
    const LlamaWidths w = llama_widths(m, o.tp, ncp);
    llama_ = true;
    kv_rep_ = w.kv_rep;
    KVl_ = w.KVl, Wl_ = w.Wl, Wf_ = w.Wf, Ft_ = w.Ft, KVu_ = w.KVu;
    // Replicated kv heads: this rank's q heads [r H/tp, (r+1) H/tp) share kv head r * kv_heads / tp.
    kv0_ = kv_rep_ && tp ? tp->rank() * m.kv_heads / o.tp : 0;
    if (kv_rep_ && tp && o.has(Fault::kv_head_by_rank)) kv0_ = tp->rank() % m.kv_heads;
  }
  walk_workspace(this, m, o, Bm, Tn, ops.is_host(), [&](auto* b, size_t n) {
    using Buf = std::remove_pointer_t<decltype(b)>;
    *b = Buf(mt, MemTag::workspace, n);
  });
  if (ncp > 1) place_.emplace(Tn, ncp, cp->rank(), o.context.zigzag);
  {  // the positions of the tokens this rank's LayerNorm regions hold (its SP chunk)
    const int first = o.sp && tp ? tp->rank() * Nl_ : 0;
    std::vector<int32_t> pos(static_cast<size_t>(Nl_));
    for (int n = 0; n < Nl_; ++n) pos[size_t(n)] = embed_position(first + n);
    ops.to_device(pos_.data(), pos.data(), pos.size() * sizeof(int32_t));
  }
  if (llama_) {  // RoPE's: the true position of each of the Tl tokens a rank holds of a sequence
    std::vector<int32_t> pos(static_cast<size_t>(Tl_));
    for (int t = 0; t < Tl_; ++t)  // the rope_local_positions fault: 0..Tl-1 on every cp rank
      pos[size_t(t)] = o.context.has(cp::Fault::rope_local_positions) ? t : embed_position(t);
    ops.to_device(rpos_.data(), pos.data(), pos.size() * sizeof(int32_t));
  }
  if (ncp > 1) {  // the llama family's grouped-query attention: KVl_ kv heads on the ring, KVu_ under Ulysses
    if (o.context.algo == CpAlgo::ring)
      ring_ = std::make_unique<cp::RingAttention<T>>(o.context, cp, mt, Bm, Tn, H_, C_ / m.NH, true, ops, KVl_);
    else
      ulysses_ = std::make_unique<cp::UlyssesAttention<T>>(o.context, cp, mt, Bm, Tn, H_, C_ / m.NH, ops, KVu_);
  }
  if (m.moe.experts > 0) {
    require(ncp == 1 || moe_scope_.order, "model.moe: under context parallel the MoE scope needs its token order");
    require(moe_scope_.tp_size() == o.tp, "model.moe: the experts' scope must split them over the tp group");
    moe_.emplace(l, N_, moe_scope_, ops);
    moe_scratch_ =
        MoeScratch<T>(mt, m, N_, moe_scope_.tokens(m.moe, N_), moe_scope_.ep_size(), o.tp, !ops.is_host());
  }
}

template <class T>
TpModel<T>::~TpModel() = default;

template <class T>
int TpModel<T>::position(int n) const {
  return place_ ? place_->position(n % Tl_) : n % Tl_;
}

template <class T>
int TpModel<T>::embed_position(int n) const {
  if (place_ && o_.context.has(cp::Fault::zigzag_positions)) return place_->rank() * Tl_ + n % Tl_;  // contiguous
  return position(n);
}

template <class T>
void TpModel<T>::select_tokens(const int32_t* all_tokens, const int32_t* all_targets, int32_t* tokens,
                               int32_t* targets) const {
  const bool wrong_targets = o_.context.has(cp::Fault::zigzag_targets);
  for (int n = 0; n < N_; ++n) {
    const size_t seq = size_t(n / Tl_) * Tn_;
    if (tokens) tokens[n] = all_tokens[seq + size_t(position(n))];
    const int tpos = wrong_targets ? cp_rank() * Tl_ + n % Tl_ : position(n);  // the fault: contiguous
    if (targets) targets[n] = all_targets[seq + size_t(tpos)];
  }
}

// The block's attention: qkv -> atty (att: where the probabilities go when
// they are formed here).
template <class T>
void TpModel<T>::attend(Block& a, T* att) {
  if (ring_) return ring_->forward(a.atty.data(), a.lse.data(), a.qkv.data());
  if (ulysses_) return ulysses_->forward(a.atty.data(), a.qkvh.data(), att, a.qkv.data());
  ops_->attention_forward(a.atty.data(), att, a.qkv.data(), Bm_, Tn_, Ct_, H_, att_ws_.data());
}

// dqkv_ += the attention's backward of datty_.
template <class T>
void TpModel<T>::attend_backward(const Block& a) {
  if (ring_) return ring_->backward(dqkv_.data(), datty_.data(), a.qkv.data(), a.atty.data(), a.lse.data());
  const T* att = a.att.data();
  if (a.att.empty()) {  // selective recompute: the probabilities again, from the stored QKV
    if (ulysses_)
      ulysses_->probabilities(att_work_.data(), a.qkvh.data());
    else
      ops_->attention_forward(atty_work_.data(), att_work_.data(), a.qkv.data(), Bm_, Tn_, Ct_, H_, att_ws_.data());
    att = att_work_.data();
  }
  if (ulysses_) return ulysses_->backward(dqkv_.data(), datty_.data(), a.qkvh.data(), att);
  ops_->attention_backward(dqkv_.data(), datt_.data(), datty_.data(), a.qkv.data(), att, Bm_, Tn_, Ct_, H_,
                           att_ws_.data());
}

// The workspace, once: the constructor allocates it, workspace_bytes sums it.
// f(Buffer<X>* (null when self is), elements).
template <class T>
template <class F>
void TpModel<T>::walk_workspace(TpModel* self, const ModelConfig& m, const TpOptions& o, int Bm, int Tn, bool kernel_ws,
                                F&& f) {
  const int ncp = o.context.cp;
  const bool ring = ncp > 1 && o.context.algo == CpAlgo::ring, local = ncp == 1;
  const size_t N = size_t(Bm) * (Tn / ncp), t = size_t(o.tp), Nl = o.sp ? N / t : N, C = size_t(m.C), Ct = C / t;
  // The probabilities: this rank's heads (Ulysses: 1/cp of them) over whole sequences; none with ring.
  const size_t V = (size_t(m.V) + t - 1) / t, att = ring ? 0 : size_t(Bm) * size_t(m.NH / o.tp / ncp) * Tn * Tn;
  auto buf = [&](auto mem, size_t n) { f(self ? &(self->*mem) : nullptr, n); };
  if (m.llama()) {  // runner.h's shapes; cp > 1: the ring's or Ulysses' attention keeps its own workspace
    const LlamaWidths w = llama_widths(m, o.tp, ncp);
    const size_t Wl = size_t(w.Wl), Ft = size_t(w.Ft), We = size_t(w.We);
    const bool expand = !ring && !local && w.KVu != w.KVl;  // Ulysses with kv heads replicated over cp
    auto wb = [&](auto mem, size_t n) { f(self ? &(self->work_.*mem) : nullptr, n); };
    if (o.recompute == Recompute::full) {  // one block's everything (alloc_block's), probabilities included
      wb(&Block::ln1, Nl * C), wb(&Block::ln1_rstd, Nl), wb(&Block::qkv, N * Wl);
      if (ring) wb(&Block::lse, size_t(Bm) * size_t(m.NH / o.tp) * (Tn / ncp));
      if (!ring && !local) wb(&Block::qkvh, N * We);
      if (!ring) wb(&Block::att, att);
      wb(&Block::atty, N * Ct), wb(&Block::xmid, Nl * C), wb(&Block::ln2, Nl * C), wb(&Block::ln2_rstd, Nl);
      wb(&Block::fch, N * 2 * Ft), wb(&Block::fchg, N * Ft), wb(&Block::xout, Nl * C);
    }
    if (o.recompute == Recompute::selective && !ring) {
      buf(&TpModel::att_work_, att);
      if (local) buf(&TpModel::atty_work_, N * Ct);
    }
    buf(&TpModel::gat_, N * C), buf(&TpModel::part_, N * C), buf(&TpModel::tmp_, Nl * C);
    buf(&TpModel::dres_, Nl * C), buf(&TpModel::dln_, Nl * C), buf(&TpModel::datty_, N * Ct);
    buf(&TpModel::dqkv_, N * Wl), buf(&TpModel::drot_, N * Wl);
    if (w.kv_rep) buf(&TpModel::qkvf_, N * size_t(w.Wf));
    if (expand) buf(&TpModel::qkve_, N * We), buf(&TpModel::dqkve_, N * We);
    buf(&TpModel::dfch_, N * 2 * Ft);
    if (local) buf(&TpModel::datt_, att);
    buf(&TpModel::dfchg_, N * Ft);
    buf(&TpModel::dlogits_, N * V), buf(&TpModel::cmax_, N), buf(&TpModel::csum_, 2 * N);
    buf(&TpModel::pos_, Nl), buf(&TpModel::rpos_, size_t(Tn / ncp));
    if (m.moe.experts > 0 && o.sp) buf(&TpModel::moe_x_, N * C);
    if (!kernel_ws) return;
    const int n = int(N), c = m.C, ct = int(Ct), v = int(V), ft = w.Ft;
    buf(&TpModel::mm_ws_, std::max({k::matmul_workspace_floats<T>(n, c, w.Wf), k::matmul_workspace_floats<T>(n, c, 2 * ft),
                                    k::matmul_workspace_floats<T>(n, ft, c), k::matmul_workspace_floats<T>(n, ct, c),
                                    k::matmul_workspace_floats<T>(n, c, v)}));
    if (local) buf(&TpModel::att_ws_, k::attention_workspace_elems_gqa<T>(Tn, ct, m.NH / o.tp, w.KVl));
    return;
  }
  auto wbuf = [&](auto mem, size_t n) { f(self ? &(self->work_.*mem) : nullptr, n); };
  if (o.recompute == Recompute::full) {  // one block's everything, probabilities included
    wbuf(&Block::ln1, Nl * C), wbuf(&Block::ln1_mean, Nl), wbuf(&Block::ln1_rstd, Nl), wbuf(&Block::qkv, N * 3 * Ct);
    if (ring) wbuf(&Block::lse, size_t(Bm) * size_t(m.NH / o.tp) * (Tn / ncp));
    if (!ring) wbuf(&Block::att, att);
    if (!ring && !local) wbuf(&Block::qkvh, N * 3 * Ct);
    wbuf(&Block::atty, N * Ct), wbuf(&Block::xmid, Nl * C), wbuf(&Block::ln2, Nl * C);
    wbuf(&Block::ln2_mean, Nl), wbuf(&Block::ln2_rstd, Nl), wbuf(&Block::fch, N * 4 * Ct);
    wbuf(&Block::fchg, N * 4 * Ct), wbuf(&Block::xout, Nl * C);
  }
  if (o.recompute == Recompute::selective && !ring) {
    buf(&TpModel::att_work_, att);
    if (local) buf(&TpModel::atty_work_, N * Ct);
  }
  buf(&TpModel::gat_, N * C), buf(&TpModel::part_, N * C), buf(&TpModel::tmp_, Nl * C);
  buf(&TpModel::dres_, Nl * C), buf(&TpModel::dln_, Nl * C), buf(&TpModel::datty_, N * Ct);
  buf(&TpModel::dqkv_, N * 3 * Ct), buf(&TpModel::dfch_, N * 4 * Ct);
  if (local) buf(&TpModel::datt_, att);  // (the cp attention keeps its own)
  buf(&TpModel::dfchg_, N * 4 * Ct), buf(&TpModel::dlogits_, N * V), buf(&TpModel::cmax_, N);
  buf(&TpModel::csum_, 2 * N), buf(&TpModel::pos_, Nl);
  if (m.moe.experts > 0 && o.sp) buf(&TpModel::moe_x_, N * C);
  if (!kernel_ws) return;  // a device's kernels keep their own
  const int n = int(N), c = m.C, ct = int(Ct), v = int(V);
  buf(&TpModel::mm_ws_, std::max({k::matmul_workspace_floats<T>(n, c, 3 * ct), k::matmul_workspace_floats<T>(n, c, 4 * ct),
                                  k::matmul_workspace_floats<T>(n, 4 * ct, c), k::matmul_workspace_floats<T>(n, ct, c),
                                  k::matmul_workspace_floats<T>(n, c, v)}));
  if (local) buf(&TpModel::att_ws_, k::attention_workspace_elems<T>(Tn, int(Ct), m.NH / o.tp));
}

template <class T>
int64_t TpModel<T>::workspace_bytes(const ModelConfig& m, const TpOptions& o, int Bm, int Tn, int64_t moe_scope_tokens,
                                    int ep, bool kernel_ws) {
  int64_t bytes = 0;
  walk_workspace(nullptr, m, o, Bm, Tn, kernel_ws, [&](auto* b, size_t n) {
    using Buf = std::remove_pointer_t<decltype(b)>;
    using X = std::remove_pointer_t<decltype(std::declval<Buf>().data())>;
    bytes += int64_t(n * sizeof(X));
  });
  const int ncp = o.context.cp, H = m.NH / o.tp, hs = m.C / m.NH;
  const LlamaWidths w = m.llama() ? llama_widths(m, o.tp, ncp) : LlamaWidths{};  // kv heads: 0 = H (GPT-2)
  if (ncp > 1)
    bytes += o.context.algo == CpAlgo::ring
                 ? cp::RingAttention<T>::workspace_bytes(Bm, Tn, ncp, H, hs, w.KVl)
                 : cp::UlyssesAttention<T>::workspace_bytes(Bm, Tn, ncp, H, hs, kernel_ws, w.KVu);
  if (m.moe.experts > 0) bytes += MoeScratch<T>::bytes(m, Bm * (Tn / ncp), moe_scope_tokens, ep, o.tp, !kernel_ws);
  return bytes;
}

int64_t runner_workspace_bytes(const ModelConfig& m, const TpOptions& o, int Bm, int Tn, Precision p,
                               int64_t moe_scope_tokens, int ep, bool kernel_ws) {
  const int64_t N = int64_t(Bm) * Tn / o.context.cp, Nl = o.sp ? N / o.tp : N;
  int64_t bytes = 0;
  dispatch_dtype(storage_dtype(p), [&](auto t) {
    using T = decltype(t);
    bytes = TpModel<T>::workspace_bytes(m, o, Bm, Tn, moe_scope_tokens, ep, kernel_ws) +
            2 * Nl * m.C * int64_t(sizeof(T));  // + dx ping-pong
  });
  // The whole sequences' tokens and targets (on a device they are drawn in host memory).
  if (o.context.cp > 1 && kernel_ws) bytes += 2 * int64_t(Bm) * Tn * 4;
  return bytes;
}

template <class T>
TpRunner<T>::TpRunner(const ParamLayout& l, const TpOptions& o, Communicator* tp, Communicator* cp,
                      const MarkovSource& data, MemoryTracker* mt, int Bm, int Tn, MoeScope moe,
                      const k::DeviceOps<T>& ops)
    : layout_(&l), o_(o), data_(&data), Bm_(Bm), Tn_(Tn), model_(l, o, tp, cp, mt, Bm, Tn, std::move(moe), ops) {
  const auto& m = l.model();
  const size_t N = size_t(model_.tokens()), NlC = size_t(model_.tokens_held()) * m.C;
  tokens_ = Buffer<int32_t>(mt, MemTag::activations, N);
  targets_ = Buffer<int32_t>(mt, MemTag::activations, N);
  if (!ops.is_host()) {  // drawn (and selected) on the host, then moved
    host_tokens_.resize(N);
    host_targets_.resize(N);
  }
  if (o.context.cp > 1) {  // drawn and selected from on the host: host memory on a device
    const Place where = ops.is_host() ? Place::device : Place::host;
    all_tokens_ = Buffer<int32_t>(mt, MemTag::workspace, size_t(Bm) * Tn, where);
    all_targets_ = Buffer<int32_t>(mt, MemTag::workspace, size_t(Bm) * Tn, where);
  }
  x0_ = Buffer<T>(mt, MemTag::activations, NlC);
  blocks_.resize(size_t(m.L));
  moe_.resize(size_t(m.L));
  const MoeScope& sc = model_.moe_scope();
  const bool full = o.recompute == Recompute::full;
  for (int i = 0; i < m.L; ++i) {
    model_.alloc_block(blocks_[size_t(i)], mt, full, !m.is_moe(i));
    if (m.is_moe(i) && !full)
      moe_[size_t(i)] =
          MoeActs<T>(mt, m, int(N), sc.tokens(m.moe, int64_t(N)), sc.ep_size(), o.tp, !ops.is_host());
  }
  // Full recompute keeps each block's output alone: one MoE MLP's routing and
  // rows, rerun (re-routed) by the backward from the block's stored input.
  if (full && m.moe.experts > 0)
    moe_work_ = MoeActs<T>(mt, m, int(N), sc.tokens(m.moe, int64_t(N)), sc.ep_size(), o.tp, !ops.is_host());
  model_.alloc_head(head_, mt);
  dx_a_ = Buffer<T>(mt, MemTag::workspace, NlC);
  dx_b_ = Buffer<T>(mt, MemTag::workspace, NlC);
}

template <class T>
void TpModel<T>::all_reduce(T* buf, size_t n) {
  if (o_.tp > 1) tp_->all_reduce(buf, buf, n, dtype_of<T>());
}

template <class T>
void TpModel<T>::gather(const T* shard, T* full) {
  tp_->all_gather(shard, full, size_t(Nl_) * C_, dtype_of<T>());
}

template <class T>
void TpModel<T>::scatter(const T* full, T* shard) {
  tp_->reduce_scatter(full, shard, size_t(Nl_) * C_, dtype_of<T>());
}

template <class T>
void TpModel<T>::add_bias(T* y, const T* b, int rows) {
  ops_->add_rows(y, b, nullptr, rows, C_);
}

// x[0..n) rounded to bf16 in place (through the host where x is on a device);
// a no-op when T is bf16.
template <class T>
void TpModel<T>::round_to_bf16(T* x, size_t n) {
  if constexpr (!std::is_same_v<T, bf16>) {
    std::vector<T> host;
    T* p = x;
    if (!ops_->is_host()) {
      host.resize(n);
      ops_->to_host(host.data(), x, n * sizeof(T));
      p = host.data();
    }
    for (size_t i = 0; i < n; ++i) p[i] = T(float(bf16(float(p[i]))));
    if (!ops_->is_host()) ops_->to_device(x, host.data(), n * sizeof(T));
  }
}

// y_out (Nl,C) = reduce over tp of in (N, in_cols) @ w^T, plus the bias once.
template <class T>
void TpModel<T>::row_parallel(T* y_out, const T* in, const T* w, const T* b, int in_cols) {
  const bool bias_each_rank = o_.has(Fault::bias_tp_times) && o_.tp > 1;
  // Fault::row_reduce_bf16 (fp32 and fp64 only, tp::check_precision): a bf16
  // reduction, as harness/comm does one: bf16 addends, summed, the sum rounded once.
  const bool bf16_reduce = o_.has(Fault::row_reduce_bf16) && o_.tp > 1;
  ops_->matmul_forward(part_.data(), in, w, bias_each_rank ? b : static_cast<const T*>(nullptr), N_, in_cols, C_,
                       mm_ws_.data());
  if (bf16_reduce) round_to_bf16(part_.data(), size_t(N_) * C_);
  if (o_.sp) {
    scatter(part_.data(), y_out);
  } else {
    all_reduce(part_.data(), size_t(N_) * C_);
    ops_->copy(y_out, part_.data(), size_t(N_) * C_ * sizeof(T));
  }
  if (bf16_reduce) round_to_bf16(y_out, size_t(Nl_) * C_);
  if (!bias_each_rank && b) add_bias(y_out, b, Nl_);
}

template <class T>
void TpModel<T>::embed_forward(T* x0, const int32_t* tokens, const T* wte, const T* wpe) {
  // Each rank looks up the tokens of its vocabulary rows; the rest are zero.
  T* p = part_.data();
  ops_->embedding_lookup(p, tokens, wte, N_, C_, vb_, valid_);
  if (o_.sp) {
    scatter(p, x0);
  } else {
    all_reduce(p, size_t(N_) * C_);
    ops_->copy(x0, p, size_t(N_) * C_ * sizeof(T));
  }
  if (!llama_) ops_->add_rows(x0, wpe, pos_.data(), Nl_, C_);  // this rank's tokens' positions (llama: RoPE's)
}

template <class T>
void TpModel<T>::embed_backward(T* dwte, T* dwpe, const T* dx0, const int32_t* tokens) {
  // wpe: this rank's tokens (all of them without SP: the same on every rank).
  if (!llama_) ops_->add_rows_backward(dwpe, dx0, pos_.data(), Nl_, C_, 0, Tn_);
  // wte: the full gradient at the embedding output, scattered to this rank's rows.
  const T* full = dx0;
  if (o_.sp) {
    gather(dx0, gat_.data());
    full = gat_.data();
  }
  ops_->add_rows_backward(dwte, full, tokens, N_, C_, vb_, valid_);
}

// The gate_up_mismatch fault: the up half of each (gate|up) row reversed in
// place (its own inverse), tmp_ one column's scratch.
template <class T>
void TpModel<T>::reverse_up(T* gu) {
  const size_t W = 2 * size_t(Ft_), N = size_t(N_), F = size_t(Ft_);
  for (size_t j = 0; j < F / 2; ++j) {
    T* a = gu + F + j;
    T* b = gu + F + (F - 1 - j);
    ops_->copy_rows(tmp_.data(), 1, a, W, 1, N);
    ops_->copy_rows(a, W, b, W, 1, N);
    ops_->copy_rows(b, W, tmp_.data(), 1, 1, N);
  }
}

// Ulysses with kv heads that do not split over cp (DeepSpeed-Ulysses'
// replication, the uneven split of DeepSpeed issue 8291 avoided): kv head j of
// the KVu_ is this rank's kv head j / (KVu_ / KVl_), so query head h still
// attends with kv head h / (H_ / KVl_).
template <class T>
template <class F>
void TpModel<T>::kv_copies(F&& piece) const {
  const size_t hs = size_t(C_ / layout_->model().NH), Ct = size_t(Ct_), rep = size_t(KVu_ / KVl_);
  piece(size_t(0), size_t(0), Ct);  // the query heads
  for (size_t j = 0; j < size_t(KVu_); ++j)
    for (size_t w = 0; w < 2; ++w)  // k, then v
      piece(Ct + (w * size_t(KVu_) + j) * hs, Ct + (w * size_t(KVl_) + j / rep) * hs, hs);
}

template <class T>
void TpModel<T>::expand_kv(T* qkve, const T* qkv) const {
  const size_t We = size_t(Ct_) + 2 * size_t(KVu_) * size_t(C_ / layout_->model().NH);
  kv_copies([&](size_t e, size_t l, size_t width) {
    ops_->copy_rows(qkve + e, We, qkv + l, size_t(Wl_), width, size_t(N_));
  });
}

// Its adjoint: each kv head's gradient the sum over its copies.
template <class T>
void TpModel<T>::sum_kv(T* dqkv, const T* dqkve) const {
  const size_t We = size_t(Ct_) + 2 * size_t(KVu_) * size_t(C_ / layout_->model().NH);
  kv_copies([&](size_t e, size_t l, size_t width) {
    ops_->accumulate_rows(dqkv + l, size_t(Wl_), dqkve + e, We, width, size_t(N_));
  });
}

template <class T>
void TpModel<T>::llama_attention_forward(Block& a, const T* x_in, const T* u) {
  const auto& o = layout_->block();
  const auto& m = layout_->model();
  float* ws = mm_ws_.data();
  const T* nb = nullptr;
  const int hs = C_ / m.NH;
  const size_t kvC = size_t(m.kv_heads) * hs;
  ops_->rmsnorm_forward(a.ln1.data(), a.ln1_rstd.data(), x_in, u + o.ln1_w, Nl_, C_, m.norm_eps);
  const T* in1 = a.ln1.data();
  if (o_.sp) gather(a.ln1.data(), gat_.data()), in1 = gat_.data();
  if (!kv_rep_) {
    ops_->matmul_forward(a.qkv.data(), in1, u + o.qkv_w, nb, N_, C_, Wl_, ws);
  } else {  // every kv head from the whole k/v weights; this rank's one kv head kept beside its q heads
    ops_->matmul_forward(qkvf_.data(), in1, u + o.qkv_w, nb, N_, C_, Wf_, ws);
    const size_t Wl = size_t(Wl_), Wf = size_t(Wf_), Ct = size_t(Ct_), h0 = size_t(kv0_) * hs;
    ops_->copy_rows(a.qkv.data(), Wl, qkvf_.data(), Wf, Ct, size_t(N_));
    ops_->copy_rows(a.qkv.data() + Ct, Wl, qkvf_.data() + Ct + h0, Wf, size_t(hs), size_t(N_));
    ops_->copy_rows(a.qkv.data() + Ct + hs, Wl, qkvf_.data() + Ct + kvC + h0, Wf, size_t(hs), size_t(N_));
  }
  const int32_t* pos = rpos_.data();  // each held token's true position (under cp too)
  ops_->rope_forward(a.qkv.data(), a.qkv.data(), pos, Bm_, Tl_, H_, hs, Wl_, m.rope_theta);
  ops_->rope_forward(a.qkv.data() + Ct_, a.qkv.data() + Ct_, pos, Bm_, Tl_, KVl_, hs, Wl_, m.rope_theta);
  // Selective recompute does not keep the probabilities: they go to workspace.
  T* att = a.att.empty() ? att_work_.data() : a.att.data();
  if (ring_) {  // the K/V blocks on the ring are this rank's KVl_ kv heads wide
    ring_->forward(a.atty.data(), a.lse.data(), a.qkv.data());
  } else if (ulysses_) {
    const T* src = a.qkv.data();
    if (!qkve_.empty()) expand_kv(qkve_.data(), src), src = qkve_.data();
    ulysses_->forward(a.atty.data(), a.qkvh.data(), att, src);
  } else {
    ops_->attention_forward_gqa(a.atty.data(), att, a.qkv.data(), Bm_, Tn_, Ct_, H_, KVl_, att_ws_.data());
  }
  row_parallel(tmp_.data(), a.atty.data(), u + o.attproj_w, nb, Ct_);
  ops_->residual_forward(a.xmid.data(), x_in, tmp_.data(), size_t(Nl_) * C_);
  ops_->rmsnorm_forward(a.ln2.data(), a.ln2_rstd.data(), a.xmid.data(), u + o.ln2_w, Nl_, C_, m.norm_eps);
}

// From d rmsnorm2's output's residual part (dres_) down to dx_in.
template <class T>
void TpModel<T>::llama_attention_backward(T* dx_in, T* du, const T* x_in, const Block& a, const T* u) {
  const auto& o = layout_->block();
  const auto& m = layout_->model();
  float* ws = mm_ws_.data();
  T* null = nullptr;
  const size_t NlC = size_t(Nl_) * C_, Wl = size_t(Wl_), Ct = size_t(Ct_), N = size_t(N_);
  const int hs = C_ / m.NH;
  const size_t kvl = size_t(KVl_) * hs;
  auto w = [&](size_t off) { return du ? du + off : null; };  // as block_backward's
  auto keep = [&](Buffer<T> Stash::* f, const T* src, size_t n) {
    if (stash_) ops_->copy((stash_->*f).data(), src, n * sizeof(T));
  };
  ops_->copy(dx_in, dres_.data(), NlC * sizeof(T));
  const T* dres = dres_.data();
  if (o_.sp) gather(dres_.data(), gat_.data()), dres = gat_.data();
  keep(&Stash::dres, dres, N * size_t(C_));
  zero(datty_);
  ops_->matmul_backward(datty_.data(), w(o.attproj_w), null, dres, a.atty.data(), u + o.attproj_w, N_, Ct_, C_, ws);
  zero(dqkv_);
  const T* att = a.att.data();
  if (ring_) {
    ring_->backward(dqkv_.data(), datty_.data(), a.qkv.data(), a.atty.data(), a.lse.data());
  } else if (ulysses_) {
    if (a.att.empty()) {  // selective recompute: the probabilities again, from the kept head-sharded q|k|v
      ulysses_->probabilities(att_work_.data(), a.qkvh.data());
      att = att_work_.data();
    }
    if (qkve_.empty()) {
      ulysses_->backward(dqkv_.data(), datty_.data(), a.qkvh.data(), att);
    } else {  // the replicated kv heads' gradients, summed into this rank's
      zero(dqkve_);
      ulysses_->backward(dqkve_.data(), datty_.data(), a.qkvh.data(), att);
      sum_kv(dqkv_.data(), dqkve_.data());
    }
  } else {
    if (a.att.empty()) {  // selective recompute: the probabilities again, from the stored q|k|v
      ops_->attention_forward_gqa(atty_work_.data(), att_work_.data(), a.qkv.data(), Bm_, Tn_, Ct_, H_, KVl_,
                                  att_ws_.data());
      att = att_work_.data();
    }
    ops_->attention_backward_gqa(dqkv_.data(), datt_.data(), datty_.data(), a.qkv.data(), att, Bm_, Tn_, Ct_, H_,
                                 KVl_, att_ws_.data());
  }
  zero(drot_);
  const int32_t* pos = rpos_.data();
  ops_->rope_backward(drot_.data(), dqkv_.data(), pos, Bm_, Tl_, H_, hs, Wl_, m.rope_theta);
  ops_->rope_backward(drot_.data() + Ct, dqkv_.data() + Ct, pos, Bm_, Tl_, KVl_, hs, Wl_, m.rope_theta);
  ops_->copy_rows(drot_.data() + Ct + kvl, Wl, dqkv_.data() + Ct + kvl, Wl, kvl, N);  // v: no rotation
  const T* dproj = drot_.data();
  if (kv_rep_) {  // into the whole projection's rows: the other kv heads' gradients zero here
    const size_t Wf = size_t(Wf_), h0 = size_t(kv0_) * hs, kvC = size_t(m.kv_heads) * hs;
    zero(qkvf_);
    ops_->copy_rows(qkvf_.data(), Wf, drot_.data(), Wl, Ct, N);
    ops_->copy_rows(qkvf_.data() + Ct + h0, Wf, drot_.data() + Ct, Wl, size_t(hs), N);
    ops_->copy_rows(qkvf_.data() + Ct + kvC + h0, Wf, drot_.data() + Ct + hs, Wl, size_t(hs), N);
    dproj = qkvf_.data();
  }
  keep(&Stash::dqkv, dproj, N * size_t(Wf_));
  const T* in1 = a.ln1.data();
  if (o_.sp) gather(a.ln1.data(), gat_.data()), in1 = gat_.data(), keep(&Stash::in1, in1, N * size_t(C_));
  zero(part_);
  ops_->matmul_backward(part_.data(), w(o.qkv_w), null, dproj, in1, u + o.qkv_w, N_, C_, Wf_, ws);
  const T* dln1 = part_.data();
  if (o_.sp) {
    scatter(part_.data(), dln_.data());
    dln1 = dln_.data();
  } else if (!o_.has(Fault::skip_input_allreduce)) {
    all_reduce(part_.data(), N * C_);
  }
  keep(&Stash::dln1, dln1, NlC);
  ops_->rmsnorm_backward(dx_in, w(o.ln1_w), dln1, x_in, u + o.ln1_w, a.ln1_rstd.data(), Nl_, C_);
}

template <class T>
void TpModel<T>::attention_forward(Block& a, const T* x_in, const T* u) {
  if (llama_) return llama_attention_forward(a, x_in, u);
  const auto& o = layout_->block();
  float* ws = mm_ws_.data();
  ops_->layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x_in, u + o.ln1_w, u + o.ln1_b, Nl_,
                          C_);
  const T* in1 = a.ln1.data();
  if (o_.sp) gather(a.ln1.data(), gat_.data()), in1 = gat_.data();
  ops_->matmul_forward(a.qkv.data(), in1, u + o.qkv_w, u + o.qkv_b, N_, C_, 3 * Ct_, ws);
  // Selective recompute does not keep the probabilities: they go to workspace.
  attend(a, a.att.empty() ? att_work_.data() : a.att.data());
  row_parallel(tmp_.data(), a.atty.data(), u + o.attproj_w, u + o.attproj_b, Ct_);
  ops_->residual_forward(a.xmid.data(), x_in, tmp_.data(), size_t(Nl_) * C_);
  ops_->layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.xmid.data(), u + o.ln2_w,
                          u + o.ln2_b, Nl_, C_);
}

template <class T>
void TpModel<T>::block_forward(Block& a, const T* x_in, const T* u, T* xout) {
  const auto& o = layout_->block();
  float* ws = mm_ws_.data();
  attention_forward(a, x_in, u);
  const T* in2 = a.ln2.data();
  if (o_.sp) gather(a.ln2.data(), gat_.data()), in2 = gat_.data();
  if (llama_) {  // down(swiglu(gate|up)): this rank's gate rows and the same up rows
    const T* nb = nullptr;
    ops_->matmul_forward(a.fch.data(), in2, u + o.fc_w, nb, N_, C_, 2 * Ft_, ws);
    if (o_.has(Fault::gate_up_mismatch)) reverse_up(a.fch.data());
    ops_->swiglu_forward(a.fchg.data(), a.fch.data(), N_, Ft_);
    row_parallel(tmp_.data(), a.fchg.data(), u + o.fcproj_w, nb, Ft_);
    ops_->residual_forward(xout, a.xmid.data(), tmp_.data(), size_t(Nl_) * C_);
    return;
  }
  ops_->matmul_forward(a.fch.data(), in2, u + o.fc_w, u + o.fc_b, N_, C_, 4 * Ct_, ws);
  ops_->gelu_forward(a.fchg.data(), a.fch.data(), size_t(N_) * 4 * Ct_);
  row_parallel(tmp_.data(), a.fchg.data(), u + o.fcproj_w, u + o.fcproj_b, 4 * Ct_);
  ops_->residual_forward(xout, a.xmid.data(), tmp_.data(), size_t(Nl_) * C_);
}

template <class T>
void TpModel<T>::block_backward(T* dx_in, T* du, const T* dout, const T* x_in, const Block& a, const T* u) {
  const auto& o = layout_->block();
  float* ws = mm_ws_.data();
  T* null = nullptr;
  const size_t NlC = size_t(Nl_) * C_;
  const bool input_ar = !o_.has(Fault::skip_input_allreduce);
  // Reduces a column-parallel GEMM's partial input gradient part_ (N,C) into
  // dln_ (Nl,C): Megatron's f backward (all-reduce) or SP's reduce-scatter.
  auto reduce_input_grad = [&]() -> const T* {
    if (o_.sp) {
      scatter(part_.data(), dln_.data());
      return dln_.data();
    }
    if (input_ar) all_reduce(part_.data(), size_t(N_) * C_);
    return part_.data();
  };
  // B of a split backward (du null): no weight gradient is formed; what W
  // reads is kept in stash_ as it is made.
  auto w = [&](size_t off) { return du ? du + off : null; };
  auto keep = [&](Buffer<T> Stash::* f, const T* src, size_t n) {
    if (stash_) ops_->copy((stash_->*f).data(), src, n * sizeof(T));
  };
  const size_t N = size_t(N_), C = size_t(C_);
  // MLP branch: xout = xmid + fcproj(gelu(fc(ln2(xmid)))).
  ops_->copy(dres_.data(), dout, NlC * sizeof(T));
  const T* dof = dout;
  if (o_.sp) gather(dout, gat_.data()), dof = gat_.data();
  keep(&Stash::dof, dof, N * C);
  if (llama_) {  // xout = xmid + down(swiglu(gate|up(rmsnorm2(xmid))))
    zero(dfchg_);
    ops_->matmul_backward(dfchg_.data(), w(o.fcproj_w), null, dof, a.fchg.data(), u + o.fcproj_w, N_, Ft_, C_, ws);
    zero(dfch_);
    ops_->swiglu_backward(dfch_.data(), a.fch.data(), dfchg_.data(), N_, Ft_);
    if (o_.has(Fault::gate_up_mismatch)) reverse_up(dfch_.data());
    keep(&Stash::dfch, dfch_.data(), N * 2 * size_t(Ft_));
    const T* in2 = a.ln2.data();
    if (o_.sp) gather(a.ln2.data(), gat_.data()), in2 = gat_.data(), keep(&Stash::in2, in2, N * C);
    zero(part_);
    ops_->matmul_backward(part_.data(), w(o.fc_w), null, dfch_.data(), in2, u + o.fc_w, N_, C_, 2 * Ft_, ws);
    const T* dln2 = reduce_input_grad();
    keep(&Stash::dln2, dln2, NlC);
    ops_->rmsnorm_backward(dres_.data(), w(o.ln2_w), dln2, a.xmid.data(), u + o.ln2_w, a.ln2_rstd.data(), Nl_, C_);
    return llama_attention_backward(dx_in, du, x_in, a, u);
  }
  zero(dfchg_);
  ops_->matmul_backward(dfchg_.data(), w(o.fcproj_w), null, dof, a.fchg.data(), u + o.fcproj_w, N_, 4 * Ct_, C_,
                        ws);
  if (du) ops_->add_rows_backward(du + o.fcproj_b, dout, nullptr, Nl_, C_, 0, 1);  // the bias: column sums
  zero(dfch_);
  ops_->gelu_backward(dfch_.data(), a.fch.data(), dfchg_.data(), size_t(N_) * 4 * Ct_);
  keep(&Stash::dfch, dfch_.data(), N * 4 * size_t(Ct_));
  const T* in2 = a.ln2.data();
  if (o_.sp) gather(a.ln2.data(), gat_.data()), in2 = gat_.data(), keep(&Stash::in2, in2, N * C);
  zero(part_);
  ops_->matmul_backward(part_.data(), w(o.fc_w), w(o.fc_b), dfch_.data(), in2, u + o.fc_w, N_, C_, 4 * Ct_, ws);
  const T* dln2 = reduce_input_grad();
  keep(&Stash::dln2, dln2, NlC);
  ops_->layernorm_backward(dres_.data(), w(o.ln2_w), w(o.ln2_b), dln2, a.xmid.data(), u + o.ln2_w,
                           a.ln2_mean.data(), a.ln2_rstd.data(), Nl_, C_);
  attention_backward(dx_in, du, x_in, a, u);
}

template <class T>
void TpModel<T>::alloc_stash(Stash& s, MemoryTracker* mt) const {
  const size_t N = size_t(N_), Nl = size_t(Nl_), C = size_t(C_);
  const MemTag act = MemTag::activations;
  s.dof = Buffer<T>(mt, act, N * C);
  s.dfch = Buffer<T>(mt, act, N * size_t(llama_ ? 2 * Ft_ : 4 * Ct_));
  s.dln2 = Buffer<T>(mt, act, Nl * C);
  s.dres = Buffer<T>(mt, act, N * C);
  s.dqkv = Buffer<T>(mt, act, N * size_t(llama_ ? Wf_ : 3 * Ct_));
  s.dln1 = Buffer<T>(mt, act, Nl * C);
  if (o_.sp) s.in2 = Buffer<T>(mt, act, N * C), s.in1 = Buffer<T>(mt, act, N * C);
}

template <class T>
void TpModel<T>::block_backward_input(T* dx_in, Stash& g, const T* dout, const T* x_in, const Block& a, const T* u) {
  stash_ = &g;
  block_backward(dx_in, nullptr, dout, x_in, a, u);
  stash_ = nullptr;
}

template <class T>
void TpModel<T>::block_backward_weight(T* du, const Stash& g, const T* x_in, const Block& a, bool wrong_rows) {
  const auto& o = layout_->block();
  float* ws = mm_ws_.data();
  T* null = nullptr;
  const T* nw = nullptr;  // the weights only feed the input gradients, which W never forms
  const T* in2 = o_.sp ? g.in2.data() : a.ln2.data();
  const T* in1 = o_.sp ? g.in1.data() : a.ln1.data();
  if (llama_) {  // reference/llama_block.cc's W on the shard
    ops_->matmul_backward(null, du + o.fcproj_w, null, g.dof.data(), a.fchg.data(), nw, N_, Ft_, C_, ws);
    ops_->matmul_backward(null, du + o.fc_w, null, g.dfch.data(), in2, nw, N_, C_, 2 * Ft_, ws);
    ops_->rmsnorm_backward(null, du + o.ln2_w, g.dln2.data(), a.xmid.data(), nw, a.ln2_rstd.data(), Nl_, C_);
    ops_->matmul_backward(null, du + o.attproj_w, null, g.dres.data(), a.atty.data(), nw, N_, Ct_, C_, ws);
    ops_->matmul_backward(null, du + o.qkv_w, null, g.dqkv.data(), in1, nw, N_, C_, Wf_, ws);
    ops_->rmsnorm_backward(null, du + o.ln1_w, g.dln1.data(), x_in, nw, a.ln1_rstd.data(), Nl_, C_);
    return;
  }
  // The row-parallel biases: column sums over this rank's tokens (with SP,
  // its rows of the gathered output gradients).
  const size_t mine = o_.sp && !wrong_rows ? size_t(tp_->rank()) * size_t(Nl_) * C_ : 0;
  ops_->matmul_backward(null, du + o.fcproj_w, null, g.dof.data(), a.fchg.data(), nw, N_, 4 * Ct_, C_, ws);
  ops_->add_rows_backward(du + o.fcproj_b, g.dof.data() + mine, nullptr, Nl_, C_, 0, 1);
  ops_->matmul_backward(null, du + o.fc_w, du + o.fc_b, g.dfch.data(), in2, nw, N_, C_, 4 * Ct_, ws);
  ops_->layernorm_backward(null, du + o.ln2_w, du + o.ln2_b, g.dln2.data(), a.xmid.data(), nw, a.ln2_mean.data(),
                           a.ln2_rstd.data(), Nl_, C_);
  ops_->matmul_backward(null, du + o.attproj_w, null, g.dres.data(), a.atty.data(), nw, N_, Ct_, C_, ws);
  ops_->add_rows_backward(du + o.attproj_b, g.dres.data() + mine, nullptr, Nl_, C_, 0, 1);
  ops_->matmul_backward(null, du + o.qkv_w, du + o.qkv_b, g.dqkv.data(), in1, nw, N_, C_, 3 * Ct_, ws);
  ops_->layernorm_backward(null, du + o.ln1_w, du + o.ln1_b, g.dln1.data(), x_in, nw, a.ln1_mean.data(),
                           a.ln1_rstd.data(), Nl_, C_);
}

template <class T>
void TpModel<T>::attention_backward(T* dx_in, T* du, const T* x_in, const Block& a, const T* u) {
  const auto& o = layout_->block();
  float* ws = mm_ws_.data();
  T* null = nullptr;
  const size_t NlC = size_t(Nl_) * C_;
  const bool input_ar = !o_.has(Fault::skip_input_allreduce);
  auto reduce_input_grad = [&]() -> const T* {  // as block_backward's
    if (o_.sp) {
      scatter(part_.data(), dln_.data());
      return dln_.data();
    }
    if (input_ar) all_reduce(part_.data(), size_t(N_) * C_);
    return part_.data();
  };
  auto w = [&](size_t off) { return du ? du + off : null; };  // as block_backward's
  auto keep = [&](Buffer<T> Stash::* f, const T* src, size_t n) {
    if (stash_) ops_->copy((stash_->*f).data(), src, n * sizeof(T));
  };
  const size_t N = size_t(N_), C = size_t(C_);
  // Attention branch: xmid = x_in + attproj(attn(qkv(ln1(x_in)))).
  ops_->copy(dx_in, dres_.data(), NlC * sizeof(T));
  const T* dres = dres_.data();
  if (o_.sp) gather(dres_.data(), gat_.data()), dres = gat_.data();
  keep(&Stash::dres, dres, N * C);
  zero(datty_);
  ops_->matmul_backward(datty_.data(), w(o.attproj_w), null, dres, a.atty.data(), u + o.attproj_w, N_, Ct_, C_,
                        ws);
  if (du) ops_->add_rows_backward(du + o.attproj_b, dres_.data(), nullptr, Nl_, C_, 0, 1);
  zero(dqkv_);
  attend_backward(a);
  keep(&Stash::dqkv, dqkv_.data(), N * 3 * size_t(Ct_));
  const T* in1 = a.ln1.data();
  if (o_.sp) gather(a.ln1.data(), gat_.data()), in1 = gat_.data(), keep(&Stash::in1, in1, N * C);
  zero(part_);
  ops_->matmul_backward(part_.data(), w(o.qkv_w), w(o.qkv_b), dqkv_.data(), in1, u + o.qkv_w, N_, C_, 3 * Ct_,
                        ws);
  const T* dln1 = reduce_input_grad();
  keep(&Stash::dln1, dln1, NlC);
  ops_->layernorm_backward(dx_in, w(o.ln1_w), w(o.ln1_b), dln1, x_in, u + o.ln1_w, a.ln1_mean.data(),
                           a.ln1_rstd.data(), Nl_, C_);
}

template <class T>
void TpModel<T>::moe_block_forward(Block& a, MoeActs<T>& m, const T* x_in, const T* u, T* xout, const T* experts) {
  attention_forward(a, x_in, u);
  // Every tp rank routes the whole microbatch's tokens (SP: ln2's output
  // gathered, as the dense MLP's input) and gets the whole output; it keeps
  // its own tokens' rows (SP: its chunk).
  const T* in = a.ln2.data();
  T* out = tmp_.data();
  if (o_.sp) gather(a.ln2.data(), moe_x_.data()), in = moe_x_.data(), out = part_.data();
  moe_->forward(m, out, in, u, moe_scratch_, experts);
  const T* mine = o_.sp ? out + size_t(tp_->rank()) * Nl_ * C_ : out;
  ops_->residual_forward(xout, a.xmid.data(), mine, size_t(Nl_) * C_);
}

template <class T>
void TpModel<T>::moe_block_backward(T* dx_in, T* du, const T* dout, const T* x_in, const Block& a,
                                    const MoeActs<T>& m, const T* u, double aux_weight, const T* experts,
                                    T* dexperts) {
  const auto& o = layout_->block();
  const size_t NlC = size_t(Nl_) * C_;
  ops_->copy(dres_.data(), dout, NlC * sizeof(T));
  const T* dy = dout;  // SP: the output's gradient and the input, gathered over tp (every token on every rank)
  const T* in = a.ln2.data();
  if (o_.sp) gather(dout, gat_.data()), dy = gat_.data(), gather(a.ln2.data(), moe_x_.data()), in = moe_x_.data();
  zero(part_);  // d ln2: the MoE MLP's input gradient, whole on every tp rank (its partial sums reduced inside)
  moe_->backward(part_.data(), du, dy, in, m, u, aux_weight, moe_scratch_, experts, dexperts);
  const T* dln2 = o_.sp ? part_.data() + size_t(tp_->rank()) * NlC : part_.data();  // this rank's tokens' rows
  if (llama_) {
    ops_->rmsnorm_backward(dres_.data(), du + o.ln2_w, dln2, a.xmid.data(), u + o.ln2_w, a.ln2_rstd.data(), Nl_,
                           C_);
    return llama_attention_backward(dx_in, du, x_in, a, u);
  }
  ops_->layernorm_backward(dres_.data(), du + o.ln2_w, du + o.ln2_b, dln2, a.xmid.data(), u + o.ln2_w,
                           a.ln2_mean.data(), a.ln2_rstd.data(), Nl_, C_);
  attention_backward(dx_in, du, x_in, a, u);
}

template <class T>
double TpModel<T>::head_forward(Head& h, const T* x, const int32_t* targets, const T* lnf, const T* wte) {
  if (llama_)  // model.norm; wte is the untied lm_head's shard
    ops_->rmsnorm_forward(h.lnf.data(), h.lnf_rstd.data(), x, lnf, Nl_, C_, layout_->model().norm_eps);
  else
    ops_->layernorm_forward(h.lnf.data(), h.lnf_mean.data(), h.lnf_rstd.data(), x, lnf, lnf + C_, Nl_, C_);
  const T* in = h.lnf.data();
  if (o_.sp) gather(h.lnf.data(), gat_.data()), in = gat_.data();
  T* logits = h.probs.data();  // (N, Vr): logits, then probabilities in place
  ops_->matmul_forward(logits, in, wte, static_cast<const T*>(nullptr), N_, C_, Vr_, mm_ws_.data());
  // Vocabulary-parallel softmax cross-entropy over the valid columns: the
  // row max, then the sums of exponentials and the target's logit (on the
  // rank that owns it), each reduced over tp.
  A* mx = cmax_.data();
  A* sum = csum_.data();  // [0, N): sum of exponentials
  A* tgt = sum + N_;      // [N, 2N): the target's logit
  ops_->vocab_logit_max(mx, logits, N_, Vr_, valid_);
  if (o_.tp > 1) tp_->all_reduce(mx, mx, size_t(N_), dtype_of<A>(), ReduceOp::max);
  ops_->vocab_sum_exp(sum, tgt, logits, mx, targets, vb_, N_, Vr_, valid_);
  if (o_.tp > 1) tp_->all_reduce(sum, sum, 2 * size_t(N_), dtype_of<A>());
  ops_->vocab_softmax_loss(h.losses.data(), logits, logits, mx, sum, tgt, N_, Vr_, valid_);
  return ops_->sum(h.losses.data(), size_t(N_));
}

template <class T>
void TpModel<T>::head_backward(T* dx, T* dlnf, T* dwte, const T* x, const int32_t* targets, const Head& h,
                               const T* lnf, const T* wte, double dloss) {
  zero(dlogits_);
  ops_->vocab_crossentropy_backward(dlogits_.data(), h.probs.data(), targets, vb_, dloss, N_, Vr_, valid_);
  const T* in = h.lnf.data();
  if (o_.sp) gather(h.lnf.data(), gat_.data()), in = gat_.data();
  zero(part_);
  ops_->matmul_backward(part_.data(), dwte, static_cast<T*>(nullptr), dlogits_.data(), in, wte, N_, C_, Vr_,
                        mm_ws_.data());
  const T* dln = part_.data();
  if (o_.sp) {
    scatter(part_.data(), dln_.data());
    dln = dln_.data();
  } else {
    all_reduce(part_.data(), size_t(N_) * C_);
  }
  ops_->zero(dx, size_t(Nl_) * C_ * sizeof(T));
  if (llama_)
    ops_->rmsnorm_backward(dx, dlnf, dln, x, lnf, h.lnf_rstd.data(), Nl_, C_);
  else
    ops_->layernorm_backward(dx, dlnf, dlnf + C_, dln, x, lnf, h.lnf_mean.data(), h.lnf_rstd.data(), Nl_, C_);
}

template <class T>
double TpRunner<T>::run(int64_t step, int64_t first, double dloss, UnitHooks<T>& hk) {
  const auto& l = *layout_;
  const int L = l.model().L, fin = l.final_unit();
  const bool full = o_.recompute == Recompute::full;
  const int N = model_.tokens();
  const bool staged = !host_tokens_.empty();  // on a device: drawn here, then moved
  int32_t* tok = staged ? host_tokens_.data() : tokens_.data();
  int32_t* tgt = staged ? host_targets_.data() : targets_.data();
  if (all_tokens_.empty()) {
    data_->batch(step, first, Bm_, Tn_, tok, tgt);
  } else {  // this rank's tokens of the whole sequences
    data_->batch(step, first, Bm_, Tn_, all_tokens_.data(), all_targets_.data());
    model_.select_tokens(all_tokens_.data(), all_targets_.data(), tok, tgt);
  }
  for (int n = 0; n < N; ++n)
    require(tgt[n] >= 0 && tgt[n] < l.model().V, "tp: target outside the vocabulary");
  if (staged) {
    model_.ops().to_device(tokens_.data(), tok, size_t(N) * sizeof(int32_t));
    model_.ops().to_device(targets_.data(), tgt, size_t(N) * sizeof(int32_t));
  }

  const T* emb = hk.params(0);
  model_.embed_forward(x0_.data(), tokens_.data(), emb, emb + l.wpe_offset());
  hk.release_params(0);
  auto output = [&](int i) -> const T* { return i < 0 ? x0_.data() : blocks_[size_t(i)].xout.data(); };
  const ModelConfig& mc = l.model();
  UnitHooks<T>* ek = hk.experts();
  double aux = 0;
  for (int i = 0, j = 0; i < L; ++i) {
    Block& a = full ? model_.work() : blocks_[size_t(i)];
    if (mc.is_moe(i)) {
      MoeActs<T>& ma = full ? moe_work_ : moe_[size_t(i)];
      const T* unit = hk.params(l.block_unit(i));
      model_.moe_block_forward(a, ma, output(i - 1), unit, blocks_[size_t(i)].xout.data(),
                               ek ? ek->params(j) : nullptr);
      if (ek) ek->release_params(j);
      ++j;
      aux += ma.aux;
      ma.add_to(load_, mc.moe.experts, mc.moe.top_k);
    } else {
      model_.block_forward(a, output(i - 1), hk.params(l.block_unit(i)), blocks_[size_t(i)].xout.data());
    }
    hk.release_params(l.block_unit(i));
  }
  const T* x = output(L - 1);
  const T* lnf = hk.params(fin);
  // The LM head: tied to wte (unit 0, asked for under either family, so the
  // hooks see one call order), or the llama family's lm_head after model.norm.
  const bool untied = mc.llama();
  const T* wte = hk.params(0);
  const T* head_w = untied ? lnf + mc.C : wte;
  const double loss = model_.head_forward(head_, x, targets_.data(), lnf, head_w);

  T* dx = dx_a_.data();
  T* dprev = dx_b_.data();
  if (!untied) {
    model_.head_backward(dx, hk.grads(fin), hk.head_grads(), x, targets_.data(), head_, lnf, wte, dloss);
  } else {  // the reference runner's order: model.norm's gradients, then the head's (unused: lm_head's are in fin)
    T* dlnf = hk.grads(fin);
    hk.head_grads();
    model_.head_backward(dx, dlnf, dlnf + mc.C, x, targets_.data(), head_, lnf, head_w, dloss);
  }
  hk.grads_ready(fin);
  hk.release_params(fin);
  hk.release_params(0);
  const int64_t Nt = int64_t(model_.tokens());
  for (int i = L - 1, j = mc.moe_layers() - 1; i >= 0; --i) {
    const int u = l.block_unit(i);
    const T* x_in = output(i - 1);
    if (mc.is_moe(i)) {  // the load-balancing term weighs the capacity scope's share of the step's tokens
      T* gu = hk.grads(u);
      const T* pu = hk.params(u);
      T* ge = ek ? ek->grads(j) : nullptr;
      const T* pe = ek ? ek->params(j) : nullptr;
      double aux_weight = dloss * double(model_.moe_scope().tokens(mc.moe, Nt));
      if (full) {  // rerun the block's forward, the routing and its exchanges included (the same dispatch)
        model_.moe_block_forward(model_.work(), moe_work_, x_in, pu, model_.work().xout.data(), pe);
        if (model_.moe_scope().has(MoeFault::recompute_aux_twice)) {  // the rerun's term counted again
          aux += moe_work_.aux;
          aux_weight *= 2;
        }
      }
      model_.moe_block_backward(dprev, gu, dx, x_in, full ? model_.work() : blocks_[size_t(i)],
                                full ? moe_work_ : moe_[size_t(i)], pu, aux_weight, pe, ge);
      if (ek) ek->grads_ready(j), ek->release_params(j);
      --j;
      hk.grads_ready(u);
      hk.release_params(u);
      std::swap(dx, dprev);
      continue;
    }
    const T* p = hk.params(u);
    if (full) {  // rerun the block's forward from its stored input, communication included
      const T* from = o_.has(Fault::recompute_wrong_input) && i > 0 ? output(i - 2) : x_in;
      model_.block_forward(model_.work(), from, p, model_.work().xout.data());
    }
    model_.block_backward(dprev, hk.grads(u), dx, x_in, full ? model_.work() : blocks_[size_t(i)], p);
    hk.grads_ready(u);
    hk.release_params(u);
    std::swap(dx, dprev);
  }
  T* g0 = hk.grads(0);
  model_.embed_backward(g0, g0 + l.wpe_offset(), dx, tokens_.data());
  hk.grads_ready(0);
  return loss + aux * double(Nt);
}

void add_to_full(const ParamLayout& local, const ParamLayout& full_layout, int tp_rank,
                 const std::vector<double>& values, std::vector<double>& full) {
  const auto& lp = local.params();
  const auto& fp = full_layout.params();
  for (size_t i = 0; i < lp.size(); ++i) {
    const ParamInfo& p = lp[i];
    if (p.replicated && tp_rank > 0) continue;  // tp rank 0's copy
    for (int64_t e = 0; e < p.numel; ++e) {
      const int64_t j = p.replicated ? e : p.full_index(e);
      if (j >= 0) full[size_t(fp[i].offset + j)] = values[size_t(p.offset + e)];
    }
  }
}

template class TpModel<double>;
template class TpModel<float>;
template class TpModel<bf16>;
template class TpRunner<double>;
template class TpRunner<float>;
template class TpRunner<bf16>;

}  // namespace pb::tp
