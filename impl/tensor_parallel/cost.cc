#include "impl/tensor_parallel/cost.h"

#include <numeric>

#include "harness/status.h"
#include "reference/moe.h"

namespace pb::tp {

int64_t layer_activation_bytes(const ActivationShape& x, Recompute r) {
  require(x.tp >= 1 && x.cp >= 1 && x.s % x.cp == 0, "--cp: must divide the sequence length");
  const int64_t e = x.elem_bytes, d = x.dropout ? 1 : 0, t = x.tp, st = x.stats_bytes;
  const int64_t sl = x.s / x.cp, sbh = sl * x.b * x.h, sb = sl * x.b;
  auto rep = [&](int64_t v) { return x.sp ? v / t : v; };  // replicated unless SP
  if (r == Recompute::full) return rep(e * sbh);
  const int64_t replicated = rep(sbh * (4 * e + 2 * d)) + rep(4 * st * sb);
  const int64_t split = sbh * 12 * e / t;
  cp::AttnShape at{x.b, x.s, x.a / t, x.h / x.a, x.cp, x.algo, int(e), int(st)};
  const int64_t scores = x.cp > 1                     ? cp::kept_bytes(at, r)
                         : r == Recompute::selective ? 0
                                                     : x.a * sl * x.s * x.b * (e + d * (e + 1)) / t;
  return replicated + split + scores;
}

ActivationShape layer_shape(const TpShape& x) {
  ActivationShape a;
  a.b = x.Bm;
  a.s = x.Tn;
  a.h = x.model.C;
  a.a = x.model.NH;
  a.tp = x.tp;
  a.cp = x.cp;
  a.algo = x.algo;
  a.sp = x.sp;
  a.elem_bytes = x.elem_bytes;
  a.stats_bytes = x.acc_bytes;
  return a;
}

TpShape make_shape(const ModelConfig& m, int tp, bool sp, Recompute r, int64_t Bm, int64_t Tn, Precision p) {
  TpShape x;
  x.model = m;
  x.tp = tp;
  x.sp = sp;
  x.recompute = r;
  x.Bm = int(Bm);
  x.Tn = int(Tn);
  const DType d = storage_dtype(p);
  x.elem_bytes = int(dtype_size(d));
  x.acc_bytes = d == DType::f64 ? 8 : 4;
  return x;
}

cp::AttnShape attn_shape(const TpShape& x) {
  cp::AttnShape a{x.Bm, x.Tn, x.model.NH / x.tp, x.model.C / x.model.NH, x.cp, x.algo, x.elem_bytes, x.acc_bytes};
  if (x.model.llama()) {  // grouped-query attention: the rank's kv heads (runner.cc llama_widths)
    const int kvl = x.model.kv_heads % x.tp == 0 ? x.model.kv_heads / x.tp : 1;
    a.kv = x.cp > 1 && x.algo == CpAlgo::ulysses ? std::lcm(kvl, x.cp) : kvl;  // Ulysses: replicated to split
  }
  return a;
}

int64_t activation_bytes(const TpShape& x) { return stage_activation_bytes(x, x.model.L, true, true); }

int64_t block_stash_bytes(const TpShape& x) {
  const ModelConfig& m = x.model;
  const int64_t N = x.tokens(), C = m.C, t = x.tp, e = x.elem_bytes, Nl = x.sp ? N / t : N;
  int64_t up = 4 * C / t, qkv = 3 * C / t;
  if (m.llama()) {
    const int64_t hs = C / m.NH, kv = m.kv_heads % t != 0 ? m.kv_heads : m.kv_heads / t;
    up = 2 * (m.ffn / t);
    qkv = C / t + 2 * kv * hs;
  }
  return e * (2 * N * C + N * (up + qkv) + 2 * Nl * C + (x.sp ? 2 * N * C : 0));
}

// The llama family's layer on a tp rank (what the tensor-parallel runner
// holds, runner.cc alloc_block; N its tokens, 1/cp of them under context
// parallel, whose attention keeps cp::kept_bytes instead of the probabilities): rmsnorm1's output,
// xmid, rmsnorm2's output and the block's output (C per held token), the two
// RMSNorms' 1/rms (one accumulator value each per held token), this rank's
// q|k|v after RoPE (Wl per token: its q heads and the kv heads it attends
// with), the attention output (C/t), gate|up (2F/t) and SwiGLU's output
// (F/t), and its heads' probabilities (heads/t x s per token). Selective
// recompute drops the probabilities, full keeps the block's output alone.
static int64_t llama_layer_activation_bytes(const TpShape& x) {
  const ModelConfig& m = x.model;
  const int64_t N = x.tokens(), C = m.C, t = x.tp, e = x.elem_bytes, ab = x.acc_bytes;
  const int64_t Nl = x.sp ? N / t : N, hs = C / m.NH;
  if (x.recompute == Recompute::full) return e * Nl * C;
  const int64_t probs = x.cp > 1                                ? cp::kept_bytes(attn_shape(x), x.recompute)
                        : x.recompute == Recompute::selective ? 0
                                                              : e * int64_t(x.Bm) * (m.NH / t) * x.Tn * x.Tn;
  const int64_t kvl = m.kv_heads % t == 0 ? m.kv_heads / t : 1;
  const int64_t Wl = C / t + 2 * kvl * hs, Ft = m.ffn / t;
  return e * Nl * C * 4 + ab * Nl * 2 + e * N * (Wl + C / t + 3 * Ft) + probs;
}

int64_t stage_activation_bytes(const TpShape& x, int64_t blocks, bool embedding, bool head, int64_t moe_blocks) {
  const int64_t N = x.tokens(), C = x.model.C, t = x.tp, e = x.elem_bytes, ab = x.acc_bytes;
  const int64_t Nl = x.sp ? N / t : N, Vr = (int64_t(x.model.V) + t - 1) / t;
  const int64_t input = e * Nl * C;  // the embedding's output, or the activation received
  // The chunk's MoE blocks keep MoeActs (experts split over tp) for the
  // dense MLP's two activations: 4C/t each, the llama family's gate|up 2F/t and SwiGLU's F/t.
  // Full recompute keeps none of either: one MoeActs, the backward's rerun's.
  const int64_t n_moe = moe_blocks >= 0 ? moe_blocks : blocks == x.model.L ? x.model.moe_layers() : 0;
  auto moe_layers = [&](int64_t dense_mlp) -> int64_t {
    if (x.model.moe.experts == 0 || n_moe == 0) return 0;
    const int64_t moe = moe_activation_bytes(x.model, N, x.moe_scope_tokens, int(e), int(ab), x.ep, int(t),
                                             x.moe_on_device);
    if (x.recompute == Recompute::full) return moe;
    return n_moe * (moe - dense_mlp);
  };
  if (x.model.llama()) {  // RMSNorm keeps 1/rms alone
    const int64_t head_bytes = head ? e * Nl * C + ab * Nl + e * N * Vr + ab * N + 4 * N : 0;  // + targets
    const int64_t layers = blocks * llama_layer_activation_bytes(x) + moe_layers(3 * e * N * (x.model.ffn / t));
    return input + layers + (embedding ? 4 * N : 0) + head_bytes;
  }
  const int64_t layers = blocks * layer_activation_bytes(layer_shape(x), x.recompute) + moe_layers(8 * e * N * C / t);
  const int64_t tokens = embedding ? 4 * N : 0;
  const int64_t head_bytes = head ? e * Nl * C + 2 * ab * Nl + e * N * Vr + ab * N + 4 * N : 0;  // + targets
  return input + layers + tokens + head_bytes;
}

std::vector<int64_t> unit_params(const ModelConfig& m, int tp) {
  const int64_t C = m.C, t = tp, E = m.moe.experts;
  std::vector<int64_t> u;
  if (m.llama()) {  // reference/layout.cc add_llama's shards
    const int64_t Vr = (int64_t(m.V) + t - 1) / t, kvC = int64_t(m.kv_heads) * (C / m.NH);
    const int64_t kvr = m.kv_heads % tp == 0 ? kvC / t : kvC;  // replicated when fewer kv heads than tp
    u.push_back(Vr * C);
    for (int l = 0; l < m.L; ++l) {
      // Norms, q|k|v, o, then the dense MLP's gate|up and down, or the
      // router (replicated) and E experts' (split like the dense MLP).
      const int64_t attention = 2 * C + C / t * C + 2 * kvr * C + C * (C / t), mlp = 3 * (m.ffn / t) * C;
      u.push_back(attention + (m.is_moe(l) ? E * C + E * mlp : mlp));
    }
    u.push_back(C + Vr * C);
    return u;
  }
  u.push_back((int64_t(m.V) + t - 1) / t * C + int64_t(m.maxT) * C);
  for (int l = 0; l < m.L; ++l)  // an MoE block: attention, LayerNorms, router, E expert MLPs (c_fc, c_proj split)
    u.push_back(m.is_moe(l) ? 4 * C * C / t + 3 * C / t + 5 * C + E * C + E * (8 * C * C / t + 4 * C / t + C)
                            : 12 * C * C / t + 7 * C / t + 6 * C);
  u.push_back(2 * C);
  return u;
}

int64_t replicated_params(const ModelConfig& m) { return replicated_params(m, m.L, true, true); }

int64_t replicated_params(const ModelConfig& m, int64_t layers, bool embedding, bool head) {
  return layers * 6 * m.C + (embedding ? int64_t(m.maxT) * m.C : 0) + (head ? 2 * int64_t(m.C) : 0);
}

int64_t step_bytes(bool sp, int64_t held, int elem_bytes) { return 8 + (sp ? held * elem_bytes : 0); }

namespace {
int64_t nce(const TpShape& x) { return x.tokens() * x.model.C * x.elem_bytes; }
void add(TpCalls& c, int64_t calls, int64_t bytes) {
  c.calls += calls;
  c.bytes += calls * bytes;
}
int64_t total(const TpPass& p) { return p.all_reduce.bytes + p.all_gather.bytes + p.reduce_scatter.bytes; }
}  // namespace

TpPieceComm layer_comm(const TpShape& x) {
  TpPieceComm c;
  if (x.tp == 1) return c;
  const int64_t b = nce(x), rerun = x.recompute == Recompute::full ? 1 : 0;
  if (!x.sp) {  // g forward after both row-parallel GEMMs, f backward before both column-parallel ones
    add(c.fwd.all_reduce, 2, b);
    add(c.bwd.all_reduce, 2 + 2 * rerun, b);
  } else {  // gather before column-parallel, reduce-scatter after row-parallel
    add(c.fwd.all_gather, 2, b);
    add(c.fwd.reduce_scatter, 2, b);
    // Backward: the output gradient before both row-parallel GEMMs, both stored
    // LayerNorm outputs re-gathered; the input gradients reduce-scattered.
    add(c.bwd.all_gather, 4 + 2 * rerun, b);
    add(c.bwd.reduce_scatter, 2 + 2 * rerun, b);
  }
  return c;
}

TpPieceComm embedding_comm(const TpShape& x) {
  TpPieceComm c;
  if (x.tp == 1) return c;
  if (!x.sp) {
    add(c.fwd.all_reduce, 1, nce(x));
  } else {
    add(c.fwd.reduce_scatter, 1, nce(x));
    add(c.bwd.all_gather, 1, nce(x));  // the output gradient, for this rank's vocabulary rows
  }
  return c;
}

TpPieceComm head_comm(const TpShape& x) {
  TpPieceComm c;
  if (x.tp == 1) return c;
  const int64_t N = x.tokens();
  add(c.fwd.all_reduce, 1, N * x.acc_bytes);      // the row maxima
  add(c.fwd.all_reduce, 1, 2 * N * x.acc_bytes);  // sums of exponentials and target logits
  if (!x.sp) {
    add(c.bwd.all_reduce, 1, nce(x));  // the LM head's input gradient
  } else {
    add(c.fwd.all_gather, 1, nce(x));  // the final LayerNorm's output
    add(c.bwd.all_gather, 1, nce(x));  // again, for the LM head's weight gradient
    add(c.bwd.reduce_scatter, 1, nce(x));
  }
  return c;
}

TpComm comm_per_microbatch(const TpShape& x) { return stage_comm_per_microbatch(x, x.model.L, true, true); }

TpComm stage_comm_per_microbatch(const TpShape& x, int64_t blocks, bool embedding, bool head) {
  TpComm c;
  auto take = [&](const TpPieceComm& p, int64_t times) {
    for (const TpPass* pass : {&p.fwd, &p.bwd}) {
      c.all_reduce += times * pass->all_reduce.bytes;
      c.all_gather += times * pass->all_gather.bytes;
      c.reduce_scatter += times * pass->reduce_scatter.bytes;
    }
    c.forward += times * total(p.fwd);
    c.backward += times * total(p.bwd);
  };
  if (embedding) take(embedding_comm(x), 1);
  take(layer_comm(x), blocks);
  if (head) take(head_comm(x), 1);
  return c;
}

}  // namespace pb::tp
