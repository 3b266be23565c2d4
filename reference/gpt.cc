#include "reference/gpt.h"

#include <algorithm>
#include <cstring>

#include "harness/status.h"
#include "kernels/cpu/ops.h"

namespace pb {

namespace k = kernels;

template <class T>
BlockActs<T>::BlockActs(MemoryTracker* mt, const ModelConfig& m, int B, int Tn, bool dense_mlp) {
  const size_t N = size_t(B) * Tn, C = m.C;
  auto act = MemTag::activations;
  const bool rms = m.llama();  // RMSNorm keeps no mean
  ln1 = Buffer<T>(mt, act, N * C);
  if (!rms) ln1_mean = Buffer<A>(mt, act, N);
  ln1_rstd = Buffer<A>(mt, act, N);
  qkv = Buffer<T>(mt, act, N * size_t(m.qkv_width()));
  att = Buffer<T>(mt, act, size_t(B) * m.NH * Tn * Tn);
  atty = Buffer<T>(mt, act, N * C);
  xmid = Buffer<T>(mt, act, N * C);
  ln2 = Buffer<T>(mt, act, N * C);
  if (!rms) ln2_mean = Buffer<A>(mt, act, N);
  ln2_rstd = Buffer<A>(mt, act, N);
  if (dense_mlp) {
    fch = Buffer<T>(mt, act, N * (rms ? 2 * size_t(m.ffn) : 4 * C));
    fchg = Buffer<T>(mt, act, N * (rms ? size_t(m.ffn) : 4 * C));
  }
  xout = Buffer<T>(mt, act, N * C);
}

template <class T>
HeadActs<T>::HeadActs(MemoryTracker* mt, const ModelConfig& m, int B, int Tn) {
  const size_t N = size_t(B) * Tn;
  auto act = MemTag::activations;
  lnf = Buffer<T>(mt, act, N * m.C);
  if (!m.llama()) lnf_mean = Buffer<A>(mt, act, N);
  lnf_rstd = Buffer<A>(mt, act, N);
  probs = Buffer<T>(mt, act, N * m.V);
  losses = Buffer<A>(mt, act, N);
}

template <class T>
BlockGradStash<T>::BlockGradStash(MemoryTracker* mt, const ModelConfig& m, int B, int Tn) {
  const size_t N = size_t(B) * Tn, C = m.C;
  auto act = MemTag::activations;
  dout = Buffer<T>(mt, act, N * C);
  dfch = Buffer<T>(mt, act, N * (m.llama() ? 2 * size_t(m.ffn) : 4 * C));
  dln2 = Buffer<T>(mt, act, N * C);
  dres = Buffer<T>(mt, act, N * C);
  dqkv = Buffer<T>(mt, act, N * size_t(m.qkv_width()));
  dln1 = Buffer<T>(mt, act, N * C);
}

namespace {
// Element counts of the Scratch buffers for one microbatch of B x Tn tokens:
// NC each of tmp, dres, dln, datty; qkv of dqkv (and drot: rot); fch, fchg
// of dfch, dfchg (gpt2: 3NC, 0, 4NC, 4NC).
struct ScratchElems {
  size_t NC, qkv, rot, fch, fchg, att, logits, mm, att_ws;
};
template <class T>
ScratchElems scratch_elems(const ModelConfig& m, int B, int Tn, bool kernel_ws) {
  const size_t N = size_t(B) * Tn;
  const int n = int(N);
  if (m.llama()) {
    const int W = m.qkv_width(), F = m.ffn;
    const size_t mm = !kernel_ws ? 0
                                 : std::max({k::matmul_workspace_floats<T>(n, m.C, W),
                                             k::matmul_workspace_floats<T>(n, m.C, m.C),
                                             k::matmul_workspace_floats<T>(n, m.C, 2 * F),
                                             k::matmul_workspace_floats<T>(n, F, m.C),
                                             k::matmul_workspace_floats<T>(n, m.C, m.V)});
    return {N * size_t(m.C), N * size_t(W), N * size_t(W), N * 2 * size_t(F), N * size_t(F),
            size_t(B) * m.NH * Tn * Tn, N * size_t(m.V), mm,
            kernel_ws ? k::attention_workspace_elems_gqa<T>(Tn, m.C, m.NH, m.kv_heads) : 0};
  }
  const size_t mm = !kernel_ws ? 0
                               : std::max({k::matmul_workspace_floats<T>(n, m.C, 3 * m.C),
                                           k::matmul_workspace_floats<T>(n, m.C, 4 * m.C),
                                           k::matmul_workspace_floats<T>(n, 4 * m.C, m.C),
                                           k::matmul_workspace_floats<T>(n, m.C, m.V)});
  const size_t NC = N * size_t(m.C);
  return {NC, 3 * NC, 0, 4 * NC, 4 * NC, size_t(B) * m.NH * Tn * Tn, N * size_t(m.V), mm,
          kernel_ws ? k::attention_workspace_elems<T>(Tn, m.C, m.NH) : 0};
}
}  // namespace

template <class T>
Scratch<T>::Scratch(MemoryTracker* mt, const ModelConfig& m, int B, int Tn, bool kernel_ws) {
  const ScratchElems e = scratch_elems<T>(m, B, Tn, kernel_ws);
  auto ws = MemTag::workspace;
  tmp = Buffer<T>(mt, ws, e.NC);
  dres = Buffer<T>(mt, ws, e.NC);
  dln = Buffer<T>(mt, ws, e.NC);
  datty = Buffer<T>(mt, ws, e.NC);
  dqkv = Buffer<T>(mt, ws, e.qkv);
  if (e.rot) drot = Buffer<T>(mt, ws, e.rot);
  datt = Buffer<T>(mt, ws, e.att);
  dfch = Buffer<T>(mt, ws, e.fch);
  dfchg = Buffer<T>(mt, ws, e.fchg);
  dlogits = Buffer<T>(mt, ws, e.logits);
  if (e.mm) mm_ws = Buffer<float>(mt, ws, e.mm);
  if (e.att_ws) att_ws = Buffer<acc_t<T>>(mt, ws, e.att_ws);
}

template <class T>
int64_t Scratch<T>::bytes(const ModelConfig& m, int B, int Tn, bool kernel_ws) {
  const ScratchElems e = scratch_elems<T>(m, B, Tn, kernel_ws);
  return int64_t((4 * e.NC + e.qkv + e.rot + e.fch + e.fchg + e.att + e.logits) * sizeof(T) + e.mm * sizeof(float) +
                 e.att_ws * sizeof(acc_t<T>));
}

template <class T>
static void zero(const kernels::DeviceOps<T>& ops, const Buffer<T>& b) {
  ops.zero(b.data(), b.size() * sizeof(T));
}

template <class T>
Gpt<T>::Gpt(const ParamLayout& layout, int B, int Tn, const kernels::DeviceOps<T>& ops)
    : layout_(&layout), B_(B), Tn_(Tn), positions_(size_t(Tn)), ops_(&ops) {
  for (int t = 0; t < Tn; ++t) positions_[size_t(t)] = t;
}

template <class T>
void Gpt<T>::set_positions(std::vector<int32_t> pos) {
  require(pos.size() == size_t(Tn_), "gpt: " + std::to_string(pos.size()) + " positions for " +
                                         std::to_string(Tn_) + " tokens");
  positions_ = std::move(pos);
}

template <class T>
void Gpt<T>::embed_forward(T* x0, const int32_t* tokens, const T* emb) const {
  embed_forward(x0, tokens, emb, emb + layout_->wpe_offset());
}

template <class T>
void Gpt<T>::embed_backward(T* demb, const T* dx0, const int32_t* tokens) const {
  embed_backward(demb, demb + layout_->wpe_offset(), dx0, tokens);
}

// The llama family has no position table: the token rows alone (positions
// enter through the rotary embedding); wpe and dwpe are unused.
template <class T>
void Gpt<T>::embed_forward(T* x0, const int32_t* tokens, const T* wte, const T* wpe) const {
  const auto& m = layout_->model();
  if (m.llama()) return ops_->embedding_lookup(x0, tokens, wte, B_ * Tn_, m.C, 0, m.V);
  ops_->encoder_forward(x0, tokens, wte, wpe, B_, Tn_, m.C);
}

template <class T>
void Gpt<T>::embed_backward(T* dwte, T* dwpe, const T* dx0, const int32_t* tokens) const {
  const auto& m = layout_->model();
  if (m.llama()) return ops_->add_rows_backward(dwte, dx0, tokens, B_ * Tn_, m.C, 0, m.V);
  ops_->encoder_backward(dwte, dwpe, dx0, tokens, B_, Tn_, m.C);
}

template <class T>
void Gpt<T>::attention_half_forward(BlockActs<T>& a, const T* x_in, const T* u, Scratch<T>& s) const {
  const auto& m = layout_->model();
  const auto& o = layout_->block();
  const int N = B_ * Tn_, C = m.C;
  float* ws = s.mm_ws.data();
  ops_->layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x_in, u + o.ln1_w,
                       u + o.ln1_b, N, C);
  ops_->matmul_forward(a.qkv.data(), a.ln1.data(), u + o.qkv_w, u + o.qkv_b, N, C, 3 * C, ws);
  ops_->attention_forward(a.atty.data(), a.att.data(), a.qkv.data(), B_, Tn_, C, m.NH, s.att_ws.data());
  ops_->matmul_forward(s.tmp.data(), a.atty.data(), u + o.attproj_w, u + o.attproj_b, N, C, C, ws);
  ops_->residual_forward(a.xmid.data(), x_in, s.tmp.data(), size_t(N) * C);
  ops_->layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.xmid.data(),
                       u + o.ln2_w, u + o.ln2_b, N, C);
}

