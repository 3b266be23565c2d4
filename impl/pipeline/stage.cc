#include "harness/status.h"
#include "impl/pipeline/stage.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include "impl/tensor_parallel/cost.h"
#include "impl/tensor_parallel/runner.h"
#include "reference/gpt.h"

namespace pb::pipeline {

int64_t StagePieces::local(int64_t flat) const {
  for (const auto& p : pieces)
    if (!p.tied && flat >= p.flat_lo && flat < p.flat_hi) return p.local_off + flat - p.flat_lo;
  for (const auto& p : pieces)
    if (flat >= p.flat_lo && flat < p.flat_hi) return p.local_off + flat - p.flat_lo;
  throw std::logic_error("stage: flat element " + std::to_string(flat) + " is not held here");
}

int64_t StagePieces::head_wte_local() const {
  for (const auto& p : pieces)
    if (p.tied) return p.local_off;
  return local(0);
}

StagePieces stage_pieces(const ParamLayout& l, const Partition& part, int rank) {
  StagePieces sp;
  for (int c = 0; c < part.v; ++c) {
    const StageSlice& st = part.at(rank, c);
    const int u0 = st.embedding ? 0 : l.block_unit(st.first_block);
    const int u1 = st.head ? l.final_unit() : l.block_unit(st.first_block + st.num_blocks - 1);
    sp.pieces.push_back({l.unit_begin(u0), l.unit_end(u1), sp.size, false});
    sp.size += l.unit_end(u1) - l.unit_begin(u0);
  }
  if (part.pp > 1 && rank == part.pp - 1 && !l.model().llama()) {
    const int64_t wte = l.wpe_offset();  // the (tp shard's) token embedding
    sp.pieces.push_back({l.wte_offset(), l.wte_offset() + wte, sp.size, true});
    sp.size += wte;
  }
  return sp;
}

StageUnits stage_units(const ParamLayout& l, const Partition& part, int rank) {
  StageUnits su;
  su.of_model.assign(size_t(l.num_units()), -1);
  const int64_t wte = l.wpe_offset();  // the (tp shard's) token embedding
  auto add = [&](int64_t lo, int64_t n, bool in_norm, int fwd, int bwd) {
    su.units.push_back({lo, n, in_norm});
    su.fwd_uses.push_back(fwd);
    su.bwd_uses.push_back(bwd);
    return int(su.units.size()) - 1;
  };
  const bool untied = l.model().llama();
  const bool head_wte = part.pp == 1 && !untied;  // the head on this rank reads wte itself
  for (int c = 0; c < part.v; ++c) {
    const StageSlice& st = part.at(rank, c);
    if (st.embedding) {
      // pp = 1: the LM head on this rank reads wte in backward.
      su.of_model[0] = su.wte = add(l.wte_offset(), wte, true, head_wte ? 2 : 1, head_wte ? 1 : 0);
      if (!untied) su.wpe = add(l.wpe_offset(), l.unit_size(0) - wte, true, 1, 0);
    }
    for (int b = 0; b < st.num_blocks; ++b) {
      const int layer = st.first_block + b, u = l.block_unit(layer);
      const int64_t n = l.model().is_moe(layer) ? l.moe_block().expert0 : l.unit_size(u);
      su.of_model[size_t(u)] = add(l.unit_begin(u), n, true, 1, 1);
    }
    if (st.head && untied) {  // model.norm, then lm_head (its rows as many as wte's)
      const int f = l.final_unit();
      su.of_model[size_t(f)] = add(l.unit_begin(f), l.lm_head_offset() - l.unit_begin(f), true, 1, 1);
      su.head = add(l.lm_head_offset(), l.unit_end(f) - l.lm_head_offset(), true, 1, 1);
    } else if (st.head) {
      const int f = l.final_unit();
      su.of_model[size_t(f)] = add(l.unit_begin(f), l.unit_size(f), true, 1, 1);
    }
  }
  if (part.pp > 1 && rank == part.pp - 1 && !untied) su.tied = su.head = add(l.wte_offset(), wte, false, 1, 1);
  if (part.pp == 1 && !untied) su.head = su.wte;
  return su;
}

StageExperts stage_experts(const ParamLayout& l, const Partition& part, int rank, int ep, int ep_rank) {
  const ModelConfig& m = l.model();
  StageExperts se;
  se.of_layer.assign(size_t(m.L), -1);
  if (m.moe.experts == 0) return se;
  const MoeOffsets& o = l.moe_block();
  const int64_t n = int64_t(m.moe.experts / ep) * o.expert_size;
  for (int c = 0; c < part.v; ++c) {
    const StageSlice& st = part.at(rank, c);
    for (int b = 0; b < st.num_blocks; ++b) {
      const int layer = st.first_block + b;
      if (!m.is_moe(layer)) continue;
      se.of_layer[size_t(layer)] = int(se.units.size());
      se.units.push_back({l.unit_begin(l.block_unit(layer)) + o.expert0 + ep_rank * n, n, true});
    }
  }
  return se;
}

Ranges norm_ranges(const StagePieces& sp, int64_t lo, int64_t hi) {
  Ranges out;
  for (const auto& p : sp.pieces) {
    if (p.tied) continue;
    const int64_t b = std::max(lo, p.local_off), e = std::min(hi, p.local_off + p.flat_hi - p.flat_lo);
    if (b < e) out.push_back({p.flat_lo + b - p.local_off, p.flat_lo + e - p.local_off});
  }
  return out;
}

namespace {
int64_t moe_blocks_of(const ModelConfig& m, const StageSlice& st) {
  int64_t n = 0;
  for (int b = 0; b < st.num_blocks; ++b) n += m.is_moe(st.first_block + b) ? 1 : 0;
  return n;
}
}  // namespace

int64_t chunk_activation_bytes(const ModelConfig& m, const StageSlice& st, int64_t B, int64_t T,
                               int64_t db, int64_t ab, bool split, MoeStage moe) {
  const int64_t N = B * T, C = m.C;
  if (m.llama()) {  // the tensor-parallel runner's bytes at tp 1 are the reference's (gpt.cc BlockActs, HeadActs)
    tp::TpShape x;
    x.model = m, x.Bm = int(B), x.Tn = int(T), x.elem_bytes = int(db), x.acc_bytes = int(ab);
    x.moe_scope_tokens = moe.scope_tokens, x.ep = moe.ep, x.moe_on_device = moe.on_device;
    // BlockGradStash: dout, dln2, dres, dln1 (C), gate|up's (2F), q|k|v's (qkv_width)
    const int64_t stash = split ? (4 * N * C + 2 * N * m.ffn + N * m.qkv_width()) * db : 0;
    return tp::stage_activation_bytes(x, st.num_blocks, st.embedding, st.head, moe_blocks_of(m, st)) +
           (st.num_blocks - moe_blocks_of(m, st)) * stash;  // zb-h1: an MoE block's B keeps no stash
  }
  // BlockActs: ln1, atty, xmid, ln2, xout (C); qkv (3C); fch, fchg (4C); att; 4 LN stats (A).
  const int64_t block = (5 * N * C + 3 * N * C + 8 * N * C + B * m.NH * T * T) * db + 4 * N * ab;
  const int64_t stash = split ? (4 * N * C + 4 * N * C + 3 * N * C) * db : 0;  // BlockGradStash
  int64_t bytes = N * C * db + st.num_blocks * block + (st.num_blocks - moe_blocks_of(m, st)) * stash;
  for (int b = 0; b < st.num_blocks; ++b)  // an MoE block: MoeActs instead of fch, fchg
    if (m.is_moe(st.first_block + b))
      bytes += moe_activation_bytes(m, N, moe.scope_tokens, int(db), int(ab), moe.ep, 1, moe.on_device) -
               8 * N * C * db;
  if (st.embedding) bytes += N * 4;                              // tokens
  if (st.head) bytes += (N * C + N * m.V) * db + 3 * N * ab + N * 4;  // HeadActs + targets
  return bytes;
}

bool has_dense_block(const ModelConfig& m, const StageSlice& st) { return moe_blocks_of(m, st) < st.num_blocks; }

bool runs_stage_model(const tp::TpOptions& o) {
  return o.tp > 1 || o.context.cp > 1 || o.recompute != Recompute::none;
}

std::vector<std::vector<int64_t>> chunk_bytes_table(const ModelConfig& m, const Partition& part, int64_t B,
                                                     int64_t T, Precision p, const tp::TpOptions& o, bool split,
                                                     MoeStage moe) {
  tp::TpShape x = tp::make_shape(m, o.tp, o.sp, o.recompute, B, T, p);
  x.cp = o.context.cp;
  x.algo = o.context.algo;
  x.moe_scope_tokens = moe.scope_tokens, x.ep = moe.ep, x.moe_on_device = moe.on_device;
  const bool model_parallel = runs_stage_model(o);  // the stage runs TpModel's pieces
  std::vector<std::vector<int64_t>> table(size_t(part.pp));
  for (int r = 0; r < part.pp; ++r)
    for (int c = 0; c < part.v; ++c) {
      const StageSlice& st = part.at(r, c);
      table[size_t(r)].push_back(
          // (full recompute: the MoE blocks keep their output alone; the rerun's MoeActs is the rank's, moe_rerun_bytes)
          model_parallel ? tp::stage_activation_bytes(x, st.num_blocks, st.embedding, st.head,
                                                      o.recompute == Recompute::full ? 0 : moe_blocks_of(m, st)) +
                               (split ? (st.num_blocks - moe_blocks_of(m, st)) * tp::block_stash_bytes(x)
                                      : 0)  // zb-h1: B -> W stash (an MoE block's B keeps none)
                         : chunk_activation_bytes(m, st, B, T, x.elem_bytes, x.acc_bytes, split, moe));
    }
  return table;
}

int64_t moe_rerun_bytes(const ModelConfig& m, int64_t B, int64_t T, Precision p, const tp::TpOptions& o, MoeStage moe,
                        bool moe_blocks_here) {
  if (m.moe.experts == 0 || o.recompute != Recompute::full || !moe_blocks_here) return 0;
  const tp::TpShape x = tp::make_shape(m, o.tp, o.sp, o.recompute, B, T, p);
  return moe_activation_bytes(m, B * T / o.context.cp, moe.scope_tokens, x.elem_bytes, x.acc_bytes, moe.ep, o.tp,
                              moe.on_device);
}

int64_t stage_activation_peak(ScheduleKind kind, const ScheduleConfig& sc,
                              const std::vector<std::vector<int64_t>>& table, int rank) {
  if (sc.virtual_stages == 1) return int64_t(declared_peak_in_flight(kind, sc)[size_t(rank)]) * table[size_t(rank)][0];
  return peak_activation_bytes(make_schedule(kind, sc), table)[size_t(rank)];
}

int64_t stage_workspace_bytes(const ModelConfig& m, int64_t B, int64_t T, Precision p, const tp::TpOptions& o,
                              MoeStage moe, bool kernel_ws) {
  const int64_t N = B * T, local = N / o.context.cp, held = o.tp > 1 && o.sp ? local / o.tp : local;
  const bool model_parallel = runs_stage_model(o);
  int64_t bytes = 0;
  dispatch_dtype(storage_dtype(p), [&](auto t) {
    using U = decltype(t);
    bytes = 2 * held * m.C * int64_t(sizeof(U)) + 2 * N * 4;  // dx ping-pong, the sequences' tokens and targets
    // An MoE model's MoeScratch: the tensor-parallel stage model's own (experts split over tp), else one beside Scratch.
    bytes += model_parallel ? tp::TpModel<U>::workspace_bytes(m, o, int(B), int(T), moe.scope_tokens, moe.ep, kernel_ws)
                            : Scratch<U>::bytes(m, int(B), int(T), kernel_ws);
    if (m.moe.experts > 0 && !model_parallel)
      bytes += MoeScratch<U>::bytes(m, int(N), moe.scope_tokens, moe.ep, 1, !kernel_ws);
  });
  return bytes;
}

std::vector<int64_t> peak_activation_bytes(const Schedule& s,
                                           const std::vector<std::vector<int64_t>>& chunk_bytes) {
  std::vector<int64_t> out;
  for (int r = 0; r < s.pp; ++r) {
    int64_t live = 0, peak = 0;
    std::map<std::pair<int, int>, int> backwards_left;  // (mb, chunk) -> backwards until freed
    for (const Action& a : s.ranks[size_t(r)]) {
      const int64_t b = chunk_bytes[size_t(r)][size_t(a.chunk)];
      if (a.op == Op::forward) {
        live += b;
        backwards_left[{a.microbatch, a.chunk}] = s.split_backward ? 2 : 1;
      } else if (a.op == Op::backward || a.op == Op::backward_input || a.op == Op::backward_weight) {
        if (--backwards_left[{a.microbatch, a.chunk}] == 0) live -= b;
      }
      peak = std::max(peak, live);
    }
    out.push_back(peak);
  }
  return out;
}

bool accumulates_in_microbatch_order(const Schedule& s) {
  for (const auto& acts : s.ranks) {
    std::map<std::pair<Op, int>, int> last;  // (op, chunk) -> last microbatch
    for (const Action& a : acts) {
      if (a.op != Op::backward && a.op != Op::backward_input && a.op != Op::backward_weight) continue;
      auto [it, fresh] = last.try_emplace({a.op, a.chunk}, a.microbatch);
      if (!fresh && a.microbatch < it->second) return false;
      it->second = a.microbatch;
    }
  }
  return true;
}

}  // namespace pb::pipeline

