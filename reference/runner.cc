#include "reference/runner.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "harness/status.h"

namespace pb {

template <class T>
MicrobatchRunner<T>::MicrobatchRunner(const ParamLayout& layout, const MarkovSource& data,
                                      MemoryTracker* mt, int Bm, int Tn, MoeScope scope,
                                      const kernels::DeviceOps<T>& ops)
    : layout_(&layout), data_(&data), scope_(scope), model_(layout, Bm, Tn, ops) {
  const auto& m = layout.model();
  size_t N = size_t(Bm) * Tn;
  if (!ops.is_host()) {
    host_tokens_.resize(N);
    host_targets_.resize(N);
  }
  tokens_ = Buffer<int32_t>(mt, MemTag::activations, N);
  targets_ = Buffer<int32_t>(mt, MemTag::activations, N);
  x0_ = Buffer<T>(mt, MemTag::activations, N * m.C);
  for (int l = 0; l < m.L; ++l) blocks_.emplace_back(mt, m, Bm, Tn, !m.is_moe(l));
  moe_.resize(size_t(m.L));
  for (int l = 0; l < m.L; ++l)
    if (m.is_moe(l)) moe_[size_t(l)] =
          MoeActs<T>(mt, m, int(N), scope.tokens(m.moe, int64_t(N)), scope.ep_size(), 1, !ops.is_host());
  head_ = HeadActs<T>(mt, m, Bm, Tn);
  scratch_ = Scratch<T>(mt, m, Bm, Tn, ops.is_host());
  if (m.moe.experts > 0)
    moe_scratch_ = MoeScratch<T>(mt, m, int(N), scope.tokens(m.moe, int64_t(N)), scope.ep_size(), 1, !ops.is_host());
  dx_a_ = Buffer<T>(mt, MemTag::workspace, N * m.C);
  dx_b_ = Buffer<T>(mt, MemTag::workspace, N * m.C);
}

template <class T>
int64_t MicrobatchRunner<T>::workspace_bytes(const ModelConfig& m, int Bm, int Tn, int64_t moe_scope_tokens, int ep,
                                             bool kernel_ws) {
  const int64_t moe = m.moe.experts > 0 ? MoeScratch<T>::bytes(m, Bm * Tn, moe_scope_tokens, ep, 1, !kernel_ws) : 0;
  return Scratch<T>::bytes(m, Bm, Tn, kernel_ws) + 2 * int64_t(Bm) * Tn * m.C * int64_t(sizeof(T)) + moe;
}

template <class T>
int64_t MicrobatchRunner<T>::moe_dropped() const {
  int64_t n = 0;
  for (const auto& a : moe_) n += a.dropped;
  return n;
}

template <class T>
int64_t MicrobatchRunner<T>::moe_choices() const {
  const auto& m = layout_->model();
  return int64_t(m.moe_layers()) * model_.B() * model_.Tn() * m.moe.top_k;
}

int64_t runner_workspace_bytes(const ModelConfig& m, int Bm, int Tn, Precision p, int64_t moe_scope_tokens, int ep,
                               bool kernel_ws) {
  switch (p) {
    case Precision::fp64: return MicrobatchRunner<double>::workspace_bytes(m, Bm, Tn, moe_scope_tokens, ep, kernel_ws);
    case Precision::fp32: return MicrobatchRunner<float>::workspace_bytes(m, Bm, Tn, moe_scope_tokens, ep, kernel_ws);
    case Precision::bf16_mixed:
      return MicrobatchRunner<bf16>::workspace_bytes(m, Bm, Tn, moe_scope_tokens, ep, kernel_ws);
  }
  return 0;
}

template <class T>
double MicrobatchRunner<T>::run(int64_t step, int64_t first, double dloss, UnitHooks<T>& hk) {
  data_->batch(step, first, model_.B(), model_.Tn(), token_dst(), target_dst());
  tokens_to_device();
  return compute(dloss, hk);
}

template <class T>
void MicrobatchRunner<T>::tokens_to_device() {
  if (host_tokens_.empty()) return;
  model_.ops().to_device(tokens_.data(), host_tokens_.data(), host_tokens_.size() * sizeof(int32_t));
  model_.ops().to_device(targets_.data(), host_targets_.data(), host_targets_.size() * sizeof(int32_t));
}

template <class T>
double MicrobatchRunner<T>::run_samples(int64_t step, const std::vector<int64_t>& firsts, double dloss,
                                        UnitHooks<T>& hk) {
  const int per = model_.B() / int(firsts.size()), Tn = model_.Tn();
  require(!firsts.empty() && per * int(firsts.size()) == model_.B(), "runner: samples do not fill the microbatch");
  for (size_t i = 0; i < firsts.size(); ++i)
    data_->batch(step, firsts[i], per, Tn, token_dst() + i * size_t(per) * Tn, target_dst() + i * size_t(per) * Tn);
  tokens_to_device();
  return compute(dloss, hk);
}

template <class T>
double MicrobatchRunner<T>::compute(double dloss, UnitHooks<T>& hk) {
  const auto& l = *layout_;
  const int L = l.model().L, fin = l.final_unit();
  const int64_t lnf_rel = 0;  // ln_f.weight is the first tensor of the final unit

  model_.embed_forward(x0_.data(), tokens_.data(), hk.params(0));
  hk.release_params(0);
  const T* x = x0_.data();
  const double N = double(model_.B()) * model_.Tn();
  double aux = 0;
  UnitHooks<T>* ek = hk.experts();
  for (int i = 0, j = 0; i < L; ++i) {
    if (l.model().is_moe(i)) {
      const T* unit = hk.params(l.block_unit(i));
      model_.moe_block_forward(blocks_[i], moe_[i], x, unit, scratch_, moe_scratch_, scope_,
                               ek ? ek->params(j) : nullptr);
      if (ek) ek->release_params(j);
      ++j;
      aux += moe_[i].aux;
      record_routing(j - 1, moe_[i], int64_t(N));
      moe_[i].add_to(load_, l.model().moe.experts, l.model().moe.top_k);
    } else {
      model_.block_forward(blocks_[i], x, hk.params(l.block_unit(i)), scratch_);
    }
    hk.release_params(l.block_unit(i));
    x = blocks_[i].xout.data();
  }
  const T* lnf = hk.params(fin) + lnf_rel;
  // The LM head: tied to wte (unit 0, asked for again in the same order
  // under either family), or the llama family's own lm_head after model.norm.
  const bool untied = l.model().llama();
  const T* wte = hk.params(0);
  const T* head_w = untied ? lnf + l.model().C : wte;
  double loss = model_.head_forward(head_, x, targets_.data(), lnf, head_w, scratch_);

  T* dx = dx_a_.data();
  T* dprev = dx_b_.data();
  T* dlnf = hk.grads(fin) + lnf_rel;
  // Asked for under either family, so the strategies see one call order
  // (the data-parallel replay of it declares their buffers); the untied
  // head's gradient is lm_head's, after model.norm's.
  T* dwte = hk.head_grads();
  model_.head_backward(dx, dlnf, untied ? dlnf + l.model().C : dwte, x, targets_.data(), head_, lnf, head_w, dloss,
                       scratch_);
  hk.grads_ready(fin);
  hk.release_params(fin);
  hk.release_params(0);
  for (int i = L - 1, j = l.model().moe_layers() - 1; i >= 0; --i) {
    int u = l.block_unit(i);
    const T* x_in = i ? blocks_[i - 1].xout.data() : x0_.data();
    if (l.model().is_moe(i)) {
      T* gu = hk.grads(u);
      const T* pu = hk.params(u);
      T* ge = ek ? ek->grads(j) : nullptr;
      const T* pe = ek ? ek->params(j) : nullptr;
      model_.moe_block_backward(dprev, gu, dx, x_in, blocks_[i], moe_[i], pu,
                                dloss * double(scope_.tokens(l.model().moe, int64_t(N))), scratch_, moe_scratch_,
                                scope_, pe, ge);
      if (ek) ek->grads_ready(j), ek->release_params(j);
      --j;
    } else
      model_.block_backward(dprev, hk.grads(u), dx, x_in, blocks_[i], hk.params(u), scratch_);
    hk.grads_ready(u);
    hk.release_params(u);
    std::swap(dx, dprev);
  }
  model_.embed_backward(hk.grads(0), dx, tokens_.data());
  hk.grads_ready(0);
  return loss + aux * N;
}

template <class T>
void MicrobatchRunner<T>::reset_moe_step() {
  const ModelConfig& m = layout_->model();
  const int layers = m.moe_layers(), E = m.moe.experts;
  record_moe_ = true;
  step_rec_.tokens.assign(size_t(layers) * E, 0.0);
  step_rec_.aux_tokens.assign(size_t(layers), 0.0);
  step_rec_.margins.assign(size_t(layers), {});
}

template <class T>
void MicrobatchRunner<T>::record_routing(int j, const MoeActs<T>& a, int64_t N) {
  const ModelConfig& m = layout_->model();
  const int E = m.moe.experts, K = m.moe.top_k;
  if (!record_moe_) return;
  double* tok = step_rec_.tokens.data() + size_t(j) * E;
  std::vector<char> chosen(static_cast<size_t>(E));
  for (int64_t n = 0; n < N; ++n) {
    std::fill(chosen.begin(), chosen.end(), 0);
    for (int k = 0; k < K; ++k) {
      const int e = a.choice[size_t(n) * K + k];
      tok[e] += 1;
      chosen[size_t(e)] = 1;
    }
    if (K >= E) continue;  // every expert chosen: no boundary to flip
    const double last = double(a.probs[size_t(n) * E + a.choice[size_t(n) * K + K - 1]]);
    double best = -1;
    for (int e = 0; e < E; ++e)
      if (!chosen[size_t(e)]) best = std::max(best, double(a.probs[size_t(n) * E + e]));
    const double margin = last > 0 ? (last - best) / last : 0.0;
    if (margin < kNearTieMargin) step_rec_.margins[size_t(j)].push_back(margin);
  }
  step_rec_.aux_tokens[size_t(j)] += a.aux * double(N);
}

template class MicrobatchRunner<double>;
template class MicrobatchRunner<float>;
template class MicrobatchRunner<bf16>;

}  // namespace pb