template <class T>
void Gpt<T>::block_forward(BlockActs<T>& a, const T* x_in, const T* u, Scratch<T>& s) const {
  const auto& m = layout_->model();
  if (m.llama()) return llama_block_forward(a, x_in, u, s);
  const auto& o = layout_->block();
  const int N = B_ * Tn_, C = m.C;
  float* ws = s.mm_ws.data();
  attention_half_forward(a, x_in, u, s);
  ops_->matmul_forward(a.fch.data(), a.ln2.data(), u + o.fc_w, u + o.fc_b, N, C, 4 * C, ws);
  ops_->gelu_forward(a.fchg.data(), a.fch.data(), size_t(N) * 4 * C);
  ops_->matmul_forward(s.tmp.data(), a.fchg.data(), u + o.fcproj_w, u + o.fcproj_b, N, 4 * C, C, ws);
  ops_->residual_forward(a.xout.data(), a.xmid.data(), s.tmp.data(), size_t(N) * C);
}

template <class T>
void Gpt<T>::block_backward(T* dx_in, T* du, const T* dout, const T* x_in, const BlockActs<T>& a,
                            const T* u, Scratch<T>& s) const {
  const auto& m = layout_->model();
  if (m.llama()) return llama_block_backward(dx_in, du, dout, x_in, a, u, s);
  const auto& o = layout_->block();
  const int N = B_ * Tn_, C = m.C;
  const size_t NC = size_t(N) * C;
  float* ws = s.mm_ws.data();
  // MLP branch: xout = xmid + fcproj(gelu(fc(ln2(xmid)))).
  ops_->copy(s.dres.data(), dout, NC * sizeof(T));  // d xmid, residual path
  zero(*ops_, s.dfchg);
  ops_->matmul_backward(s.dfchg.data(), du + o.fcproj_w, du + o.fcproj_b, dout, a.fchg.data(),
                     u + o.fcproj_w, N, 4 * C, C, ws);
  zero(*ops_, s.dfch);
  ops_->gelu_backward(s.dfch.data(), a.fch.data(), s.dfchg.data(), NC * 4);
  zero(*ops_, s.dln);
  ops_->matmul_backward(s.dln.data(), du + o.fc_w, du + o.fc_b, s.dfch.data(), a.ln2.data(),
                     u + o.fc_w, N, C, 4 * C, ws);
  attention_half_backward(dx_in, du, x_in, a, u, s);
}

