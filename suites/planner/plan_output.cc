// Table and CSV presentation of a plan (see plan_output.h for units).
#include "suites/planner/plan_output.h"

#include <algorithm>
#include <cstdio>
#include <string_view>
#include <utility>
#include <vector>

#include "harness/mesh.h"
#include "impl/spec/run_spec.h"

namespace pb::planner {
namespace {

std::string fmt(const char* f, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, args...);
  return buf;
}

double gib(int64_t b) { return double(b) / double(int64_t(1) << 30); }

bool in_axis(const std::string& group, std::string_view axis) {
  if (axis == "dp") return group.rfind("dp", 0) == 0 || group.rfind("edp", 0) == 0;  // the experts' data groups too
  if (axis == "pp") return group == "pp" || group == "embedding";
  return group == axis;
}

}  // namespace

std::string strategy_spec(const PlanInput& in) {
  RunSpec spec;
  spec.data.shard = in.shard;
  spec.data.shard_group = int(in.hsdp_group);
  spec.data.offload = in.offload;
  spec.data.overlap = in.overlap;
  spec.data.prefetch = in.prefetch;
  spec.context.algo = in.cp_algo;
  spec.context.zigzag = in.zigzag;
  spec.tensor.sp = in.sp;
  spec.tensor.recompute = in.recompute;
  if (in.pp > 1) spec.pipe.schedule = in.schedule;
  spec.pipe.virtual_stages = in.virtual_stages;
  return strategy_text(spec);
}

std::string mesh_spec(const PlanInput& in) {
  MeshShape m;
  m.dp = in.dp;
  m.tp = in.tp;
  m.cp = in.cp;
  m.pp = in.pp;
  m.ep = in.ep;
  return mesh_text(m);
}

std::string plan_options(const PlanInput& in, std::vector<std::string> extra) {
  std::vector<std::string> parts = std::move(extra);
  const auto add = [&](const char* name, const char* value) { parts.push_back(std::string(name) + "=" + value); };
  if (in.flash_attention) add("attention", in.flash_triton ? "flash-triton" : "flash");
  if (in.backward_prefetch_post) add("bwd_prefetch", "post");
  if (in.dropout) add("dropout", "1");
  if (in.grad_accum_autograd) add("grad_accum", "autograd");
  if (in.grad_reduce_bytes != 0) add("grad_reduce", in.grad_reduce_bytes == 4 ? "fp32" : "bf16");
  if (in.eager_kernels) add("kernels", in.fused_norm ? "eager-fused-norm" : "eager");
  switch (in.loss) {
    case LossKernel::fused: break;
    case LossKernel::megatron_fp32: add("loss", "megatron-fp32"); break;
    case LossKernel::flash_xentropy: add("loss", "flash-xentropy"); break;
    case LossKernel::composer_flash_xentropy: add("loss", "composer-flash-xentropy"); break;
  }
  switch (in.optimizer_step) {
    case OptimizerStep::fused: break;
    case OptimizerStep::megatron_fp16: add("optimizer", "megatron-fp16"); break;
    case OptimizerStep::torch_foreach: add("optimizer", "torch-foreach"); break;
    case OptimizerStep::composer: add("optimizer", "composer"); break;
  }
  if (in.pp_inside_dp) add("order", "tp-cp-pp-dp");
  if (in.recompute_even_matmuls) add("recompute", "op");
  if (!in.sp_regather) add("sp_gather", "saved");
  if (in.tp_overlap == TpOverlap::wgrad) add("tp_overlap", "wgrad");
  if (in.train_loop == TrainLoop::megatron_lm) add("train_loop", "megatron-lm");
  std::sort(parts.begin(), parts.end());
  std::string o;
  for (const std::string& p : parts) o += (o.empty() ? "" : ",") + p;
  return o;
}

std::string model_label(const PlanInput& in) { return in.shape ? in.shape->name : "custom"; }

int64_t comm_bytes(const PlanResult& r, std::string_view axis) {
  int64_t b = 0;
  for (const CommRow& c : r.comm)
    if (in_axis(c.group, axis)) b += c.bytes;
  return b;
}

int64_t comm_inter_node_bytes(const PlanResult& r) {
  int64_t b = 0;
  for (const CommRow& c : r.comm)
    if (c.inter_node) b += c.bytes;
  return b;
}

