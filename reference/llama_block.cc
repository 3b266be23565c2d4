// The llama family's block and head (docs/models.md), as the GPT's pieces do
// them: the same seam (kernels/common/device_ops.h), the same buffers
// (BlockActs, HeadActs, Scratch, sized for the family), the same call order
// wherever the runner and the strategies meet them.
// Block: x -> h = x + o(attn(rope(q|k|v(rmsnorm1(x))))) -> h + down(swiglu(gate|up(rmsnorm2(h)))).
// Invariants: the rotary embedding turns q and k by positions() (each token's
// true position), after the fused q|k|v projection and before attention, in
// place, so qkv keeps what attention read; its backward turns dq and dk back
// into drot (dv copied), which the projection's backward reads. No biases.
#include "harness/status.h"
#include "reference/gpt.h"

namespace pb {

template <class T>
void Gpt<T>::llama_attention_half_forward(BlockActs<T>& a, const T* x_in, const T* u, Scratch<T>& s) const {
  const auto& m = layout_->model();
  const auto& o = layout_->block();
  const int N = B_ * Tn_, C = m.C, W = m.qkv_width(), hs = m.head_size(), KVH = m.kv_heads;
  const T* nb = nullptr;  // no bias
  float* ws = s.mm_ws.data();
  const int32_t* pos = positions_.data();
  ops_->rmsnorm_forward(a.ln1.data(), a.ln1_rstd.data(), x_in, u + o.ln1_w, N, C, m.norm_eps);
  ops_->matmul_forward(a.qkv.data(), a.ln1.data(), u + o.qkv_w, nb, N, C, W, ws);
  ops_->rope_forward(a.qkv.data(), a.qkv.data(), pos, B_, Tn_, m.NH, hs, W, m.rope_theta);
  ops_->rope_forward(a.qkv.data() + C, a.qkv.data() + C, pos, B_, Tn_, KVH, hs, W, m.rope_theta);
  ops_->attention_forward_gqa(a.atty.data(), a.att.data(), a.qkv.data(), B_, Tn_, C, m.NH, KVH, s.att_ws.data());
  ops_->matmul_forward(s.tmp.data(), a.atty.data(), u + o.attproj_w, nb, N, C, C, ws);
  ops_->residual_forward(a.xmid.data(), x_in, s.tmp.data(), size_t(N) * C);
  ops_->rmsnorm_forward(a.ln2.data(), a.ln2_rstd.data(), a.xmid.data(), u + o.ln2_w, N, C, m.norm_eps);
}

template <class T>
void Gpt<T>::llama_block_forward(BlockActs<T>& a, const T* x_in, const T* u, Scratch<T>& s) const {
  const auto& m = layout_->model();
  const auto& o = layout_->block();
  const int N = B_ * Tn_, C = m.C, F = m.ffn;
  const T* nb = nullptr;
  float* ws = s.mm_ws.data();
  llama_attention_half_forward(a, x_in, u, s);
  ops_->matmul_forward(a.fch.data(), a.ln2.data(), u + o.fc_w, nb, N, C, 2 * F, ws);
  ops_->swiglu_forward(a.fchg.data(), a.fch.data(), N, F);
  ops_->matmul_forward(s.tmp.data(), a.fchg.data(), u + o.fcproj_w, nb, N, F, C, ws);
  ops_->residual_forward(a.xout.data(), a.xmid.data(), s.tmp.data(), size_t(N) * C);
}

template <class T>
void Gpt<T>::llama_block_backward(T* dx_in, T* du, const T* dout, const T* x_in, const BlockActs<T>& a,
                                  const T* u, Scratch<T>& s) const {
  const auto& m = layout_->model();
  const auto& o = layout_->block();
  const int N = B_ * Tn_, C = m.C, F = m.ffn;
  T* nb = nullptr;
  float* ws = s.mm_ws.data();
  auto zero = [&](const Buffer<T>& b) { ops_->zero(b.data(), b.size() * sizeof(T)); };
  // MLP branch: xout = xmid + down(swiglu(gate|up(rmsnorm2(xmid)))).
  ops_->copy(s.dres.data(), dout, size_t(N) * C * sizeof(T));
  zero(s.dfchg);
  ops_->matmul_backward(s.dfchg.data(), du + o.fcproj_w, nb, dout, a.fchg.data(), u + o.fcproj_w, N, F, C, ws);
  zero(s.dfch);
  ops_->swiglu_backward(s.dfch.data(), a.fch.data(), s.dfchg.data(), N, F);
  zero(s.dln);
  ops_->matmul_backward(s.dln.data(), du + o.fc_w, nb, s.dfch.data(), a.ln2.data(), u + o.fc_w, N, C, 2 * F, ws);
  llama_attention_half_backward(dx_in, du, x_in, a, u, s);
}

// From d rmsnorm2's output (s.dln) and d xmid's residual part (s.dres) down
// to dx_in: what dense and MoE blocks share.
template <class T>
void Gpt<T>::llama_attention_half_backward(T* dx_in, T* du, const T* x_in, const BlockActs<T>& a, const T* u,
                                           Scratch<T>& s) const {
  const auto& m = layout_->model();
  const auto& o = layout_->block();
  const int N = B_ * Tn_, C = m.C, W = m.qkv_width(), hs = m.head_size(), KVH = m.kv_heads;
  const size_t NC = size_t(N) * C;
  T* nb = nullptr;
  float* ws = s.mm_ws.data();
  const int32_t* pos = positions_.data();
  auto zero = [&](const Buffer<T>& b) { ops_->zero(b.data(), b.size() * sizeof(T)); };
  ops_->rmsnorm_backward(s.dres.data(), du + o.ln2_w, s.dln.data(), a.xmid.data(), u + o.ln2_w, a.ln2_rstd.data(), N,
                         C);
  // Attention branch: xmid = x_in + o(attn(rope(q|k|v(rmsnorm1(x_in))))).
  ops_->copy(dx_in, s.dres.data(), NC * sizeof(T));
  zero(s.datty);
  ops_->matmul_backward(s.datty.data(), du + o.attproj_w, nb, s.dres.data(), a.atty.data(), u + o.attproj_w, N, C, C,
                        ws);
  zero(s.dqkv);
  ops_->attention_backward_gqa(s.dqkv.data(), s.datt.data(), s.datty.data(), a.qkv.data(), a.att.data(), B_, Tn_, C,
                               m.NH, KVH, s.att_ws.data());
  zero(s.drot);
  ops_->rope_backward(s.drot.data(), s.dqkv.data(), pos, B_, Tn_, m.NH, hs, W, m.rope_theta);
  ops_->rope_backward(s.drot.data() + C, s.dqkv.data() + C, pos, B_, Tn_, KVH, hs, W, m.rope_theta);
  const size_t kvC = size_t(KVH) * hs;
  ops_->copy_rows(s.drot.data() + C + kvC, size_t(W), s.dqkv.data() + C + kvC, size_t(W), kvC, size_t(N));
  zero(s.dln);
  ops_->matmul_backward(s.dln.data(), du + o.qkv_w, nb, s.drot.data(), a.ln1.data(), u + o.qkv_w, N, C, W, ws);
  ops_->rmsnorm_backward(dx_in, du + o.ln1_w, s.dln.data(), x_in, u + o.ln1_w, a.ln1_rstd.data(), N, C);
}

// The zero-bubble split (gpt.h block_backward_input / _weight): B runs
// llama_block_backward's input-gradient path alone and stashes the gradients
// at each weight's output (gate|up's before SwiGLU, q|k|v's before RoPE) and
// at each RMSNorm's output; W forms the weight gradients from them. Each
// weight's gradient is the same kernel call on the same operands as in the
// whole backward, so the two agree bit for bit.
template <class T>
void Gpt<T>::llama_block_backward_input(T* dx_in, BlockGradStash<T>& g, const T* dout, const T* x_in,
                                        const BlockActs<T>& a, const T* u, Scratch<T>& s) const {
  const auto& m = layout_->model();
  const auto& o = layout_->block();
  const int N = B_ * Tn_, C = m.C, F = m.ffn, W = m.qkv_width(), hs = m.head_size(), KVH = m.kv_heads;
  const size_t NC = size_t(N) * C;
  T* null = nullptr;
  float* ws = s.mm_ws.data();
  const int32_t* pos = positions_.data();
  auto zero = [&](const Buffer<T>& b) { ops_->zero(b.data(), b.size() * sizeof(T)); };
  ops_->copy(g.dout.data(), dout, NC * sizeof(T));
  ops_->copy(g.dres.data(), dout, NC * sizeof(T));
  zero(s.dfchg);
  ops_->matmul_backward(s.dfchg.data(), null, null, dout, a.fchg.data(), u + o.fcproj_w, N, F, C, ws);
  zero(g.dfch);
  ops_->swiglu_backward(g.dfch.data(), a.fch.data(), s.dfchg.data(), N, F);
  zero(g.dln2);
  ops_->matmul_backward(g.dln2.data(), null, null, g.dfch.data(), a.ln2.data(), u + o.fc_w, N, C, 2 * F, ws);
  ops_->rmsnorm_backward(g.dres.data(), null, g.dln2.data(), a.xmid.data(), u + o.ln2_w, a.ln2_rstd.data(), N, C);
  ops_->copy(dx_in, g.dres.data(), NC * sizeof(T));
  zero(s.datty);
  ops_->matmul_backward(s.datty.data(), null, null, g.dres.data(), a.atty.data(), u + o.attproj_w, N, C, C, ws);
  zero(s.dqkv);
  ops_->attention_backward_gqa(s.dqkv.data(), s.datt.data(), s.datty.data(), a.qkv.data(), a.att.data(), B_, Tn_, C,
                               m.NH, KVH, s.att_ws.data());
  zero(g.dqkv);
  ops_->rope_backward(g.dqkv.data(), s.dqkv.data(), pos, B_, Tn_, m.NH, hs, W, m.rope_theta);
  ops_->rope_backward(g.dqkv.data() + C, s.dqkv.data() + C, pos, B_, Tn_, KVH, hs, W, m.rope_theta);
  const size_t kvC = size_t(KVH) * hs;
  ops_->copy_rows(g.dqkv.data() + C + kvC, size_t(W), s.dqkv.data() + C + kvC, size_t(W), kvC, size_t(N));
  zero(g.dln1);
  ops_->matmul_backward(g.dln1.data(), null, null, g.dqkv.data(), a.ln1.data(), u + o.qkv_w, N, C, W, ws);
  ops_->rmsnorm_backward(dx_in, null, g.dln1.data(), x_in, u + o.ln1_w, a.ln1_rstd.data(), N, C);
}

template <class T>
void Gpt<T>::llama_block_backward_weight(T* du, const BlockGradStash<T>& g, const T* x_in, const BlockActs<T>& a,
                                         Scratch<T>& s) const {
  const auto& m = layout_->model();
  const auto& o = layout_->block();
  const int N = B_ * Tn_, C = m.C, F = m.ffn, W = m.qkv_width();
  float* ws = s.mm_ws.data();
  T* null = nullptr;
  const T* nw = nullptr;  // the weights only feed dinp, which W never computes
  ops_->matmul_backward(null, du + o.fcproj_w, null, g.dout.data(), a.fchg.data(), nw, N, F, C, ws);
  ops_->matmul_backward(null, du + o.fc_w, null, g.dfch.data(), a.ln2.data(), nw, N, C, 2 * F, ws);
  ops_->rmsnorm_backward(null, du + o.ln2_w, g.dln2.data(), a.xmid.data(), nw, a.ln2_rstd.data(), N, C);
  ops_->matmul_backward(null, du + o.attproj_w, null, g.dres.data(), a.atty.data(), nw, N, C, C, ws);
  ops_->matmul_backward(null, du + o.qkv_w, null, g.dqkv.data(), a.ln1.data(), nw, N, C, W, ws);
  ops_->rmsnorm_backward(null, du + o.ln1_w, g.dln1.data(), x_in, nw, a.ln1_rstd.data(), N, C);
}

// Final RMSNorm, the untied head (V, C), the loss.
template <class T>
double Gpt<T>::llama_head_forward(HeadActs<T>& h, const T* x_last, const int32_t* targets, const T* norm,
                                  const T* lm_head, Scratch<T>& s) const {
  const auto& m = layout_->model();
  const int N = B_ * Tn_, C = m.C;
  ops_->rmsnorm_forward(h.lnf.data(), h.lnf_rstd.data(), x_last, norm, N, C, m.norm_eps);
  ops_->matmul_forward(h.probs.data(), h.lnf.data(), lm_head, static_cast<const T*>(nullptr), N, C, m.V,
                       s.mm_ws.data());
  ops_->crossentropy_forward(h.losses.data(), h.probs.data(), h.probs.data(), targets, N, m.V);
  return ops_->sum(h.losses.data(), size_t(N));
}

template <class T>
void Gpt<T>::llama_head_backward(T* dx_last, T* dnorm, T* dlm_head, const T* x_last, const int32_t* targets,
                                 const HeadActs<T>& h, const T* norm, const T* lm_head, double dloss,
                                 Scratch<T>& s) const {
  const auto& m = layout_->model();
  const int N = B_ * Tn_, C = m.C;
  ops_->zero(s.dlogits.data(), s.dlogits.size() * sizeof(T));
  ops_->crossentropy_backward(s.dlogits.data(), h.probs.data(), targets, dloss, N, m.V);
  ops_->zero(s.dln.data(), s.dln.size() * sizeof(T));
  ops_->matmul_backward(s.dln.data(), dlm_head, static_cast<T*>(nullptr), s.dlogits.data(), h.lnf.data(), lm_head, N,
                        C, m.V, s.mm_ws.data());
  ops_->zero(dx_last, size_t(N) * C * sizeof(T));
  ops_->rmsnorm_backward(dx_last, dnorm, s.dln.data(), x_last, norm, h.lnf_rstd.data(), N, C);
}

#define PB_INSTANTIATE(T)                                                                                          \
  template void Gpt<T>::llama_attention_half_forward(BlockActs<T>&, const T*, const T*, Scratch<T>&) const;        \
  template void Gpt<T>::llama_attention_half_backward(T*, T*, const T*, const BlockActs<T>&, const T*,             \
                                                      Scratch<T>&) const;                                          \
  template void Gpt<T>::llama_block_forward(BlockActs<T>&, const T*, const T*, Scratch<T>&) const;                 \
  template void Gpt<T>::llama_block_backward(T*, T*, const T*, const T*, const BlockActs<T>&, const T*,            \
                                             Scratch<T>&) const;                                                   \
  template void Gpt<T>::llama_block_backward_input(T*, BlockGradStash<T>&, const T*, const T*, const BlockActs<T>&,  \
                                                   const T*, Scratch<T>&) const;                                   \
  template void Gpt<T>::llama_block_backward_weight(T*, const BlockGradStash<T>&, const T*, const BlockActs<T>&,    \
                                                    Scratch<T>&) const;                                            \
  template double Gpt<T>::llama_head_forward(HeadActs<T>&, const T*, const int32_t*, const T*, const T*,           \
                                             Scratch<T>&) const;                                                   \
  template void Gpt<T>::llama_head_backward(T*, T*, T*, const T*, const int32_t*, const HeadActs<T>&, const T*,    \
                                            const T*, double, Scratch<T>&) const;
PB_INSTANTIATE(double)
PB_INSTANTIATE(float)
PB_INSTANTIATE(bf16)
#undef PB_INSTANTIATE

}  // namespace pb