namespace pb::pipeline {
namespace {

// One component's unit sizes and rules, as dp::Component holds them.
struct CommUnits {
  std::vector<int64_t> padded, slice;
  dp::Shard shard = dp::Shard::none;
  int64_t p = 0, g = 0;      // bytes per parameter and per gradient element (the storage type)
  int64_t r = 1, nodes = 1;  // hZeRO: dp ranks per node, nodes
  int64_t dp = 1;
  CommUnits(const std::vector<dp::UnitSpan>& units, const dp::DataAxis& a) : shard(a.shard), dp(a.dp) {
    const int64_t group = dp::shard_group_size(a);
    for (const auto& u : units) {
      padded.push_back(dp::full_elems(u.size, group, a.padding));
      slice.push_back(dp::ceil_div(u.size, group));
    }
    const dp::BytesPerParam b = dp::bytes_per_param(a.precision);
    p = b.param;
    g = b.grad;
    r = dp::dp_ranks_per_node(a);
    nodes = a.dp / r;
  }
  bool params_sharded() const { return shard >= dp::Shard::zero3; }
  bool grads_full() const { return shard <= dp::Shard::zero1; }
};

class StageCommReplay {
 public:
  StageCommReplay(const Partition& part, const ParamLayout& l, int rank, const StageCommShape& x)
      : part_(part), l_(l), rank_(rank), x_(x), dense_(x.units.units, x.dense), experts_(x.experts.units, x.expert),
        nd_(int(x.units.units.size())) {}