std::string format_plan_table(const PlanInput& in, const PlanResult& r) {
  std::string o = "parabench plan (analytic estimate)\n";
  if (in.shape) {
    const ModelConfig& m = *in.shape;
    if (m.llama())  // kv heads and the SwiGLU width; an untied head
      o += fmt("  model     %s (llama): L%d C%d NH%d KVH%d F%d T%d V%d, %.4g params\n", m.name.c_str(), m.L, m.C, m.NH,
               m.kv_heads, m.ffn, m.maxT, m.V, double(r.params_total));
    else
      o += fmt("  model     %s: L%d C%d NH%d T%d V%d, %.4g params\n", m.name.c_str(), m.L, m.C, m.NH, m.maxT, m.V,
               double(r.params_total));
    if (m.moe.experts > 0)
      o += fmt("  moe       %d of %d blocks: %d experts, top-%d, capacity factor %g (%s): %.4g params active per "
               "token\n",
               m.moe_layers(), m.L, m.moe.experts, m.moe.top_k, m.moe.capacity_factor,
               m.moe.capacity == MoeCapacity::global ? "global" : "local", double(m.active_params()));
  } else {
    o += fmt("  model     %.4g params (no shape: activations and model-parallel traffic unknown)\n",
             double(r.params_total));
  }
  o += fmt("  mesh      world %lld = dp %d x tp %d x cp %d x pp %d", (long long)r.world, in.dp, in.tp, in.cp, in.pp);
  if (in.ep > 1) o += fmt(", experts over ep %d (edp %d)", in.ep, in.dp * in.cp / in.ep);  // ep folds over dp x cp
  o += in.ranks_per_node > 0 ? fmt(", %lld ranks/node\n", (long long)in.ranks_per_node) : ", one node\n";
  o += "  strategy  " + strategy_spec(in) + ", " + precision_name(in.precision) + "\n";
  o += fmt("  batch     %lld sequences x %lld tokens, microbatch %lld, %lld microbatches per replica\n",
           (long long)r.global_batch, (long long)r.seq, (long long)in.microbatch_size, (long long)r.microbatches);
  if (in.pp > 1)
    o += fmt("  pipeline  %s, bubble %s = %.4g of ideal compute\n",
             std::string(pipeline::schedule_name(in.schedule)).c_str(), r.bubble_formula.c_str(),
             r.bubble_over_ideal);

  const StageMemory& w = r.worst;
  o += fmt("\nper-rank memory (worst pipeline rank %d)         GiB\n", w.stage);
  auto mem = [&](const char* tag, int64_t b) { o += fmt("  %-36s %10.3f\n", tag, gib(b)); };
  mem("params", w.params);
  mem("grads", w.grads);
  mem("optimizer", w.optimizer);
  if (w.optimizer_host > 0) mem("optimizer (host)", w.optimizer_host);
  if (w.activations >= 0) {
    const std::string kept = in.recompute_even_matmuls ? std::string("op") : std::string(recompute_name(in.recompute));
    mem(("activations (recompute " + kept + ")").c_str(), w.activations);
  } else {
    o += fmt("  %-36s %10s\n", "activations", "n/a");
  }
  if (w.comm > 0) mem(r.stages.size() > 1 ? "comm buffers (estimate)" : "comm buffers", w.comm);
  if (w.comm < 0) o += fmt("  %-36s %10s\n", "comm buffers", "n/a");
  if (w.workspace >= 0) mem("workspace (runner scratch)", w.workspace);
  else o += fmt("  %-36s %10s\n", "workspace (cp/pp: not modeled)", "n/a");
  mem(w.all_known() && w.workspace >= 0 ? "total device"
      : w.all_known()                   ? "total device (without workspace)"
                                        : "total device (known tags)",
      w.device_total());
  if (in.hw.memory_GB > 0) {
    const double need = double(w.device_total()), have = in.hw.memory_GB * 1e9;
    o += fmt("  %-36s %10.3f  (%s: %.4g GB per device%s)\n", need <= have ? "fits in" : "DOES NOT FIT in",
             have / double(1ull << 30), in.hw.machine.empty() ? "device" : in.hw.machine.c_str(), in.hw.memory_GB,
             w.all_known() ? "" : "; the known tags only");
  }

  o += "\ncommunication per step, per rank (logical GB: nccl-tests convention)\n";
  o += fmt("  %-10s %-5s %-14s %6s %10s %12s %12s %-6s %10s\n", "group", "phase", "op", "size", "calls",
           "logical GB", "bus GB", "link", "time ms");
  for (const CommRow& c : r.comm)
    o += fmt("  %-10s %-5s %-14s %6lld %10lld %12.4g %12.4g %-6s %10s\n", c.group.c_str(), c.phase.c_str(),
             c.op.c_str(), (long long)c.group_size, (long long)c.calls, double(c.bytes) / 1e9, c.bus_bytes / 1e9,
             c.inter_node ? "inter" : "intra", r.timed ? fmt("%.4g", c.time_s * 1e3).c_str() : "-");
  if (r.comm.empty()) o += "  (none)\n";

  o += fmt("\nFLOPs per step  model %.4g, hardware %.4g%s\n", r.model_flops, r.hardware_flops,
           !r.flops_exact                 ? " (6N per token estimate: no shape)"
           : in.shape && in.shape->llama() ? " (the llama family's count, docs/planner.md)"
                                           : " (Megatron-LM formula)");
  if (!r.timed) {
    o += "estimate        give --peak-tflops (and --bw-intra/--bw-inter) for step time and MFU\n";
    return o;
  }
  if (!in.hw.machine.empty())
    o += fmt("machine         %s (plan --machine; a datasheet's peaks are an upper bound unless calibrated)\n",
             in.hw.machine.c_str());
  o += fmt("estimate        peak %.4g TFLOP/s per rank (GEMMs at %.3g of it%s), links %.4g / %.4g GB/s intra / inter, "
           "latency %.4g us%s\n",
           in.hw.peak_tflops, r.gemm_efficiency,
           in.hw.gemm_rates.empty() || !in.shape ? "" : ": the profile's GEMM table at this rank's shapes",
           in.hw.bw_intra_GBps, in.hw.bw_inter_GBps, in.hw.latency_us,
           ((in.hw.latency_call_us > 0 ? fmt(" + %.4g us per collective call", in.hw.latency_call_us) : "") +
            (in.overlap ? ", DP/CP overlap on" : "") +
            (in.tp_overlap == TpOverlap::wgrad ? ", TP overlap wgrad" : ""))
               .c_str());
  o += fmt("  compute       %12.4g s", r.compute_s);
  if (in.hw.compute_scale != 1) o += fmt(" (x %.3g: a measured step over the kernels' rates)", in.hw.compute_scale);
  if (r.corun != 1)
    o += fmt(" (x %.3g: ranks of a node computing side by side; x %.3g measured at %lld copies)", r.corun,
             in.hw.corun_scale, (long long)in.hw.corun_ranks);
  o += in.hw.mem_bw_GBps > 0 ? fmt(" (memory-bound %.4g s: %.4g GB at %.4g GB/s)\n", r.memory_s, r.memory_bytes / 1e9,
                                   in.hw.mem_bw_GBps)
                             : std::string(" (memory-bound work not timed: give --mem-bw)\n");
  o += fmt("  bubble        %12.4g s\n", r.bubble_s);
  o += fmt("  comm          %12.4g s (exposed %.4g s)\n", r.comm_s, r.exposed_comm_s);
  if (in.hw.host_op_us > 0)
    o += fmt("  host overhead %12.4g s (%lld framework ops at %g us each, exposed where the host falls behind)\n",
             r.host_overhead_s, (long long)r.host_ops, in.hw.host_op_us);
  o += fmt("  step          %12.4g s\n", r.step_s);
  o += fmt("  tokens/s      %12.4g\n", r.tokens_per_s);
  o += fmt("  MFU           %11.2f %%   (HFU %.2f %%)\n", 100 * r.mfu, 100 * r.hfu);
  return o;
}