template <class T>
void Gpt<T>::attention_half_backward(T* dx_in, T* du, const T* x_in, const BlockActs<T>& a, const T* u,
                                     Scratch<T>& s) const {
  const auto& m = layout_->model();
  const auto& o = layout_->block();
  const int N = B_ * Tn_, C = m.C;
  const size_t NC = size_t(N) * C;
  float* ws = s.mm_ws.data();
  ops_->layernorm_backward(s.dres.data(), du + o.ln2_w, du + o.ln2_b, s.dln.data(), a.xmid.data(),
                        u + o.ln2_w, a.ln2_mean.data(), a.ln2_rstd.data(), N, C);
  // Attention branch: xmid = x_in + attproj(attn(qkv(ln1(x_in)))).
  ops_->copy(dx_in, s.dres.data(), NC * sizeof(T));
  zero(*ops_, s.datty);
  ops_->matmul_backward(s.datty.data(), du + o.attproj_w, du + o.attproj_b, s.dres.data(),
                     a.atty.data(), u + o.attproj_w, N, C, C, ws);
  zero(*ops_, s.dqkv);
  ops_->attention_backward(s.dqkv.data(), s.datt.data(), s.datty.data(), a.qkv.data(), a.att.data(),
                        B_, Tn_, C, m.NH, s.att_ws.data());
  zero(*ops_, s.dln);
  ops_->matmul_backward(s.dln.data(), du + o.qkv_w, du + o.qkv_b, s.dqkv.data(), a.ln1.data(),
                     u + o.qkv_w, N, C, 3 * C, ws);
  ops_->layernorm_backward(dx_in, du + o.ln1_w, du + o.ln1_b, s.dln.data(), x_in, u + o.ln1_w,
                        a.ln1_mean.data(), a.ln1_rstd.data(), N, C);
}

