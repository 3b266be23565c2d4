// Schedule generators. Each builds compute-only per-rank orders, then
// add_communication() places the SEND/RECV actions. The orders follow the
// reference implementations cited beside each generator; simulator_test.cc
// checks that with equal F/B/W costs each one reaches its declared bubble.
#include "impl/pipeline/schedule.h"

#include <algorithm>
#include <deque>
#include <stdexcept>

#include "harness/status.h"

namespace pb::pipeline {
namespace {

Action compute(Op op, int mb, int chunk = 0) { return Action{op, mb, chunk, -1}; }

Schedule skeleton(ScheduleKind kind, const ScheduleConfig& cfg) {
  Schedule s;
  s.name = std::string(schedule_name(kind));
  s.pp = cfg.pp;
  s.microbatches = cfg.microbatches;
  s.virtual_stages = cfg.virtual_stages;
  s.steps = cfg.steps;
  s.ranks.assign(size_t(cfg.pp), {});
  return s;
}

// 1F1B order of one rank over n microbatches (PipeDream-flush; Megatron's
// forward_backward_pipelining_without_interleaving): `warmup` forwards, then
// (F, backward) pairs, then the remaining backwards. A split backward emits
// B and defers W by `w_delay` backwards (W runs in microbatch order).
std::vector<Action> one_f_one_b_rank(int n, int warmup, bool split, int w_delay) {
  std::vector<Action> out;
  std::deque<int> pending_w;
  auto backward = [&](int mb) {
    if (!split) {
      out.push_back(compute(Op::backward, mb));
      return;
    }
    out.push_back(compute(Op::backward_input, mb));
    pending_w.push_back(mb);
    if (int(pending_w.size()) > w_delay) {
      out.push_back(compute(Op::backward_weight, pending_w.front()));
      pending_w.pop_front();
    }
  };
  for (int j = 0; j < warmup; ++j) out.push_back(compute(Op::forward, j));
  for (int i = 0; i < n - warmup; ++i) {
    out.push_back(compute(Op::forward, warmup + i));
    backward(i);
  }
  for (int i = n - warmup; i < n; ++i) backward(i);
  for (int mb : pending_w) out.push_back(compute(Op::backward_weight, mb));
  return out;
}

}  // namespace


std::string_view op_name(Op op) {
  switch (op) {
    case Op::forward: return "F";
    case Op::backward_input: return "B";
    case Op::backward_weight: return "W";
    case Op::backward: return "BW";
    case Op::send_act: return "SEND_ACT";
    case Op::recv_act: return "RECV_ACT";
    case Op::send_grad: return "SEND_GRAD";
    case Op::recv_grad: return "RECV_GRAD";
  }
  return "?";
}

bool is_compute(Op op) {
  return op == Op::forward || op == Op::backward_input || op == Op::backward_weight || op == Op::backward;
}

std::string action_str(const Action& a) {
  std::string s = std::string(op_name(a.op)) + std::to_string(a.microbatch) + ".c" + std::to_string(a.chunk);
  if (a.op == Op::send_act || a.op == Op::send_grad) s += "->r" + std::to_string(a.peer);
  if (a.op == Op::recv_act || a.op == Op::recv_grad) s += "<-r" + std::to_string(a.peer);
  return s;
}

MessageKey message_key(const Schedule& s, int rank, const Action& a) {
  const int vs = s.virtual_stage(rank, a.chunk);
  switch (a.op) {
    case Op::send_act: return {false, a.microbatch, vs + 1};
    case Op::recv_act: return {false, a.microbatch, vs};
    case Op::send_grad: return {true, a.microbatch, vs - 1};
    case Op::recv_grad: return {true, a.microbatch, vs};
    default: break;
  }
  throw std::logic_error("message_key: " + action_str(a) + " is not a SEND/RECV");
}

void check_config(ScheduleKind kind, const ScheduleConfig& c) {
  const std::string name(schedule_name(kind));
  require(c.pp >= 1, "--pp: must be >= 1, got " + std::to_string(c.pp));
  require(c.microbatches >= 1, "--microbatches: must be >= 1, got " + std::to_string(c.microbatches));
  require(c.virtual_stages >= 1, "--virtual-stages: must be >= 1, got " + std::to_string(c.virtual_stages));
  require(c.steps >= 1, "--steps: must be >= 1, got " + std::to_string(c.steps));
  if (kind != ScheduleKind::interleaved)
    require(c.virtual_stages == 1, "--virtual-stages: " + name + " has one model chunk per rank (got " +
                                       std::to_string(c.virtual_stages) + "); use interleaved");
  if (kind != ScheduleKind::pipedream_2bw)
    require(c.steps == 1, "--steps: " + name +
                              " flushes every step, so a schedule covers one "
                              "step (got " +
                              std::to_string(c.steps) + "); only 2bw spans several");
  if (kind == ScheduleKind::interleaved)
    require(c.microbatches % c.pp == 0,
            "--microbatches: interleaved requires microbatches divisible by pp (Megatron-LM), got m=" +
                std::to_string(c.microbatches) + " pp=" + std::to_string(c.pp));
  if (kind == ScheduleKind::zb_h1 || kind == ScheduleKind::pipedream_2bw)
    require(c.microbatches >= c.pp, "--microbatches: " + name + " requires microbatches >= pp, got m=" +
                                        std::to_string(c.microbatches) + " pp=" + std::to_string(c.pp));
}

Schedule make_schedule(ScheduleKind kind, const ScheduleConfig& cfg) {
  switch (kind) {
    case ScheduleKind::gpipe: return make_gpipe(cfg);
    case ScheduleKind::one_f_one_b: return make_1f1b(cfg);
    case ScheduleKind::interleaved: return make_interleaved(cfg);
    case ScheduleKind::zb_h1: return make_zb_h1(cfg);
    case ScheduleKind::pipedream_2bw: return make_2bw(cfg);
  }
  throw InputError("schedule: unknown kind");
}

// GPipe (Huang et al., NeurIPS 2019): all forwards, then all backwards, both in
// microbatch order (as torch.distributed.pipelining's ScheduleGPipe).
Schedule make_gpipe(const ScheduleConfig& cfg) {
  check_config(ScheduleKind::gpipe, cfg);
  Schedule s = skeleton(ScheduleKind::gpipe, cfg);
  for (auto& list : s.ranks) {
    for (int j = 0; j < cfg.microbatches; ++j) list.push_back(compute(Op::forward, j));
    for (int j = 0; j < cfg.microbatches; ++j) list.push_back(compute(Op::backward, j));
  }
  add_communication(s);
  return s;
}

// 1F1B / PipeDream-flush (Narayanan et al., SC'21, Fig. 3): rank r runs
// min(p - r - 1, m) warmup forwards.
Schedule make_1f1b(const ScheduleConfig& cfg) {
  check_config(ScheduleKind::one_f_one_b, cfg);
  Schedule s = skeleton(ScheduleKind::one_f_one_b, cfg);
  for (int r = 0; r < cfg.pp; ++r)
    s.ranks[size_t(r)] = one_f_one_b_rank(cfg.microbatches, std::min(cfg.pp - r - 1, cfg.microbatches),
                                          /*split=*/false, /*w_delay=*/0);
  add_communication(s);
  return s;
}

// Interleaved 1F1B (Narayanan et al., SC'21, Sec. 2.2; Megatron-core
// forward_backward_pipelining_with_interleaving with
// microbatch_group_size_per_vp_stage = pp). Virtual microbatch k in [0, m*v)
// maps to group g = k / (p*v), chunk (k % (p*v)) / p, microbatch g*p + k % p;
// backwards use the same table with the chunk mirrored (v-1-chunk). Rank r runs
// min(2(p-r-1) + (v-1)p, m*v) warmup forwards, then (F, BW) pairs, then the
// rest. With v = 1 Megatron dispatches to the non-interleaved 1F1B, and so do we.
Schedule make_interleaved(const ScheduleConfig& cfg) {
  check_config(ScheduleKind::interleaved, cfg);
  const int p = cfg.pp, v = cfg.virtual_stages, total = cfg.microbatches * v;
  if (v == 1) {
    Schedule s = make_1f1b(cfg);
    s.name = std::string(schedule_name(ScheduleKind::interleaved));
    return s;
  }
  Schedule s = skeleton(ScheduleKind::interleaved, cfg);
  auto fwd = [&](int k) {
    const int g = k / (p * v), idx = k % (p * v);
    return compute(Op::forward, g * p + idx % p, idx / p);
  };
  auto bwd = [&](int k) {
    Action a = fwd(k);
    return compute(Op::backward, a.microbatch, v - 1 - a.chunk);
  };
  for (int r = 0; r < p; ++r) {
    auto& list = s.ranks[size_t(r)];
    const int warmup = std::min(2 * (p - r - 1) + (v - 1) * p, total);
    for (int k = 0; k < warmup; ++k) list.push_back(fwd(k));
    for (int i = 0; i < total - warmup; ++i) {
      list.push_back(fwd(warmup + i));
      list.push_back(bwd(i));
    }
    for (int i = total - warmup; i < total; ++i) list.push_back(bwd(i));
  }
  add_communication(s);
  return s;
}

// ZB-H1 (Qi et al., ICLR 2024, "Zero Bubble Pipeline Parallelism", Sec. 2.1,
// Fig. 3 top): 1F1B with the backward split into B (input grad) and W (weight
// grad); rank r defers its W's by r backwards, so B's of later stages start
// earlier and the deferred W's fill the tail. Every rank then holds p
// microbatches not yet through W (1F1B's first-stage peak) and the bubble is
// (p-1)(T_F + T_B - T_W), a third of 1F1B's with T_F = T_B = T_W.
Schedule make_zb_h1(const ScheduleConfig& cfg) {
  check_config(ScheduleKind::zb_h1, cfg);
  Schedule s = skeleton(ScheduleKind::zb_h1, cfg);
  s.split_backward = true;
  for (int r = 0; r < cfg.pp; ++r)
    s.ranks[size_t(r)] = one_f_one_b_rank(cfg.microbatches, std::min(cfg.pp - r - 1, cfg.microbatches),
                                          /*split=*/true, /*w_delay=*/r);
  add_communication(s);
  return s;
}

// PipeDream-2BW (Narayanan et al., ICML 2021, Sec. 3.1): the 1F1B order run
// across step boundaries without a flush, over `steps` * m microbatches; the
// weight-version rule is documented on Schedule::async_weights.
Schedule make_2bw(const ScheduleConfig& cfg) {
  check_config(ScheduleKind::pipedream_2bw, cfg);
  Schedule s = skeleton(ScheduleKind::pipedream_2bw, cfg);
  s.async_weights = true;
  const int n = cfg.microbatches * cfg.steps;
  for (int r = 0; r < cfg.pp; ++r)
    s.ranks[size_t(r)] = one_f_one_b_rank(n, std::min(cfg.pp - r - 1, n), /*split=*/false, /*w_delay=*/0);
  add_communication(s);
  return s;
}

std::vector<std::pair<size_t, size_t>> posting_groups(const Schedule& s, int rank) {
  const auto& list = s.ranks[size_t(rank)];
  std::vector<std::pair<size_t, size_t>> out;
  int version = 0;  // the newest weight version met so far
  auto starts_version = [&](const Action& a) {
    return (a.op == Op::recv_act || a.op == Op::forward) && s.weight_version(a.microbatch) > version;
  };
  for (size_t i = 0; i < list.size();) {
    if (is_compute(list[i].op)) {
      if (starts_version(list[i])) version = s.weight_version(list[i].microbatch);
      ++i;
      continue;
    }
    size_t j = i;
    do {
      if (starts_version(list[j])) version = s.weight_version(list[j].microbatch);
      ++j;
    } while (j < list.size() && !is_compute(list[j].op) && !starts_version(list[j]));
    out.emplace_back(i, j);
    i = j;
  }
  return out;
}

Schedule pair_forward_backward(Schedule s) {
  auto is_recv = [](Op op) { return op == Op::recv_act || op == Op::recv_grad; };
  auto is_backward = [](Op op) { return op == Op::backward || op == Op::backward_input; };
  for (auto& list : s.ranks) {
    std::vector<Action> out;
    out.reserve(list.size());
    for (size_t i = 0; i < list.size();) {
      if (!is_compute(list[i].op)) {
        out.push_back(list[i++]);
        continue;
      }
      const Action c = list[i++];
      size_t j = i;  // [i, j): the messages up to the next compute
      while (j < list.size() && !is_compute(list[j].op)) ++j;
      if (c.op == Op::forward && j < list.size() && is_backward(list[j].op)) {
        // F, [its sends, the backward's receives], B -> [.., the receives], F, B, [its sends, ..]
        for (size_t k = i; k < j; ++k)
          if (is_recv(list[k].op)) out.push_back(list[k]);
        out.push_back(c);
        out.push_back(list[j]);
        for (size_t k = i; k < j; ++k)
          if (!is_recv(list[k].op)) out.push_back(list[k]);
        i = j + 1;
        continue;
      }
      out.push_back(c);
    }
    list = std::move(out);
  }
  return s;
}

void add_communication(Schedule& s) {
  if (s.pp == 1) return;  // every hand-over is local
  const int last = s.num_virtual_stages() - 1;
  for (int r = 0; r < s.pp; ++r) {
    std::vector<Action> out;
    for (const Action& a : s.ranks[size_t(r)]) {
      if (!is_compute(a.op))
        throw InputError("add_communication: rank " + std::to_string(r) + " already holds " + action_str(a));
      const int vs = s.virtual_stage(r, a.chunk);
      const bool fwd = a.op == Op::forward;
      const bool bwd_in = a.op == Op::backward || a.op == Op::backward_input;
      if (fwd && vs > 0) out.push_back({Op::recv_act, a.microbatch, a.chunk, s.rank_of(vs - 1)});
      if (bwd_in && vs < last) out.push_back({Op::recv_grad, a.microbatch, a.chunk, s.rank_of(vs + 1)});
      out.push_back(a);
      if (fwd && vs < last) out.push_back({Op::send_act, a.microbatch, a.chunk, s.rank_of(vs + 1)});
      if (bwd_in && vs > 0) out.push_back({Op::send_grad, a.microbatch, a.chunk, s.rank_of(vs - 1)});
    }
    s.ranks[size_t(r)] = std::move(out);
  }
}

}  // namespace pb::pipeline