CsvRecord plan_record(const PlanInput& in, const PlanResult& r) {
  CsvRecord c;
  const StageMemory& w = r.worst;
  c.set("strategy", strategy_spec(in))
      .set("model", model_label(in))
      .set("precision", precision_name(in.precision))
      .set("params", r.params_total)
      .set("microbatches", r.microbatches)
      .set("global_batch", r.global_batch)
      .set("seq_len", r.seq)
      .set("mem_params", w.params)
      .set("mem_grads", w.grads)
      .set("mem_optimizer", w.optimizer)
      .set("mem_host_total", w.optimizer_host)
      .set("comm_dp_bytes", comm_bytes(r, "dp"))
      .set("comm_tp_bytes", comm_bytes(r, "tp"))
      .set("comm_cp_bytes", comm_bytes(r, "cp"))
      .set("comm_pp_bytes", comm_bytes(r, "pp"))
      .set("comm_ep_bytes", comm_bytes(r, "ep"))
      .set("comm_inter_node_bytes", comm_inter_node_bytes(r))
      .set("est_bubble", r.bubble_over_ideal);
  if (w.comm >= 0) c.set("mem_comm", w.comm);
  if (w.workspace >= 0) c.set("mem_workspace", w.workspace);
  if (w.all_known()) c.set("mem_total", w.device_total());
  if (w.activations >= 0) c.set("mem_activations", w.activations).set("activation_bytes", w.activations);
  if (r.timed) {
    c.set("est_compute_s", r.compute_s)
        .set("est_gemm_efficiency", r.gemm_efficiency)
        .set("est_memory_s", r.memory_s)
        .set("est_exposed_comm_s", r.exposed_comm_s)
        .set("est_step_time_s", r.step_s)
        .set("est_tokens_per_s", r.tokens_per_s)
        .set("est_mfu", r.mfu)
        .set("peak_flops", in.hw.peak_tflops * 1e12 * double(r.world));
  }
  c.set("machine", in.hw.machine).set("plan_options", plan_options(in));
  return c;
}

}  // namespace pb::planner
