#include "impl/pipeline/stage.h"

#include <algorithm>
#include <map>
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
  if (part.pp > 1 && rank == part.pp - 1) {
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
  const bool head_wte = part.pp == 1;  // the head on this rank reads wte itself
  for (int c = 0; c < part.v; ++c) {
    const StageSlice& st = part.at(rank, c);
    if (st.embedding) {
      // pp = 1: the LM head on this rank reads wte in backward.
      su.of_model[0] = su.wte = add(l.wte_offset(), wte, true, head_wte ? 2 : 1, head_wte ? 1 : 0);
      su.wpe = add(l.wpe_offset(), l.unit_size(0) - wte, true, 1, 0);
    }
    for (int b = 0; b < st.num_blocks; ++b) {
      const int layer = st.first_block + b, u = l.block_unit(layer);
      const int64_t n = l.model().is_moe(layer) ? l.moe_block().expert0 : l.unit_size(u);
      su.of_model[size_t(u)] = add(l.unit_begin(u), n, true, 1, 1);
    }
    if (st.head) {
      const int f = l.final_unit();
      su.of_model[size_t(f)] = add(l.unit_begin(f), l.unit_size(f), true, 1, 1);
    }
  }
  if (part.pp > 1 && rank == part.pp - 1) su.tied = add(l.wte_offset(), wte, false, 1, 1);
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

int64_t chunk_activation_bytes(const ModelConfig& m, const StageSlice& st, int64_t B, int64_t T,
                               int64_t db, int64_t ab, bool split, MoeStage moe) {
  const int64_t N = B * T, C = m.C;
  // BlockActs: ln1, atty, xmid, ln2, xout (C); qkv (3C); fch, fchg (4C); att; 4 LN stats (A).
  const int64_t block = (5 * N * C + 3 * N * C + 8 * N * C + B * m.NH * T * T) * db + 4 * N * ab;
  const int64_t stash = split ? (4 * N * C + 4 * N * C + 3 * N * C) * db : 0;  // BlockGradStash
  int64_t bytes = N * C * db + st.num_blocks * (block + stash);
  for (int b = 0; b < st.num_blocks; ++b)  // an MoE block: MoeActs instead of fch, fchg
    if (m.is_moe(st.first_block + b))
      bytes += moe_activation_bytes(m, N, moe.scope_tokens, int(db), int(ab), moe.ep) - 8 * N * C * db;
  if (st.embedding) bytes += N * 4;                              // tokens
  if (st.head) bytes += (N * C + N * m.V) * db + 3 * N * ab + N * 4;  // HeadActs + targets
  return bytes;
}

std::vector<std::vector<int64_t>> chunk_bytes_table(const ModelConfig& m, const Partition& part, int64_t B,
                                                     int64_t T, Precision p, const tp::TpOptions& o, bool split,
                                                     MoeStage moe) {
  tp::TpShape x = tp::make_shape(m, o.tp, o.sp, o.recompute, B, T, p);
  x.cp = o.context.cp;
  x.algo = o.context.algo;
  const bool model_parallel = o.tp > 1 || o.context.cp > 1;  // the stage runs TpModel's pieces
  std::vector<std::vector<int64_t>> table(size_t(part.pp));
  for (int r = 0; r < part.pp; ++r)
    for (int c = 0; c < part.v; ++c) {
      const StageSlice& st = part.at(r, c);
      table[size_t(r)].push_back(model_parallel ? tp::stage_activation_bytes(x, st.num_blocks, st.embedding, st.head)
                                          : chunk_activation_bytes(m, st, B, T, x.elem_bytes, x.acc_bytes, split, moe));
    }
  return table;
}

int64_t stage_activation_peak(ScheduleKind kind, const ScheduleConfig& sc,
                              const std::vector<std::vector<int64_t>>& table, int rank) {
  if (sc.virtual_stages == 1) return int64_t(declared_peak_in_flight(kind, sc)[size_t(rank)]) * table[size_t(rank)][0];
  return peak_activation_bytes(make_schedule(kind, sc), table)[size_t(rank)];
}

int64_t stage_workspace_bytes(const ModelConfig& m, int64_t B, int64_t T, Precision p, const tp::TpOptions& o,
                              MoeStage moe) {
  const int64_t N = B * T, local = N / o.context.cp, held = o.tp > 1 && o.sp ? local / o.tp : local;
  const bool model_parallel = o.tp > 1 || o.context.cp > 1;
  int64_t bytes = 0;
  dispatch_dtype(storage_dtype(p), [&](auto t) {
    using U = decltype(t);
    bytes = 2 * held * m.C * int64_t(sizeof(U)) + 2 * N * 4;  // dx ping-pong, the sequences' tokens and targets
    bytes += model_parallel ? tp::TpModel<U>::workspace_bytes(m, o, int(B), int(T)) : Scratch<U>::bytes(m, int(B), int(T));
    if (m.moe.experts > 0) bytes += MoeScratch<U>::bytes(m, int(N), moe.scope_tokens, moe.ep);
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