template <class T>
void Gpt<T>::moe_block_forward(BlockActs<T>& a, MoeActs<T>& ma, const T* x_in, const T* u, Scratch<T>& s,
                               MoeScratch<T>& ms, MoeScope scope, const T* ex) const {
  const int N = B_ * Tn_;
  if (layout_->model().llama()) llama_attention_half_forward(a, x_in, u, s);
  else attention_half_forward(a, x_in, u, s);
  MoeMlp<T>(*layout_, N, scope, *ops_).forward(ma, s.tmp.data(), a.ln2.data(), u, ms, ex);
  ops_->residual_forward(a.xout.data(), a.xmid.data(), s.tmp.data(), size_t(N) * layout_->model().C);
}

template <class T>
void Gpt<T>::moe_block_backward(T* dx_in, T* du, const T* dout, const T* x_in, const BlockActs<T>& a,
                                const MoeActs<T>& ma, const T* u, double aux_weight, Scratch<T>& s,
                                MoeScratch<T>& ms, MoeScope scope, const T* ex, T* dex) const {
  const int N = B_ * Tn_;
  ops_->copy(s.dres.data(), dout, size_t(N) * layout_->model().C * sizeof(T));
  zero(*ops_, s.dln);
  MoeMlp<T>(*layout_, N, scope, *ops_).backward(s.dln.data(), du, dout, a.ln2.data(), ma, u, aux_weight, ms, ex, dex);
  if (layout_->model().llama()) llama_attention_half_backward(dx_in, du, x_in, a, u, s);
  else attention_half_backward(dx_in, du, x_in, a, u, s);
}

template <class T>
void Gpt<T>::block_backward_input(T* dx_in, BlockGradStash<T>& g, const T* dout, const T* x_in,
                                  const BlockActs<T>& a, const T* u, Scratch<T>& s) const {
  const auto& m = layout_->model();
  if (m.llama()) return llama_block_backward_input(dx_in, g, dout, x_in, a, u, s);
  const auto& o = layout_->block();
  const int N = B_ * Tn_, C = m.C;
  const size_t NC = size_t(N) * C;
  float* ws = s.mm_ws.data();
  T* null = nullptr;
  ops_->copy(g.dout.data(), dout, NC * sizeof(T));
  ops_->copy(g.dres.data(), dout, NC * sizeof(T));
  zero(*ops_, s.dfchg);
  ops_->matmul_backward(s.dfchg.data(), null, null, dout, a.fchg.data(), u + o.fcproj_w, N, 4 * C, C, ws);
  zero(*ops_, g.dfch);
  ops_->gelu_backward(g.dfch.data(), a.fch.data(), s.dfchg.data(), NC * 4);
  zero(*ops_, g.dln2);
  ops_->matmul_backward(g.dln2.data(), null, null, g.dfch.data(), a.ln2.data(), u + o.fc_w, N, C, 4 * C, ws);
  ops_->layernorm_backward(g.dres.data(), null, null, g.dln2.data(), a.xmid.data(), u + o.ln2_w,
                        a.ln2_mean.data(), a.ln2_rstd.data(), N, C);
  ops_->copy(dx_in, g.dres.data(), NC * sizeof(T));
  zero(*ops_, s.datty);
  ops_->matmul_backward(s.datty.data(), null, null, g.dres.data(), a.atty.data(), u + o.attproj_w, N, C,
                     C, ws);
  zero(*ops_, g.dqkv);
  ops_->attention_backward(g.dqkv.data(), s.datt.data(), s.datty.data(), a.qkv.data(), a.att.data(),
                        B_, Tn_, C, m.NH, s.att_ws.data());
  zero(*ops_, g.dln1);
  ops_->matmul_backward(g.dln1.data(), null, null, g.dqkv.data(), a.ln1.data(), u + o.qkv_w, N, C,
                     3 * C, ws);
  ops_->layernorm_backward(dx_in, null, null, g.dln1.data(), x_in, u + o.ln1_w, a.ln1_mean.data(),
                        a.ln1_rstd.data(), N, C);
}