  void run(const Schedule& s) {
    int version = 0;
    for (const Action& a : s.ranks[size_t(rank_)]) {
      if (s.async_weights && (a.op == Op::recv_act || a.op == Op::forward) &&
          s.weight_version(a.microbatch) > version) {
        version = s.weight_version(a.microbatch);
        if (version >= 2) step();
      }
      const Key k{a.microbatch, a.chunk};
      switch (a.op) {
        case Op::recv_act:
        case Op::send_act: break;
        case Op::recv_grad:
          m_.alloc(x_.boundary_bytes);
          grad_in_.insert(k);
          break;
        case Op::send_grad:  // eager: the buffer is freed once the send returns
          if (grad_out_.erase(k)) m_.free(x_.boundary_bytes);
          break;
        case Op::forward: forward(a); break;
        case Op::backward_weight: weight(a); break;
        default: backward(a);
      }
    }
    if (s.async_weights) {  // the drain: updates K and K + 1
      for (int k = std::max(2, s.steps); k <= s.steps + 1; ++k) step();
    } else {
      step();
    }
  }
  int64_t peak() const { return m_.peak(); }

 private:
  using Key = std::pair<int, int>;
  std::pair<const CommUnits*, int> comp(int id) const {
    return id < nd_ ? std::pair{&dense_, id} : std::pair{&experts_, id - nd_};
  }
  void param(int id, bool backward) {
    auto [c, i] = comp(id);
    if (!c->params_sharded() || !gathered_.insert(id).second) return;
    m_.alloc(c->padded[size_t(i)] * c->p);
    if (c->shard == dp::Shard::hzero && !backward) {  // the forward gather's staging, freed when waited on
      m_.alloc(c->padded[size_t(i)] * c->p);
      m_.free(c->padded[size_t(i)] * c->p);
    }
  }
  void release(int id) {
    auto [c, i] = comp(id);
    if (gathered_.erase(id)) m_.free(c->padded[size_t(i)] * c->p);
  }
  void grad(int mb, int id) {
    auto [c, i] = comp(id);
    if (!c->grads_full() && unit_grads_.insert({mb, id}).second) m_.alloc(c->padded[size_t(i)] * c->g);
  }
  void reduce(const CommUnits& c, int i) {  // Component::reduce_unit
    m_.alloc(c.slice[size_t(i)] * c.g);
    if (c.shard == dp::Shard::hzero && c.nodes > 1) {
      m_.alloc(c.padded[size_t(i)] / c.r * c.g);
      m_.free(c.padded[size_t(i)] / c.r * c.g);
    }
    m_.free(c.slice[size_t(i)] * c.g);
  }
  void grad_done(int mb, int id) {
    auto [c, i] = comp(id);
    if (c->grads_full()) return;
    reduce(*c, i);
    if (unit_grads_.erase({mb, id})) m_.free(c->padded[size_t(i)] * c->g);
  }
  // After the flush: ZeRO-1 reduces every unit; ZeRO-1/2 all-gather every
  // updated slice over dp > 1 (Component::finish_reduction, step).
  void step() {
    for (const CommUnits* c : {&dense_, &experts_}) {
      for (size_t i = 0; i < c->slice.size(); ++i) {
        if (c->shard == dp::Shard::zero1) reduce(*c, int(i));
      }
    }
    for (const CommUnits* c : {&dense_, &experts_}) {
      if ((c->shard != dp::Shard::zero1 && c->shard != dp::Shard::zero2) || c->dp == 1) continue;
      for (size_t i = 0; i < c->slice.size(); ++i) {
        m_.alloc(c->slice[i] * c->p);
        m_.free(c->slice[i] * c->p);
      }
    }
  }
  int unit_of(int layer) const { return x_.units.of_model[size_t(l_.block_unit(layer))]; }
  int expert_of(int layer) const {
    return x_.experts.of_layer.empty() ? -1 : x_.experts.of_layer[size_t(layer)];
  }

  void forward(const Action& a) {
    const StageSlice& st = part_.at(rank_, a.chunk);
    if (st.embedding) {
      param(x_.units.wte, false);
      if (x_.units.wpe >= 0) param(x_.units.wpe, false);
      if (x_.units.wpe >= 0) release(x_.units.wpe);
      release(x_.units.wte);
    }
    for (int i = 0; i < st.num_blocks; ++i) {
      const int layer = st.first_block + i, u = unit_of(layer);
      param(u, false);
      if (const int j = expert_of(layer); j >= 0) {
        param(nd_ + j, false);
        release(nd_ + j);
      }
      release(u);
    }
    if (st.head) {
      const int fin = x_.units.of_model[size_t(l_.final_unit())], w = x_.units.head;
      param(fin, false);
      param(w, false);
      release(fin);
      release(w);
    }
  }
  void backward(const Action& a) {
    const StageSlice& st = part_.at(rank_, a.chunk);
    const Key k{a.microbatch, a.chunk};
    const int mb = a.microbatch;
    if (st.head) {
      const int fin = x_.units.of_model[size_t(l_.final_unit())], w = x_.units.head;
      param(fin, true);
      param(w, true);
      grad(mb, fin);
      grad(mb, w);  // pp = 1, tied: summed with the embedding's (nothing when the grads are full)
      release(fin);
      release(w);
      grad_done(mb, fin);
      if (w != x_.units.wte) grad_done(mb, w);
    }
    if (!st.embedding) m_.alloc(x_.boundary_bytes);  // the input gradient this backward produces
    for (int i = st.num_blocks - 1; i >= 0; --i) {
      const int layer = st.first_block + i, u = unit_of(layer);
      if (const int j = expert_of(layer); j >= 0) {
        grad(mb, u);
        param(u, true);
        grad(mb, nd_ + j);
        param(nd_ + j, true);
        grad_done(mb, nd_ + j);
        release(nd_ + j);
        grad_done(mb, u);
        release(u);
      } else if (a.op == Op::backward) {
        grad(mb, u);
        param(u, true);
        grad_done(mb, u);
        release(u);
      } else {  // B of a split backward: the input gradient only
        param(u, true);
        release(u);
      }
    }
    if (grad_in_.erase(k)) m_.free(x_.boundary_bytes);
    if (st.embedding) {
      grad(mb, x_.units.wte);
      if (x_.units.wpe >= 0) grad(mb, x_.units.wpe);
      grad_done(mb, x_.units.wte);
      if (x_.units.wpe >= 0) grad_done(mb, x_.units.wpe);
    } else if (part_.pp == 1) {
      grad_in_.insert({mb, a.chunk - 1});  // handed to the previous chunk on this rank
    } else {
      grad_out_.insert(k);
    }
  }
  void weight(const Action& a) {  // W of a split backward (an MoE block's gradients were formed in B)
    const StageSlice& st = part_.at(rank_, a.chunk);
    for (int i = 0; i < st.num_blocks; ++i) {
      if (expert_of(st.first_block + i) >= 0) continue;
      const int u = unit_of(st.first_block + i);
      grad(a.microbatch, u);
      grad_done(a.microbatch, u);
    }
  }

  const Partition& part_;
  const ParamLayout& l_;
  int rank_;
  const StageCommShape& x_;
  CommUnits dense_, experts_;
  int nd_;
  dp::PeakMeter m_;
  std::set<int> gathered_;
  std::set<std::pair<int, int>> unit_grads_;
  std::set<Key> grad_in_, grad_out_;
};

}  // namespace

int comm_peak_microbatches(const ScheduleConfig& cfg) { return 4 * cfg.pp * cfg.virtual_stages; }

int64_t stage_comm_peak_bytes(const Schedule& s, const Partition& part, const ParamLayout& l, int rank,
                              const StageCommShape& x) {
  require(rank >= 0 && rank < s.pp && size_t(rank) < s.ranks.size(), "stage comm: rank outside the schedule");
  require(x.boundary_bytes >= 0, "stage comm: boundary bytes must be >= 0");
  StageCommReplay r(part, l, rank, x);
  r.run(s);
  return r.peak();
}

}  // namespace pb::pipeline