template <class T>
void Gpt<T>::block_backward_weight(T* du, const BlockGradStash<T>& g, const T* x_in,
                                   const BlockActs<T>& a, Scratch<T>& s) const {
  const auto& m = layout_->model();
  if (m.llama()) return llama_block_backward_weight(du, g, x_in, a, s);
  const auto& o = layout_->block();
  const int N = B_ * Tn_, C = m.C;
  float* ws = s.mm_ws.data();
  T* null = nullptr;
  const T* nw = nullptr;  // the weights only feed dinp, which W never computes
  ops_->matmul_backward(null, du + o.fcproj_w, du + o.fcproj_b, g.dout.data(), a.fchg.data(), nw, N,
                     4 * C, C, ws);
  ops_->matmul_backward(null, du + o.fc_w, du + o.fc_b, g.dfch.data(), a.ln2.data(), nw, N, C, 4 * C, ws);
  ops_->layernorm_backward(null, du + o.ln2_w, du + o.ln2_b, g.dln2.data(), a.xmid.data(), nw,
                        a.ln2_mean.data(), a.ln2_rstd.data(), N, C);
  ops_->matmul_backward(null, du + o.attproj_w, du + o.attproj_b, g.dres.data(), a.atty.data(), nw, N,
                     C, C, ws);
  ops_->matmul_backward(null, du + o.qkv_w, du + o.qkv_b, g.dqkv.data(), a.ln1.data(), nw, N, C,
                     3 * C, ws);
  ops_->layernorm_backward(null, du + o.ln1_w, du + o.ln1_b, g.dln1.data(), x_in, nw,
                        a.ln1_mean.data(), a.ln1_rstd.data(), N, C);
}

template <class T>
double Gpt<T>::head_forward(HeadActs<T>& h, const T* x_last, const int32_t* targets, const T* lnf,
                            const T* wte, Scratch<T>& s) const {
  const auto& m = layout_->model();
  if (m.llama()) return llama_head_forward(h, x_last, targets, lnf, wte, s);
  const int N = B_ * Tn_, C = m.C;
  ops_->layernorm_forward(h.lnf.data(), h.lnf_mean.data(), h.lnf_rstd.data(), x_last, lnf, lnf + C,
                       N, C);
  ops_->matmul_forward(h.probs.data(), h.lnf.data(), wte, static_cast<const T*>(nullptr), N, C, m.V,
                    s.mm_ws.data());
  ops_->crossentropy_forward(h.losses.data(), h.probs.data(), h.probs.data(), targets, N, m.V);
  return ops_->sum(h.losses.data(), size_t(N));
}

template <class T>
void Gpt<T>::head_backward(T* dx_last, T* dlnf, T* dwte, const T* x_last, const int32_t* targets,
                           const HeadActs<T>& h, const T* lnf, const T* wte, double dloss,
                           Scratch<T>& s) const {
  const auto& m = layout_->model();
  if (m.llama()) return llama_head_backward(dx_last, dlnf, dwte, x_last, targets, h, lnf, wte, dloss, s);
  const int N = B_ * Tn_, C = m.C;
  zero(*ops_, s.dlogits);
  ops_->crossentropy_backward(s.dlogits.data(), h.probs.data(), targets, dloss, N, m.V);
  zero(*ops_, s.dln);
  ops_->matmul_backward(s.dln.data(), dwte, static_cast<T*>(nullptr), s.dlogits.data(), h.lnf.data(),
                     wte, N, C, m.V, s.mm_ws.data());
  ops_->zero(dx_last, size_t(N) * C * sizeof(T));
  ops_->layernorm_backward(dx_last, dlnf, dlnf + C, s.dln.data(), x_last, lnf, h.lnf_mean.data(),
                        h.lnf_rstd.data(), N, C);
}

template struct BlockActs<double>;
template struct BlockActs<float>;
template struct BlockActs<bf16>;
template struct HeadActs<double>;
template struct HeadActs<float>;
template struct HeadActs<bf16>;
template struct BlockGradStash<double>;
template struct BlockGradStash<float>;
template struct BlockGradStash<bf16>;
template struct Scratch<double>;
template struct Scratch<float>;
template struct Scratch<bf16>;
template class Gpt<double>;
template class Gpt<float>;
template class Gpt<bf16>;

}  // namespace pb
