#include "suites/planner/machine.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <utility>

#include "harness/io/config.h"
#include "harness/io/csv.h"
#include "harness/status.h"
#include "suites/planner/model_cost.h"

namespace pb::planner {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

}  // namespace

// Peak dense figures per device from the vendors' datasheets; links per
// direction (a datasheet's NVLink / Infinity Fabric figure is both directions
// summed); the inter-node link is one 200 Gb/s (A100 nodes) or 400 Gb/s
// (later) NIC per device, as in NVIDIA's DGX systems.
namespace {
// A datasheet GPU: peaks by precision (TFLOP/s), memory bandwidth and links
// (GB/s), device memory (GB), 8 per node.
MachineProfile gpu(const char* name, const char* source, double bf16, double fp32, double fp64, double mem_bw,
                   double intra, double inter, double memory_GB) {
  MachineProfile m;
  m.hw.machine = name;
  m.source = source;
  m.peak_tflops_bf16 = bf16;
  m.peak_tflops_fp32 = fp32;
  m.peak_tflops_fp64 = fp64;
  m.hw.mem_bw_GBps = mem_bw;
  m.hw.bw_intra_GBps = intra;
  m.hw.bw_inter_GBps = inter;
  m.hw.memory_GB = memory_GB;
  m.hw.host_kernels = false;
  m.ranks_per_node = 8;
  return m;
}
}  // namespace

// Sources of the figures measured by microbenchmarks (not datasheets).
constexpr const char* kMamf =
    "stas00/ml-engineering compute/accelerator/README.md, 'Maximum Achievable Matmul FLOPS comparison table' (BF16, "
    "mamf-finder.py: torch.matmul, mean of 100 iterations after 50 warmup, best shape of a search): ";
constexpr const char* kTiles =
    "NVIDIA 'Matrix Multiplication Background User's Guide' (DU-09799-001), Sec. 2.3 and 3.1-3.2: cuBLAS's 256x128 "
    "output tiles, one per SM, tile and wave quantization; ";

const std::vector<MachineProfile>& builtin_machines() {
  static const std::vector<MachineProfile> machines = [] {
    std::vector<MachineProfile> m = {
        gpu("a100",
            "NVIDIA A100 80GB SXM4 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): BF16 Tensor Core "
            "312 TFLOPS dense, FP32 19.5, FP64 Tensor Core 19.5, HBM2e 2,039 GB/s, 80 GB, NVLink 600 GB/s (300 per "
            "direction); DGX A100: 8 GPUs, 8 x 200 Gb/s HDR InfiniBand (25 GB/s per GPU)",
            312, 19.5, 19.5, 2039, 300, 25, 80),
        gpu("h100",
            "NVIDIA H100 SXM5 datasheet: BF16 Tensor Core 1,979 TFLOPS with sparsity (989.4 dense), FP32 66.9, FP64 "
            "Tensor Core 66.9, HBM3 3.35 TB/s, 80 GB, NVLink 900 GB/s (450 per direction); DGX H100: 8 GPUs, 8 x 400 "
            "Gb/s NDR InfiniBand (50 GB/s per GPU)",
            989.4, 66.9, 66.9, 3350, 450, 50, 80),
        gpu("h200",
            "NVIDIA H200 SXM datasheet: BF16 Tensor Core 1,979 TFLOPS with sparsity (989.4 dense), FP32 66.9, FP64 "
            "Tensor Core 66.9, HBM3e 4.8 TB/s, 141 GB, NVLink 900 GB/s (450 per direction); DGX H200: 8 GPUs, 8 x 400 "
            "Gb/s NDR InfiniBand (50 GB/s per GPU)",
            989.4, 66.9, 66.9, 4800, 450, 50, 141),
        gpu("mi300x",
            "AMD Instinct MI300X datasheet: peak BF16 matrix 1,307.4 TFLOPS dense, FP32 matrix 163.4, FP64 matrix "
            "163.4, HBM3 5.3 TB/s, 192 GB, 7 Infinity Fabric links of 128 GB/s (896 GB/s both directions, 448 per "
            "direction); 8 GPUs per platform, one 400 Gb/s NIC per GPU (50 GB/s)",
            1307.4, 163.4, 163.4, 5300, 448, 50, 192),
        gpu("b200",
            "NVIDIA Blackwell datasheet, HGX B200 (1,000 W per GPU): BF16 Tensor Core 4.5 PFLOPS with sparsity (2,250 "
            "dense), FP32 80 TFLOPS, FP64 40, HBM3e 8 TB/s, 180 GB per GPU (1.44 TB per 8-GPU HGX), fifth-generation "
            "NVLink 1.8 TB/s (900 GB/s per direction); 8 GPUs per node, one 400 Gb/s ConnectX-7 NIC per GPU (50 GB/s)",
            2250, 80, 40, 8000, 900, 50, 180),
    };
    // Every datasheet figure names the datasheet; the line rates of links are
    // what a datasheet gives where no collective benchmark is cited below.
    for (MachineProfile& p : m)
      for (const char* k : {"peak_tflops_bf16", "peak_tflops_fp32", "peak_tflops_fp64", "mem_bw_GBps",
                            "bw_intra_GBps", "bw_inter_GBps", "memory_GB", "ranks_per_node"})
        p.sources[k] = p.source.substr(0, p.source.find(':')) + " (datasheet figure; the profile's source lists it)";
    // The figures no cited benchmark gives keep the planner's defaults, said so.
    for (MachineProfile& p : m) {
      p.sources["latency_us"] = p.sources["latency_inter_us"] =
          "not given: no per-step collective latency is cited for this device (0: bandwidth terms only)";
      p.sources["latency_call_us"] =
          "not given: no per-call collective latency is cited for this device (0: no base per call)";
      p.sources["gemm_efficiency"] =
          "not used when gemm_achievable_tflops_bf16 is given (bf16-mixed); otherwise 1: the datasheet peak";
      p.sources["wake_us"] = "not measured (informational only)";
      for (const KindRate& k : kKindRates)
        p.sources[k.key] = "not given: no kernel-level benchmark of this kind is cited for this device (mem_bw_GBps)";
      p.sources["flash_attention_tflops_bf16"] =
          "not given: no FlashAttention rate is cited for this device (--attention flash times the core as GEMMs)";
      p.sources["flash_attention_rates"] =
          "not given: no FlashAttention benchmark by head dimension and sequence is cited for this device";
      // Topology: the DGX / HGX / MI300X platforms' one NIC per GPU are the
      // node's rails (the datasheet in the profile's source).
      p.hw.rails = 8;
      p.sources["rails"] = p.source.substr(0, p.source.find(':')) +
                           " (datasheet figure: 8 GPUs per node, one NIC each, a rail per NIC)";
      p.sources["oversubscription"] = p.sources["leaf_nodes"] =
          "not given: no fabric oversubscription is cited for this machine (1: non-blocking above the leaf)";
    }
    // Overlapped communication is not free (Hardware::overlap_compute_slowdown):
    // the one published measurement of compute slowed by NCCL collectives
    // beside it in training found, its average over the four devices it ran.
    for (MachineProfile& p : m) {
      p.hw.overlap_compute_slowdown = 0.189;
      const bool measured = p.name() == "a100" || p.name() == "h100";
      p.sources["overlap_compute_slowdown"] =
          std::string("Lee et al. 2025, 'Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed "
                      "Deep Learning: Performance and Power Implications' (arXiv:2507.03114), abstract: 'overlapping "
                      "computation and communication can result in an average computational slowdown of 18.9%, with "
                      "a maximum of 40.0%' (GPT and LLaMA training on 4 A100s, H100s, MI250 and MI210; the average "
                      "over all four devices") +
          (measured ? ")" : "; not measured on this device)");
    }
    auto achieved = [&](const char* name, double tflops, const std::string& why, int64_t units,
                        const std::string& units_why) {
      for (MachineProfile& p : m)
        if (p.name() == name) {
          p.gemm_achievable_tflops_bf16 = tflops;
          p.sources["gemm_achievable_tflops_bf16"] = kMamf + why;
          if (units > 0) {
            p.hw.gemm_units = units;
            p.hw.gemm_tile_m = 256;
            p.hw.gemm_tile_n = 128;
            p.sources["gemm_units"] = units_why;
            p.sources["gemm_tile_m"] = p.sources["gemm_tile_n"] = std::string(kTiles) + "the planner uses 256x128";
          }
        }
    };
    achieved("a100", 271.2, "NVIDIA A100 SXM 271.2 TFLOPS (86.9% of 312) at 1024x10240x5120, torch 2.6.0+cu126", 108,
             "NVIDIA A100 Tensor Core GPU Architecture whitepaper: A100 has 108 SMs");
    achieved("h100", 794.5, "NVIDIA H100 SXM 794.5 TFLOPS (80.3% of 989) at 2048x2048x13312, torch 2.7.0+cu126", 132,
             "NVIDIA H100 Tensor Core GPU Architecture whitepaper: H100 SXM5 has 132 SMs");
    achieved("h200", 794.5, "NVIDIA H100 SXM 794.5 TFLOPS, the table's note: 'H200 is the same'", 132,
             "NVIDIA H200 is the H100 SXM5 die (132 SMs) with HBM3e (NVIDIA H200 datasheet)");
    achieved("b200", 1745.0, "NVIDIA B200 SXM 1745.0 TFLOPS (77.6% of 2250) at 1792x16128x3072, torch 2.7.1+cu128", 0,
             "");
    achieved("mi300x", 668.4, "AMD MI300X 668.4 TFLOPS (51.4% of 1300) at 10240x15360x8192, torch 2.5.1+rocm6.3, "
             "PYTORCH_TUNABLEOP_ENABLED=1", 0, "");
    // NCCL's achieved bus bandwidth within a node, where a benchmark is cited.
    for (MachineProfile& p : m) {
      if (p.name() == "a100") {
        p.hw.bw_intra_GBps = 200;
        p.sources["bw_intra_GBps"] =
            "github.com/NVIDIA/nccl-tests issue 149: all_reduce_perf on 8 x A100-SXM4-80GB over NVLink/NVSwitch, busbw "
            "about 200 GB/s up to 1 GB (NCCL 2.18); issue 178 reports 208 GB/s";
        p.hw.bw_inter_GBps = 24;
        p.sources["bw_inter_GBps"] =
            "github.com/NVIDIA/nccl issue 812 (quoted in issue 1576), NCCL maintainer: 'On an Nvidia DGX-A100 system "
            "we have 8x200Gbit/s IB cards and we measure 192GB/s AllReduce BusBW': 24 GB/s per 200 Gb/s NIC (line "
            "rate 25)";
      } else if (p.name() == "h100" || p.name() == "h200") {
        p.hw.bw_intra_GBps = 370;
        p.sources["bw_intra_GBps"] =
            "github.com/NVIDIA/nccl-tests issue 212, NCCL maintainer's answer: NVLink4's 450 GB/s line rate less "
            "~20% protocol overhead, an effective 370 GB/s busBw (ring; NVLink SHARP all-reduce reaches ~480 GB/s "
            "busBw on 8 GPUs, not modelled)";
      }
      // Memory-bound kernels at the achieved fraction of HBM bandwidth, where
      // a measurement is cited; the others keep the datasheet's.
      if (p.name() == "a100") {
        p.hw.mem_bw_GBps = 1800;
        p.sources["mem_bw_GBps"] =
            "forums.developer.nvidia.com/t/trouble-to-reach-peak-bandwidth-of-a100/339083: a read kernel on A100 80GB "
            "SXM at 1.80 TB/s, Nsight Compute '88% of peak' (2.04 TB/s datasheet); the thread cites a GTC talk whose "
            "best kernel reached about 90%";
      } else if (p.name() == "h100") {
        p.hw.mem_bw_GBps = 2800;
        p.sources["mem_bw_GBps"] =
            "mikamirai.com/blog/gpu-memory-bandwidth (Nsight Compute on H100 SXM5): coalesced loads at 2.8 TB/s, 84% "
            "of the 3.35 TB/s datasheet figure";
      }
      // The memory-bound kernels by kind (Hardware::norm_mem_bw_GBps ...),
      // where a kernel-level benchmark on the device is cited: the bytes the
      // planner counts for the kernel (model_cost.h) over its measured median
      // time, so the rate times the planner's bytes gives the measured time.
      constexpr const char* kLiger =
          "linkedin/Liger-Kernel benchmark/data/all_benchmark_data.csv @ 2120862ba532c9449e72d603ba6324310ae756e7 "
          "(triton.testing.do_bench median, y_value_50): ";
      if (p.name() == "a100") {
        // The norms as one kernel each way (kernels = fused: llm-foundry MPT's
        // torch LayerNorm; eager-fused-norm: torchtitan's Triton RMSNorm, for
        // which this figure stands in): torch.nn.LayerNorm forward + backward,
        // 6 elements per norm element (layer_norm_traffic_bytes: forward 2,
        // backward 4) x 4 B x 4096 x 16384 = 1.611 GB in 1.6213 ms. The a100-2022
        // profile (Megatron-LM's runs, apex's FusedLayerNorm) takes apex's figure.
        p.hw.norm_mem_bw_GBps = 993;
        p.sources["norm_mem_bw_GBps"] =
            std::string(kLiger) +
            "layer_norm, huggingface (torch.nn.LayerNorm, fp32), full (forward + backward), M 4096 x N 16384, "
            "NVIDIA A100-SXM4-80GB, 2024-09-03, liger 0.2.1: 1.6213 ms; at the planner's 6 elements per norm element "
            "(forward 2, backward 4) 1.611 GB / 1.6213 ms = 993 GB/s (49% of 2,039). For kernels = fused (torch's "
            "LayerNorm, as llm-foundry's MPT runs it; the benchmark's fp32 against the runs' bf16) and, standing in, "
            "for kernels = eager-fused-norm (torchtitan's Triton fused_rmsnorm, norms.py at 1ea476e: one kernel "
            "forward, one backward with per-SM partial weight gradients). Not taken for it: Liger's own Triton "
            "RMSNorm (same design, another kernel), rms_norm, liger, full, M 2048 x H 32768, bf16, 1.2316 ms = "
            "654 GB/s at the planner's 12 bytes per element, whose smaller H rows (0.286-0.294 ms from H 1024 to "
            "8192) do not scale with the bytes";
        // torchtitan's RMSNorm as eager ops (kernels = eager; torchtitan/models/norms.py: x.float(), pow(2),
        // mean, * rsqrt, type_as(x), * weight): the planner's 36 bytes per element forward at 2-byte
        // activations ((e + 4) + 8 + 4 + 8 + (4 + e) + 2e), backward twice that, 108 B x 2048 x 32768 =
        // 7.248 GB in 6.9104 ms.
        p.hw.eager_norm_mem_bw_GBps = 1049;
        p.sources["eager_norm_mem_bw_GBps"] =
            std::string(kLiger) +
            "rms_norm, huggingface (benchmark_rms_norm.py's LlamaRMSNorm as eager ops: hidden_states.to(float32), "
            ".pow(2).mean(-1, keepdim=True), * torch.rsqrt(variance + eps), self.weight * hidden_states.to(bf16)), "
            "full (forward + backward), M 2048 x H 32768, bf16 input, NVIDIA A100-SXM4-80GB, 2024-09-03, liger "
            "0.2.1: 6.9104 ms (the forward and backward rows sum to 6.9338); at the planner's eager count, 36 bytes "
            "per element forward and 72 backward (llama_layer_eager_norm_traffic_bytes), 7.248 GB / 6.9104 ms = "
            "1,049 GB/s (51% of 2,039). Dtypes: the benchmark's weight is fp32 (the module is not cast), so its "
            "last multiply writes fp32 (38 bytes forward, not 36) and the backward runs on fp32 gradients (dy "
            "bf16, cast up by autograd): it moves more than the planner counts, and the rate is a floor. "
            "torchtitan's weight is bf16 (FSDP2's MixedPrecisionPolicy param_dtype), its output bf16, as the "
            "planner counts";
        // torch.softmax, fp32, 4096 x 2048, reads and writes each score once (as scores_softmax_traffic_bytes
        // counts the forward); the backward taken at the forward's rate.
        p.hw.softmax_mem_bw_GBps = 1249;
        p.sources["softmax_mem_bw_GBps"] =
            "triton-lang.org/main/getting-started/tutorials/02-fused-softmax.html (triton-lang/triton gh-pages @ "
            "001d977d8a92cc9d15563693d0740e77374bac84; docs built on 'runs-on: [a100-runner-set]', "
            ".github/workflows/documentation.yml @ 2635acd27fc05050ecc6fc1d221469bde34478a9), 'softmax-performance' "
            "row '14 2048.0 1273.707256 1248.643158': torch.softmax over "
            "4096 x 2048 fp32 at 1,249 GB/s (2 x numel x 4 bytes per call; 61% of 2,039). torch's softmax forward, "
            "not Megatron's fused scaled masked softmax (no benchmark found); the backward at the forward's rate";
        // torch.nn.CrossEntropyLoss over fp32 logits, forward and backward: log_softmax 8 B, nll_loss's gradient
        // 4, log_softmax's backward 12 per logit (head_eager_traffic_bytes' fp32 part) x 16384 x 131072 =
        // 51.54 GB in 60.4383 ms.
        p.hw.loss_mem_bw_GBps = 853;
        p.sources["loss_mem_bw_GBps"] =
            std::string(kLiger) +
            "cross_entropy, huggingface (torch.nn.CrossEntropyLoss, fp32 logits 16384 x 131072), full (forward + "
            "backward), NVIDIA A100-SXM4-80GB, 2024-09-03, liger 0.2.1: 60.4383 ms; at the planner's 24 bytes per "
            "logit (log_softmax 8, nll_loss's gradient 4, log_softmax's backward 12) 51.54 GB / 60.4383 ms = 853 "
            "GB/s (42% of 2,039); flash-attn's xentropy kernel (not benchmarked) and the casts taken at this rate";
        // torch's x + y, fp32, 134M elements, 3 x numel x 4 bytes.
        p.hw.elementwise_mem_bw_GBps = 1684;
        p.sources["elementwise_mem_bw_GBps"] =
            "triton-lang.org/main/getting-started/tutorials/01-vector-add.html (triton-lang/triton gh-pages @ "
            "001d977d8a92cc9d15563693d0740e77374bac84; docs built on the a100-runner-set, as for softmax), "
            "'vector-add-performance' row '15 134217728.0 1685.813499 1684.008546': torch's x + y over 134M fp32 "
            "elements at 1,684 GB/s (3 x numel x 4 bytes; 83% of 2,039; above an A100 40GB's 1,555, so the 80GB "
            "part); Megatron's fused bias-GeLU and bias-dropout-add, dropout, the casts, "
            "copies and Megatron's loss chain taken at this eager add's rate";
      } else if (p.name() == "h100") {
        // torch.nn.CrossEntropyLoss over fp32 logits on an H100 NVL (3,938 GB/s datasheet): 24 B per logit (as
        // for the A100) x 16384 x 131072 = 51.54 GB in 32.5475 ms = 1,584 GB/s, 40.2% of its datasheet figure;
        // at that fraction of the SXM5's 3,350.
        p.hw.loss_mem_bw_GBps = 1347;
        p.sources["loss_mem_bw_GBps"] =
            "linkedin/Liger-Kernel benchmark/data/h100_all_benchmark_data.csv @ "
            "3534d4461ca89319e29c890c1a4c20cb2a615d5f (2025-01-25, liger 0.5.2, 'NVIDIA H100 NVL'): cross_entropy, "
            "huggingface (torch.nn.CrossEntropyLoss, fp32 "
            "logits 16384 x 131072), full: 32.5475 ms; at the planner's 24 bytes per logit 51.54 GB / 32.5475 ms = "
            "1,584 GB/s, 40.2% of the H100 NVL's 3,938 GB/s datasheet figure, at that fraction of the H100 SXM5's "
            "3,350: 1,347 GB/s (no SXM5 row); flash-attn's xentropy kernel and the casts taken at this rate";
        p.hw.norm_mem_bw_GBps = 1694;
        p.sources["norm_mem_bw_GBps"] =
            std::string(kLiger) +
            "layer_norm, huggingface (torch.nn.LayerNorm, fp32), full (forward + backward), M 4096 x N 16384, "
            "NVIDIA H100 80GB HBM3, 2025-07-17, liger 0.6.0: 0.9506 ms; at the planner's 6 elements per norm "
            "element (forward 2, backward 4) 1.611 GB / 0.9506 ms = 1,694 GB/s (51% of 3,350); for kernels = fused "
            "and, standing in for torchtitan's Triton fused_rmsnorm, eager-fused-norm";
        // torchtitan's RMSNorm as eager ops on an H100 NVL (3,938 GB/s datasheet), counted as on the a100
        // (108 B x 2048 x 32768 = 7.248 GB) in 4.2541 ms = 1,704 GB/s, 43.3% of its datasheet figure; at that
        // fraction of the SXM5's 3,350 (no SXM5 row of the eager chain).
        p.hw.eager_norm_mem_bw_GBps = 1449;
        p.sources["eager_norm_mem_bw_GBps"] =
            "linkedin/Liger-Kernel benchmark/data/h100_all_benchmark_data.csv @ "
            "3534d4461ca89319e29c890c1a4c20cb2a615d5f (2025-01-25, liger 0.5.2, 'NVIDIA H100 NVL'): rms_norm, "
            "huggingface (LlamaRMSNorm as eager ops, fp32 weight, bf16 input, as on the a100 profile), full "
            "(forward + backward), M 2048 x H 32768: 4.2541 ms; at the planner's 108 bytes per element (36 forward, "
            "72 backward) 7.248 GB / 4.2541 ms = 1,704 GB/s, 43.3% of the H100 NVL's 3,938 GB/s datasheet figure, "
            "at that fraction of the H100 SXM5's 3,350: 1,449 GB/s (all_benchmark_data.csv @ "
            "2120862ba532c9449e72d603ba6324310ae756e7 has no H100 SXM5 row of it). The benchmark's fp32 weight moves "
            "more than the planner counts for torchtitan's bf16 one (see the a100 profile): the rate is a floor";
        // SwiGLU as eager ops, forward and backward: 5 bf16 elements per output element forward
        // (llama_layer_eager_traffic_bytes' 5e F/t), backward twice that: 30 B x 2048 x 4 x 32768 = 8.053 GB in
        // 4.5732 ms.
        p.hw.elementwise_mem_bw_GBps = 1761;
        p.sources["elementwise_mem_bw_GBps"] =
            std::string(kLiger) +
            "megatron_swiglu, torch (F.silu(y_1) * y_2, eager), full (forward + backward), bf16 [2048, 4, 2 x "
            "32768], NVIDIA H100 80GB HBM3, 2026-07-26, liger 0.8.1: 4.5732 ms; at the planner's 5 elements per "
            "output forward (silu reads and writes, the product reads two and writes), backward twice that, "
            "8.053 GB / 4.5732 ms = 1,761 GB/s (53% of 3,350); the residual adds, RoPE, casts and copies taken at "
            "this eager kernel's rate";
      }
      // FlashAttention's rate where its papers give one (one figure for the
      // forward and backward: the sources give no split).
      if (p.name() == "a100") {
        p.flash_attention_tflops_bf16 = 192;
        p.sources["flash_attention_tflops_bf16"] =
            "Dao 2023, FlashAttention-2 (arXiv:2307.08691), abstract: 'reaching 50-73% of the theoretical maximum "
            "FLOPs/s on A100'; the planner takes the range's midpoint, 61.5% of 312 = 192 TFLOP/s, forward and "
            "backward alike";
      } else if (p.name() == "h100" || p.name() == "h200") {
        p.flash_attention_tflops_bf16 = 346;
        p.sources["flash_attention_tflops_bf16"] =
            "Shah et al. 2024, FlashAttention-3 (arXiv:2407.08608), abstract: 'FlashAttention-2 achieving only 35% "
            "utilization on the H100 GPU': 35% of 989 = 346 TFLOP/s (FlashAttention-2, which the published H100 "
            "runs used; FlashAttention-3's BF16 740 TFLOP/s is not the shipped figure)";
      }
      if (p.name() == "h100" || p.name() == "h200" || p.name() == "b200") {
        p.hw.bw_inter_GBps = 47;
        p.sources["bw_inter_GBps"] =
            "github.com/NVIDIA/nccl-tests issue 290, NCCL maintainer: 'For NDR @ 400Gbps you should see 46-48GB/s "
            "per NIC' (issue 267: 'CX-7 NICs at NDR rate (400Gbps) should achieve up to 48-49GB/s per NIC'); the "
            "planner takes 47 GB/s per ConnectX-7 NIC (line rate 50)";
      }
    }
    // FlashAttention's published forward + backward rates, causal, by head
    // dimension and sequence length (the FlashAttention-2 release's benchmark
    // figures; batch 16k / seqlen, hidden 2048; the FLOPs counted as the
    // planner counts them: the causal half, backward 2.5 forwards).
    {
      constexpr const char* kFa2Bench =
          "Dao-AILab/flash-attention README.md at 4f285b35 (FlashAttention-2 release, 2023-07-17), 'Performance': "
          "assets/flash2_a100_fwd_bwd_benchmark.png and flash2_h100_fwd_bwd_benchmark.png, panels (c) and (d), "
          "'Attention forward + backward speed', with causal mask, head dimension 64 and 128, TFLOP/s at sequence "
          "512, 1k, 2k, 4k, 8k, 16k";
      const int64_t seqs[6] = {512, 1024, 2048, 4096, 8192, 16384};
      auto table = [&](bool triton, int d, std::initializer_list<double> tf, double scale = 1) {
        std::vector<Hardware::AttentionRate> t;
        size_t i = 0;
        for (double v : tf) t.push_back({triton, d, seqs[i++], v * scale});
        return t;
      };
      for (MachineProfile& p : m) {
        auto add = [&](std::vector<Hardware::AttentionRate> t) {
          p.flash_rates_bf16.insert(p.flash_rates_bf16.end(), t.begin(), t.end());
        };
        if (p.name() == "a100") {
          add(table(false, 64, {88, 119, 140, 156, 165, 171}));  // FlashAttention-2
          add(table(false, 128, {99, 133, 155, 173, 182, 189}));
          add(table(true, 64, {59, 75, 79, 76, 79, 80}));  // FlashAttention Triton
          add(table(true, 128, {50, 61, 68, 74, 78, 80}));
          p.sources["flash_attention_rates"] =
              std::string(kFa2Bench) + " (A100 80GB SXM4: FlashAttention-2 and 'FlashAttention Triton')";
        } else if (p.name() == "h100" || p.name() == "h200") {
          add(table(false, 64, {141, 192, 232, 257, 273, 284}));
          add(table(false, 128, {163, 221, 265, 294, 308, 328}));
          // No Triton kernel on the H100 figure: FlashAttention (1)'s bars,
          // which on the A100 figure are Triton's within 2-18%.
          add(table(true, 64, {104, 123, 136, 138, 149, 156}));
          add(table(true, 128, {98, 109, 108, 126, 135, 137}));
          p.sources["flash_attention_rates"] =
              std::string(kFa2Bench) +
              " (H100 80GB SXM5: FlashAttention-2; the Triton kernel, not on the H100 figure, at FlashAttention "
              "(1)'s bars, which the A100 figure puts within 2-18% of Triton's" +
              (p.name() == "h200" ? "; H200 is the H100 die: its rates)" : ")");
        }
      }
    }
    // B200 and H200 measured figures: the SM count, the achieved HBM rate,
    // NCCL's ring bus bandwidth within the node and the attention kernel's
    // rate, each from a device query or microbenchmark on that part (not a
    // training throughput, not a ratio of datasheets). What was searched for
    // and not found keeps its field and says so.
    for (MachineProfile& p : m) {
      if (p.name() == "b200") {
        p.hw.gemm_units = 148;
        p.sources["gemm_units"] =
            "device queries on a B200: ProjectPhysX/OpenCL-Benchmark README.md at "
            "4694a5b9cf1b39faf541c922fcb76518a7b72ca0, 'NVIDIA B200': 'Compute Units 148 at 1965 MHz'; "
            "pytorch/ao pull request 4002 (2026-03-05), cudaDeviceProp of an 'NVIDIA B200': 'Number of SMs: 148'; "
            "chipsandcheese.com/p/nvidias-b200-keeping-the-cuda-juggernaut: 'B200 enables 74 SMs per die, giving "
            "148 SMs across the GPU'";
        p.hw.gemm_tile_m = 256;
        p.hw.gemm_tile_n = 128;
        p.sources["gemm_tile_m"] = p.sources["gemm_tile_n"] =
            std::string(kTiles) +
            "the guide's tiles and measurements are cuBLAS on pre-Blackwell GPUs (its wave example is A100's 108 "
            "SMs); no source found gives the tile cuBLAS picks on Blackwell, so the planner applies the same "
            "256x128 over B200's 148 SMs as over H100's 132";
        p.hw.mem_bw_GBps = 6669;
        p.sources["mem_bw_GBps"] =
            "ProjectPhysX/OpenCL-Benchmark README.md at 4694a5b9cf1b39faf541c922fcb76518a7b72ca0 (example added in "
            "c551207f, 2025-12-28), 'NVIDIA B200', driver 570.133.20: 'Memory Bandwidth ( coalesced read ) 6668.71 "
            "GB/s' (coalesced write 6502.72), 83% of the 8 TB/s datasheet figure (pytorch/ao pull request 4002: the "
            "driver's corrected 7680-bit bus gives 7.67 TB/s, of which 87%); a memory-bound kernel agrees: "
            "ProjectPhysX/FluidX3D README.md at 8986874e626e0aebd317ab16c420b39e30dfa273, 'B200 SXM6 180GB' "
            "FP32/FP32 42152 MLUPs/s at 153 bytes per cell, 6.45 TB/s ('81%')";
        p.hw.bw_intra_GBps = 682;
        p.sources["bw_intra_GBps"] =
            "stas00/ml-engineering network/README.md at 744d01e18b79512572f64a6bbd8b5f4a725203a7 (table added in "
            "32458c33), 'SHARP': nccl-tests all_reduce on an 8 x B200 p6-b200.48xlarge node over NVLink5, NCCL "
            "2.27.7, 8 GiB, measured 2026-08-09: 8 GPUs 'busbw, NVLS off' 682.2 GB/s (ring; 76% of the 900 GB/s "
            "line rate); NVLink SHARP all-reduce reaches 838.0 GB/s busBw on 8 GPUs, not modelled (as for H100)";
        p.flash_attention_tflops_bf16 = 1613;
        p.sources["flash_attention_tflops_bf16"] =
            "'FlashAttention-4: Algorithm and Kernel Pipelining Co-Design for Asymmetric Hardware Scaling' (2026, "
            "arXiv:2603.05451), abstract: "
            "'on B200 GPUs with BF16, reaching up to 1613 TFLOPs/s (71% utilization)' (FlashAttention-4, the CuTe-DSL "
            "kernel; also 'up to 1.3x speedup over cuDNN 9.13'). A peak, not split into forward and backward; it "
            "is a forward-pass rate (FlashAttention-4's own causal head-dimension-128 forward on B200, "
            "Dao-AILab/flash-attention commit cbbab839: 1604.1 TFLOP/s at 8k, 1683.7 at 16k), and the only B200 "
            "backward rates found name head dimension 64 (commit 9848f9a0: 835-849 TF/s non-causal at 16k-32k), "
            "so the backward is timed optimistically";
        p.sources["flash_attention_rates"] =
            "not given: searched (2026-11-27) for B200 forward + backward rates by head dimension and sequence; "
            "found forward only (Dao-AILab/flash-attention commit cbbab839, FlashAttention-4 causal head dimension "
            "128 on B200, 16-bit: 500.6, 796.5, 1124.6, 1407.9, 1604.1, 1683.7 TFLOP/s at 512 to 16k) and "
            "head-dimension-64 backward (commit 9848f9a0); the FlashAttention-4 paper's per-sequence plots are "
            "figures, not numbers; a B200 row of forward + backward by sequence was not found";
      } else if (p.name() == "h200") {
        p.hw.mem_bw_GBps = 4010;
        p.sources["mem_bw_GBps"] =
            "Azure/AI-benchmarking-guide Azure_Results/ND_H200_v5_results.md at "
            "7f20e5fa3b2f9a46d8404af1f6fb14b049d6d5cc, 'HBM Bandwidth' (BabelStream, CUDA; "
            "Benchmarks/HBMBandwidth.py) on an NVIDIA H200 141GB, CUDA 12.6: Copy 4.01 TB/s, 84% of the 4.8 TB/s "
            "datasheet figure (Mul 4.00, Add 4.15, Triad 4.15, Dot 4.48); the profile takes Copy, one read and "
            "one write per element as in an elementwise kernel";
        p.hw.bw_intra_GBps = 367;
        p.sources["bw_intra_GBps"] =
            "stas00/ml-engineering network/README.md at 744d01e18b79512572f64a6bbd8b5f4a725203a7 (table added in "
            "4b9b24f2), 'SHARP': nccl-tests on an 8 x H200 node over NVLink4, NCCL 2.27.7, 16 GiB: 'all-reduce, "
            "NCCL_NVLS_ENABLE=0 | Ring | 367.2GBps' (all-gather 361.4, reduce-scatter 362.9), 82% of the 450 GB/s "
            "line rate; the H100 figure (nccl-tests issue 212: ~370 GB/s effective) holds on the same NVLink4; "
            "NVLink SHARP all-reduce (480.0 GB/s busBw) not modelled";
        p.sources["flash_attention_rates"] +=
            "; on an H200, Azure/AI-benchmarking-guide Azure_Results/ND_H200_v5_results.md at 7f20e5fa: "
            "FlashAttention-2 329.3 TFLOP/s at head dimension 128, batch 2, sequence 8192 (fwd + bwd), against "
            "the H100 figure's 308 at d 128, 8k: the H100 rates are kept";
      }
    }
    // The H100 torchtitan's published Llama 3 runs used (Meta's Grand Teton):
    // the H100 SXM5 die with 96 GB of HBM2e at 2.4 TB/s, a 500 W power limit.
    // Its peak is not published: torchtitan's own footnote puts it between
    // the SXM5's and the NVL's datasheet figures, and the profile takes the
    // midpoint (as the a100 profile takes FlashAttention-2's range's). The
    // achieved fractions of the SXM5 (mamf-finder's GEMM rate over its peak,
    // the HBM rate over its datasheet's, FlashAttention-2's 35%) carry over.
    {
      MachineProfile p = *std::find_if(m.begin(), m.end(), [](const MachineProfile& x) { return x.name() == "h100"; });
      constexpr const char* kGt =
          "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, 'Hardware': Grand Teton hosts of 8 H100 "
          "fully connected with NVLink, 'Each H100 GPU is equipped with 96GB HBM2e with 2.4 TB/sec peak memory "
          "bandwidth', 400 Gb/s RDMA per GPU, 'the default 500W power limit'; footnote 2: 'HBM2e-based SXM H100 "
          "with lower TDP, the actual peak TFLOPs number is between SXM and NVL, and we don't know its exact value'";
      p.hw.machine = "h100-96gb-500w";
      p.source = std::string(kGt) +
                 "; peaks: the midpoint of NVIDIA's H100 SXM5 datasheet (BF16 989.4 dense, FP32 66.9, FP64 Tensor "
                 "Core 66.9) and H100 NVL datasheet (BF16 1,671 TFLOPS with sparsity: 835.5 dense, FP32 60, FP64 "
                 "Tensor Core 60)";
      const double bf16 = (989.4 + 835.5) / 2, fp32 = (66.9 + 60) / 2;
      p.peak_tflops_bf16 = bf16;
      p.peak_tflops_fp32 = p.peak_tflops_fp64 = fp32;
      for (const char* k : {"peak_tflops_bf16", "peak_tflops_fp32", "peak_tflops_fp64"})
        p.sources[k] = std::string(kGt) +
                       ": the midpoint of the H100 SXM5 and H100 NVL datasheets' dense figures (the profile's "
                       "source lists both)";
      p.hw.memory_GB = 96;
      p.sources["memory_GB"] = std::string(kGt) + " (96 GB)";
      p.hw.mem_bw_GBps = 2400 * 2800.0 / 3350;
      p.sources["mem_bw_GBps"] =
          std::string(kGt) + " (2.4 TB/s peak) at the fraction of the datasheet figure an H100 SXM5 achieves "
                             "(mikamirai.com/blog/gpu-memory-bandwidth, Nsight Compute: 2.8 of 3.35 TB/s, 84%)";
      // The kinds' measured rates at the same fraction of the HBM rate.
      for (const KindRate& k : kKindRates)
        if (p.hw.*k.rate > 0) {
          p.hw.*k.rate *= 2400 / 3350.0;
          p.sources[k.key] = std::string(kGt) + " (2.4 TB/s peak) at the fraction of the datasheet figure an H100 "
                                                "SXM5 reaches in this kind's benchmark: " + p.sources[k.key];
        }
      p.gemm_achievable_tflops_bf16 = bf16 * 794.5 / 989.4;
      p.sources["gemm_achievable_tflops_bf16"] =
          std::string(kMamf) + "NVIDIA H100 SXM 794.5 TFLOPS, 80.3% of 989: the same fraction of this part's peak";
      p.flash_attention_tflops_bf16 = 0.35 * bf16;
      for (Hardware::AttentionRate& a : p.flash_rates_bf16) a.tflops *= bf16 / 989.4;
      p.sources["flash_attention_rates"] += "; scaled by this part's peak over the SXM5's";
      p.sources["flash_attention_tflops_bf16"] =
          "Shah et al. 2024, FlashAttention-3 (arXiv:2407.08608), abstract: 'FlashAttention-2 achieving only 35% "
          "utilization on the H100 GPU': 35% of this part's peak";
      p.sources["bw_intra_GBps"] = std::string(kGt) + " (NVLink among 8 H100); " + p.sources["bw_intra_GBps"];
      p.sources["bw_inter_GBps"] = std::string(kGt) + " (400 Gb/s per GPU); " + p.sources["bw_inter_GBps"];
      p.sources["ranks_per_node"] = p.sources["rails"] = std::string(kGt) + " (8 H100 per host, one NIC each)";
      p.sources["gemm_units"] =
          "NVIDIA H100 Tensor Core GPU Architecture whitepaper: H100 SXM5 has 132 SMs (the part is the SXM die)";
      m.push_back(p);
    }
    // The A100 with the cuBLAS of 2021-2022 (Megatron-LM's PTD-P and
    // Korthikanti et al. runs): mamf-finder's 271.2 TFLOP/s is torch 2.6 +
    // CUDA 12.6 (2025; the table's CUDA 12.1 row gives 267.9), and a 2022
    // measurement of cuBLAS through PyTorch gives less. Everything else is
    // the a100 profile's.
    {
      MachineProfile p = *std::find_if(m.begin(), m.end(), [](const MachineProfile& x) { return x.name() == "a100"; });
      p.hw.machine = "a100-2022";
      p.source += "; GEMMs at the cuBLAS of 2022 (thonking.ai, below)";
      p.gemm_achievable_tflops_bf16 = 258;
      p.sources["gemm_achievable_tflops_bf16"] =
          "Horace He, 'Strangely, Matrix Multiplications on GPUs Run Faster When Given \"Predictable\" Data!' "
          "(thonking.ai/p/strangely-matrix-multiplications): 'It's 2022 ... a large matmul, 8192 x 8192 x 8192, "
          "... in PyTorch, which calls CuBLAS: 258 Teraflops' on an A100 (400 W) with torch.randn inputs (one "
          "shape, whose 256x128 tiles fill 18.96 of 19 waves on 108 SMs, not a search: part of the gap to "
          "mamf-finder's 271.2 may be the shape)";
      // The norms the Megatron-LM runs of 2021-2022 ran: apex's FusedLayerNorm
      // (kernels = fused), forward 2 elements, backward 4 (layer_norm_traffic_bytes)
      // x 16384 x 1024 x 2 B = 201.3 MB in 0.0751 + 0.1762 ms.
      p.hw.norm_mem_bw_GBps = 801;
      p.sources["norm_mem_bw_GBps"] =
          "github.com/NVIDIA/apex/pull/1037 ('fast layer norm', 2021-01-27): 'Performance for B=32, S=512 on GA100 "
          "- current APEX affine LN kernels ... [APEX FWD] Time: 0.0751ms Throughput: 895.7822 GB/sec / [APEX BWD] "
          "Time: 0.1762ms Throughput: 572.1678 GB/sec' (fp16; the GB/s imply hidden 1024); at the planner's 6 "
          "elements per norm element (forward 2, backward 4) 201.3 MB / 0.2513 ms = 801 GB/s (39% of 2,039; the "
          "PR does not say which A100): the apex FusedLayerNorm of Megatron-LM's PTD-P and Korthikanti runs";
      m.push_back(p);
    }
    // Per-step collective latency (Hardware::latency_us, latency_inter_us):
    // NCCL's own alpha-beta cost model, the per-step hardware latency of a
    // ring with the Simple protocol (the one NCCL picks for the megabyte
    // messages of training), over NVLink and over the network. A software
    // figure, the same for every NVIDIA GPU; mi300x takes RCCL's (below).
    // And its base latency per call (Hardware::latency_call_us), Ring /
    // Simple's. Not modelled: its LL protocols for small messages.
    for (MachineProfile& p : m) {
      if (p.name() == "mi300x") continue;
      constexpr const char* kNcclModel =
          "NCCL's cost model, github.com/NVIDIA/nccl at 5067397c2676d5aed50042fc39e5c8ee96eb0027, "
          "src/graph/tuning.cc, ncclTunerConstantsDefaults.";
      const std::string hw_latencies = std::string(kNcclModel) + "hwLatencies, Ring / Simple: ";
      p.hw.latency_us = 3.4;
      p.sources["latency_us"] =
          hw_latencies +
          "NVLINK 3.4 us per ring step (ncclTopoTuneModel adds nsteps x this to a ring's latency; nsteps = "
          "2 (n - 1) for all-reduce, n - 1 for all-gather and reduce-scatter); NCCL's model, not a measurement; "
          "its base per call is latency_call_us; p2p is charged one step (nccl-tests issue 331: sendrecv_perf on 2 "
          "A100s, 9.85 us at 8 B, the base included)";
      p.hw.latency_inter_us = 14.0;
      p.sources["latency_inter_us"] =
          hw_latencies +
          "NET 14.0 us per ring step across nodes (also Tree / Simple's NET figure, which NCCL uses for one rank "
          "per node); NCCL's model, not a measurement; as NCCL, the planner charges 2 (nodes - 1) of an "
          "all-reduce ring's steps at it (nodes - 1 for the others), the rest at latency_us";
      p.hw.latency_call_us = 8.4;
      p.sources["latency_call_us"] =
          std::string(kNcclModel) + "baseLatencies, Ring / Simple: " +
          "8.4 us per call (ncclTopoTuneModel sets a collective's latency to it before adding the steps', and "
          "ncclTopoGetAlgoTime charges that latency once per call, lat x numPipeOps); NCCL's model, not a "
          "measurement; the planner adds it to each call of an all-reduce, all-gather or reduce-scatter, not to "
          "p2p (send_recv, all_to_all): NCCL's model times the five collectives only (src/include/nccl_common.h, "
          "NCCL_NUM_FUNCTIONS 5, 'Send/Recv not included for now'); an inter-node all-reduce's whole latency "
          "(this base and its steps') is then multiplied by ring_plateau";
      // Every NVIDIA profile's part is compute capability 8.0 or later (A100
      // 8.0, H100 and H200 9.0, B200 10.0): NCCL's 1.4.
      p.hw.ring_plateau = 1.4;
      p.sources["ring_plateau"] =
          "NCCL's cost model, github.com/NVIDIA/nccl at 5067397c2676d5aed50042fc39e5c8ee96eb0027, "
          "src/graph/tuning.cc, ncclTopoGetAlgoTime: 'if (algorithm == NCCL_ALGO_RING && protocol == "
          "NCCL_PROTO_SIMPLE && comm->nNodes > 1 && coll == ncclFuncAllReduce && nBytes / (comm->nChannels * "
          "comm->nRanks) >= 64) lat *= comm->minCompCap < 80 ? 1.9 : 1.4; // Plateau effect of ring' (this part's "
          "compute capability is 8.0 or later); NCCL's model, not a measurement. The channel count is NCCL's "
          "choice (at most MAXCHANNELS, 64: src/include/device.h), so the planner applies it where the bytes "
          "per rank and channel are 64 or more at 64 channels: a lower bound on where NCCL does";
    }
    // Framework per-op host overhead (Hardware::host_op_us): what PyTorch's
    // host spends issuing one op's kernel to a GPU. A host (CPU) figure, the
    // same for every device here; measured on an A100 with PyTorch 1.12.
    for (MachineProfile& p : m) {
      p.hw.host_op_us = 4;
      p.sources["host_op_us"] =
          "pytorch/pytorch issue 82793 (2022-08-04, PyTorch 1.12, A100): 'the exact overhead number ... 4 us per op "
          "on CUDA', an EfficientNet-B5 at batch 1 that the maintainer (robieta) calls 'completely dispatch bound'; "
          "pytorch/pytorch issue 41383 (ngimel): about 2 us per op without autograd, half of it Python's, and "
          "recording autograd adds about 2 us (6.8 against 5 us per op, a CPU tensor). The CUDA launch itself is "
          "within it. Not measured: FSDP's per-unit hooks (no per-unit figure is cited)";
    }
    // Identical GPUs are not equally fast (Hardware::gemm_spread). The one
    // fleet measurement of an A100's tensor-core GEMM found: Perlmutter's
    // A100s, each GPU's FP16 GEMM time over the best GPU's of its kind; the
    // 80 GB parts' range after outliers, read as the expected range of the
    // part's GPUs in the figure (normal: 2 x expected_max_normal(n) standard
    // deviations wide).
    for (MachineProfile& p : m) {
      const bool a100 = p.name() == "a100" || p.name() == "a100-2022";
      const int64_t fleet = 850;
      p.hw.gemm_spread = a100 ? 0.05 / (2 * expected_max_normal(fleet)) : 0.0;
      p.sources["gemm_spread"] =
          a100 ? "Wei, Pradeep and Bhatele, 'The Case of the Elusive Application Performance on Production GPU "
                 "Supercomputers' (IPDPS 2026; CunyangWei/cunyangwei.github.io @ f6a8f837c3 "
                 "files/2026-05-variability-ipdps.pdf), Sec. V.B and Fig. 4: cuBLAS FP16 GEMMs of 32768^3 on "
                 "Perlmutter's A100s, each GPU's time over the best of its kind: 'After removing outliers, the "
                 "system-wide variability is about 12% for A100 40GB and 5% for A100 80GB' (and each GPU 'within a "
                 "2.5% window' of its own best over runs: a GPU's speed is its own). Read as the expected range of "
                 "the 80 GB GPUs in Fig. 4 (about 850; the text gives no count) under a normal spread: 5% / (2 x "
                 "expected_max_normal(850) = 2 x 3.19) = 0.78% of the typical GPU's time. Perlmutter (HPE Cray EX, "
                 "four A100s of 40 or 80 GB per GPU node: the paper's Sec. III.A), not Selene or a DGX; the "
                 "profile's GEMM rate taken as a typical GPU's"
               : "not given: no fleet measurement of this device's GEMM time across identical GPUs is cited (0: "
                 "identical GPUs; Wei et al., IPDPS 2026, measured A100s and Frontier's MI250X, not this part)";
    }
    // MI300X measured figures (issue 48's deliverable 1 for the mi300x): each
    // from a published measurement or RCCL's own source, named in its source
    // text; what none gives keeps the datasheet's figure (or 0) and its source
    // says what was searched. docs/planner.md, "Machine profiles", lists them.
    for (MachineProfile& p : m) {
      if (p.name() != "mi300x") continue;
      const std::string azure =
          "Azure AI Benchmarking Guide, Azure_Results/ND_MI300X_v5_results.md at commit "
          "bf209abb91e80c93322db11abe633bbc646bcf1d (2025-03-27; stored in github.com/samuel-bohman/"
          "AI-benchmarking-guide, a fork of Azure/AI-benchmarking-guide): Azure ND MI300X v5, 8 AMD Instinct MI300X "
          "per VM, RCCL 2.22.3-develop, HIP 6.2.41134";
      // Memory-bound kernels at BabelStream's achieved HBM rate.
      p.hw.mem_bw_GBps = 4100;
      p.sources["mem_bw_GBps"] =
          azure + ", 'HBM Bandwidth' (BabelStream's hip-stream, Benchmarks/AMD/HBMBandwidth.py): Triad 4.10 TB/s "
                  "(Copy 4.15, Mul 4.28, Add 4.13, Dot 4.0), 77% of the 5.3 TB/s datasheet figure";
      // RCCL's achieved all-reduce bus bandwidth among the node's 8 GPUs.
      p.hw.bw_intra_GBps = 314;
      p.sources["bw_intra_GBps"] =
          azure + ", 'RCCL Bandwidth': rccl-tests all_reduce_perf -g 8 (Benchmarks/AMD/RCCLBandwidth.py), in-place "
                  "busbw 313.92 GB/s at 1 GB (302.80 at 268 MB, 316.82 at 8 GB; the page's column ran with "
                  "NCCL_ALGO=NVLS, an algorithm RCCL does not have); AMD's validation bar agrees: github.com/ROCm/cvs "
                  "at dbef78e175f893cb997ed000fd8856b4cb530198, cvs/input/config_file/rccl/"
                  "mi300x_rccl_single_node_config.json, 'AMD validation guide bar for MI300X: single-node 8-GPU "
                  "all_reduce bus BW >= 304 GB/s at 8 GiB' (a floor a healthy node passes); the xGMI line rate is "
                  "448 GB/s per direction";
      // Across nodes: what one 400 Gb/s NIC carries (the rail's rate).
      p.hw.bw_inter_GBps = 47;
      p.sources["bw_inter_GBps"] =
          "github.com/ROCm/cvs at 00fff43355d7cd844fb5ea477b8ec1a7855bba13, cvs/input/config_file/rccl/rccl_config.json "
          "('RCCL heatmap comparison between MI300s', 2 nodes of 8 GPUs, 8 Broadcom bnxt_re RDMA NICs per node, one "
          "per GPU), 'expected results ... for 2 node cluster': sendrecv_perf busbw 47.00 GB/s at 8 GiB (48.00 at "
          "16 GiB), a rate the sends that cross the nodes set (all_reduce_perf 330 GB/s busbw at 8 GiB); AMD's "
          "expected figures, not one run's output, on NICs the file does not rate; the datasheet's NIC is 400 Gb/s "
          "(line rate 50 GB/s)";
      // Per-step collective latency: RCCL's own cost model.
      constexpr const char* kRcclTuning =
          "RCCL's cost model, github.com/ROCm/rccl at 0cbce2a7571c907554199fad7e905f16ec0a565c (2024-10-24), "
          "src/graph/tuning.cc, tuning_model_5.hwLat (the table RCCL's src/graph/rome_models.cc selects, tuning=5, "
          "for 8 GPUs fully connected by 7 xGMI links: rome_model_79, 81, 84; added by commit b08124c8 'adding rccl "
          "tuning parameters for MI300X gfx942 with 8 GPUs single and multi-node'): ";
      p.hw.latency_us = 2.1;
      p.sources["latency_us"] =
          std::string(kRcclTuning) +
          "NVLINK row (RCCL loads xGMI links as NVLink, src/graph/xml.cc), Ring / Simple: 2.1 us per ring step "
          "(nsteps = 2 (n - 1) for all-reduce, n - 1 for all-gather and reduce-scatter, as NCCL's); RCCL's model, "
          "not a measurement; its base per call is latency_call_us";
      p.hw.latency_call_us = 17.0;
      p.sources["latency_call_us"] =
          "RCCL's cost model, github.com/ROCm/rccl at 0cbce2a7571c907554199fad7e905f16ec0a565c (2024-10-24), "
          "src/graph/tuning.cc, baseLat, Ring / Simple: 17.0 us per call (one table for every RCCL tuning model; "
          "ncclTopoTuneModel sets a collective's latency to it before adding the steps', ncclTopoGetAlgoTime "
          "charges that latency once per call, lat x numPipeOps); RCCL's model, not a measurement; the planner adds "
          "it to each call of an all-reduce, all-gather or reduce-scatter, not to p2p (send_recv, all_to_all), as "
          "NCCL's model (which times the five collectives only)";
      p.hw.latency_inter_us = 25.0;
      p.sources["latency_inter_us"] =
          std::string(kRcclTuning) +
          "NET row, Tree / Simple: 25.0 us per step across nodes. Its Ring / Simple NET figure, 320.0 us (commit "
          "a25ca9bb 'adding new tunning table for very large number of nodes'; 19.8 in b08124c8's first table), "
          "steers RCCL off rings across nodes rather than timing a link, and the planner times rings only, so it "
          "takes the tree's figure (as NCCL's ring and tree NET figures, 14.0, are one); RCCL's model, not a "
          "measurement; the planner charges 2 (nodes - 1) of an all-reduce ring's steps at it (RCCL's model counts "
          "2 nodes), nodes - 1 of the others'";
      p.hw.ring_plateau = 1;
      p.sources["ring_plateau"] =
          "RCCL's cost model, github.com/ROCm/rccl at 0cbce2a7571c907554199fad7e905f16ec0a565c, src/graph/tuning.cc, "
          "ncclTopoGetAlgoTime: NCCL's 'Plateau effect of ring' (lat *= 1.4 or 1.9) sits in the #else branch of "
          "'#if defined(__HIP_PLATFORM_AMD__)', so an AMD build applies none (1); it scales an inter-node ring's "
          "bandwidth by ringCorrectionFactor by size instead, which the planner does not model";
      // FlashAttention-2 forward + backward: one published MI300X point.
      p.flash_attention_tflops_bf16 = 223;
      p.sources["flash_attention_tflops_bf16"] =
          "github.com/ROCm/flash-attention issue 142 (2025-05-18, AMD Instinct MI300X, ROCm 6.3.2): the repository's "
          "benchmarks/benchmark_flash_attention.py, 'causal=False, headdim=128, batch_size=1, seqlen=16384 ... "
          "Flash2 fwd: 353.22 TFLOPs/s, bwd: 194.43 TFLOPs/s, fwd + bwd: 223.08 TFLOPs/s' (batch 2, 4, 8: 230.54, "
          "231.57, 228.36): ROCm's FlashAttention-2 port (the issue does not say which of its backends, Composable "
          "Kernel by default or Triton); not causal, one sequence length, forward and backward alike";
      p.sources["flash_attention_rates"] =
          "not given: no FlashAttention benchmark on MI300X by head dimension and sequence was found (searched ROCm "
          "blogs and docs, ROCm/flash-attention issues, pytorch/pytorch SDPA benchmarks on ROCm: Azure's guide gives "
          "one figure, 328.6 TFLOP/s at head dimension 64, batch 2, sequence 8192, without saying forward, backward "
          "or both, so it is not used); flash_attention_tflops_bf16 times every shape";
      // The tile and wave model: the CU count is published, hipBLASLt's
      // output tile is not, and the model takes both or neither.
      p.sources["gemm_units"] =
          "not set: MI300X has 304 CUs (ROCm docs, 'AMD GPU specifications' (reference/gpu-specs), MI300X row: "
          "'304 (38 per XCD)'), but the tile and wave model needs hipBLASLt's output macro-tile too, which no source "
          "found gives for large BF16 GEMMs on MI300X (searched ROCm blogs on GEMM tuning, hipBLASLt and "
          "rocm-libraries issues, ROCm docs; the tiles quoted were MI355X's or shape-specific; hipBLASLt's own "
          "gfx942 selection, e.g. ROCm/hipBLASLt at 4cd3c20980fce2ef8f980596235adc0cb3818461, library/src/"
          "amd_detail/rocblaslt/src/Tensile/Logic/asm_full/aquavanjaram/gfx942/GridBased/"
          "aquavanjaram_Cijk_Alik_Bljk_BBS_BH_Bias_HAS_SAV_UserArgs.yaml, lists solutions of several macro-tiles "
          "(its first, MT16x16x128 and MT16x16x256) and maps sizes to them in 18.8 MB that could not be read here "
          "whole), so GEMMs take the achievable rate at every shape";
      p.sources["gemm_tile_m"] = p.sources["gemm_tile_n"] =
          "not set: no source found gives hipBLASLt's output macro-tile for large BF16 GEMMs on MI300X (see "
          "gemm_units)";
    }
    return m;
  }();
  return machines;
}

// The profiles are the datasheets' SXM / OAM parts (B200: HGX). Other form
// factors of the same chip run at other clocks and power and have other
// datasheet peaks (H100 PCIe and NVL, H200 NVL), and GB200's Blackwell is
// rated above B200's: their names match no profile rather than the wrong one
// (A100 PCIe and SXM share their datasheet peaks, so both match a100).
const MachineProfile* machine_for_device(const std::string& device_name) {
  const std::string d = lower(device_name);
  static const std::vector<std::pair<std::string, std::vector<std::string>>> variants = {
      {"h100", {"pcie", "nvl"}}, {"h200", {"nvl"}}};
  for (const MachineProfile& m : builtin_machines()) {
    const std::string n = lower(m.name());
    bool named = false;
    for (size_t at = d.find(n); at != std::string::npos && !named; at = d.find(n, at + 1))
      named = at == 0 || !std::isalnum(static_cast<unsigned char>(d[at - 1]));  // "gb200" is not "b200"
    if (!named) continue;
    for (const auto& [chip, others] : variants)
      if (chip == n)
        for (const std::string& v : others)
          if (d.find(v) != std::string::npos) named = false;
    if (named) return &m;
  }
  return nullptr;
}

namespace {
// The numeric columns of [machine.shape], in ShapeFigures' order after the
// workload's name (the reader and machine_toml both).
const std::vector<std::string>& shape_columns() {
  static const std::vector<std::string> v = {"work", "mem_bw_GBps", "shared_mem_bw_GBps", "optimizer_mem_bw_GBps",
                                             "buffer_mem_bw_GBps", "compute_scale", "corun_scale"};
  return v;
}
}  // namespace

const std::vector<std::string>& profile_figures() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> f = {
        "peak_tflops_bf16", "peak_tflops_fp32", "peak_tflops_fp64", "mem_bw_GBps", "bw_intra_GBps", "bw_inter_GBps",
        "latency_us", "latency_inter_us", "latency_call_us", "gemm_efficiency", "memory_GB", "ranks_per_node",
        "wake_us", "gemm_achievable_tflops_bf16", "gemm_units", "gemm_tile_m", "gemm_tile_n", "rails",
        "oversubscription", "leaf_nodes", "flash_attention_tflops_bf16", "overlap_compute_slowdown", "host_op_us",
        "gemm_spread", "ring_plateau"};
    for (const KindRate& k : kKindRates) f.push_back(k.key);
    return f;
  }();
  return v;
}

MachineProfile load_machine(const std::string& what) {
  for (const auto& m : builtin_machines())
    if (m.name() == lower(what)) return m;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(what, ec)) {
    std::string names;
    for (const auto& m : builtin_machines()) names += (names.empty() ? "" : ", ") + m.name();
    throw InputError("--machine: '" + what + "' is neither a built-in machine (" + names +
                     ") nor a profile file (TOML; see suites/planner/machine.h)");
  }
  ConfigReader r = ConfigReader::from_file(what);
  MachineProfile m;
  m.hw.machine = r.require<std::string>("machine.name");
  require(!m.name().empty() && m.name().size() <= 64, r.source() + ": machine.name must be 1 to 64 characters");
  m.source = r.require<std::string>("machine.source");
  require(!m.source.empty(), r.source() + ": machine.source must say where the figures come from");
  // Which figures the file gives (read before the defaults fill the rest).
  std::set<std::string> given;
  for (const std::string& k : profile_figures())
    if (r.has("machine." + k)) given.insert(k);
  // Peaks and rates within what any device does (a TFLOP/s of 1e300 printed NaN).
  const Bounds peak = Bounds::closed(1e-6, 1e6), bw = Bounds::closed(0, 1e7);
  m.peak_tflops_bf16 = r.require<double>("machine.peak_tflops_bf16", peak);
  m.peak_tflops_fp32 = r.get<double>("machine.peak_tflops_fp32", m.peak_tflops_bf16, peak);
  m.peak_tflops_fp64 = r.get<double>("machine.peak_tflops_fp64", m.peak_tflops_fp32, peak);
  m.hw.mem_bw_GBps = r.get<double>("machine.mem_bw_GBps", 0.0, bw);
  m.hw.bw_intra_GBps = r.get<double>("machine.bw_intra_GBps", 0.0, bw);
  m.hw.bw_inter_GBps = r.get<double>("machine.bw_inter_GBps", m.hw.bw_intra_GBps, bw);
  m.hw.latency_us = r.get<double>("machine.latency_us", 0.0, Bounds::closed(0, 1e9));
  m.hw.gemm_efficiency = r.get<double>("machine.gemm_efficiency", 1.0, Bounds::open_closed(0, 1));
  m.hw.memory_GB = r.get<double>("machine.memory_GB", 0.0, Bounds::non_negative());
  m.ranks_per_node = r.get<int>("machine.ranks_per_node", 1, Bounds::closed(1, 1 << 20));
  m.wake_us = r.get<double>("machine.wake_us", 0.0, Bounds::non_negative());
  m.hw.latency_inter_us = r.get<double>("machine.latency_inter_us", 0.0, Bounds::non_negative());
  m.hw.latency_call_us = r.get<double>("machine.latency_call_us", 0.0, Bounds::closed(0, 1e9));
  m.hw.host_kernels = !r.get<bool>("machine.gpu", false);
  m.hw.rails = r.get<int>("machine.rails", 0, Bounds::closed(0, 1 << 20));
  m.hw.oversubscription = r.get<double>("machine.oversubscription", 1.0, Bounds::closed(1, 1e6));
  m.hw.leaf_nodes = r.get<int>("machine.leaf_nodes", 0, Bounds::closed(0, 1 << 30));
  m.gemm_achievable_tflops_bf16 = r.get<double>("machine.gemm_achievable_tflops_bf16", 0.0, Bounds::closed(0, 1e6));
  require(m.gemm_achievable_tflops_bf16 <= m.peak_tflops_bf16,
          r.source() + ": machine.gemm_achievable_tflops_bf16 exceeds machine.peak_tflops_bf16");
  m.flash_attention_tflops_bf16 =
      r.get<double>("machine.flash_attention_tflops_bf16", 0.0, Bounds::closed(0, 1e6));
  require(m.flash_attention_tflops_bf16 <= m.peak_tflops_bf16,
          r.source() + ": machine.flash_attention_tflops_bf16 exceeds machine.peak_tflops_bf16");
  m.hw.overlap_compute_slowdown = r.get<double>("machine.overlap_compute_slowdown", 0.0, Bounds::closed(0, 10));
  m.hw.host_op_us = r.get<double>("machine.host_op_us", 0.0, Bounds::closed(0, 1e6));
  m.hw.gemm_spread = r.get<double>("machine.gemm_spread", 0.0, Bounds::half_open(0, 0.5));
  m.hw.ring_plateau = r.get<double>("machine.ring_plateau", 1.0, Bounds::closed(1, 10));
  // The memory-bound kernels by kind (Hardware::norm_mem_bw_GBps ...; 0 or
  // absent: mem_bw_GBps).
  for (const KindRate& k : kKindRates) {
    const std::string key = std::string("machine.") + k.key;
    double& v = m.hw.*k.rate;
    v = r.get<double>(key, 0.0, bw);
    require(!given.count(k.key) || v > 0, r.source() + ": " + key + " must be > 0 (leave it out to use mem_bw_GBps)");
  }
  m.hw.gemm_units = r.get<int>("machine.gemm_units", 0, Bounds::closed(0, 1 << 20));
  m.hw.gemm_tile_m = r.get<int>("machine.gemm_tile_m", 0, Bounds::closed(0, 1 << 16));
  m.hw.gemm_tile_n = r.get<int>("machine.gemm_tile_n", 0, Bounds::closed(0, 1 << 16));
  require((m.hw.gemm_units > 0) == (m.hw.gemm_tile_m > 0) && (m.hw.gemm_units > 0) == (m.hw.gemm_tile_n > 0),
          r.source() + ": machine.gemm_units, gemm_tile_m and gemm_tile_n go together (all > 0, or none)");
  for (const std::string& k : profile_figures())
    if (r.has("machine.sources." + k)) {
      const auto v = r.require<std::string>("machine.sources." + k);
      require(!v.empty(), r.source() + ": machine.sources." + k + " is empty: say where the figure comes from");
      m.sources[k] = v;
    }
  // parabench calibrate --device cuda: the launch cost (a GPU profile that
  // gives it names its source) and the tables' sources (optional; kept, and
  // written back by machine_toml).
  const bool launch_given = r.has("machine.kernel_launch_us");
  m.kernel_launch_us = r.get<double>("machine.kernel_launch_us", 0.0, Bounds::closed(0, 1e6));
  {
    std::vector<std::string> keys = {"kernel_launch_us"};
    for (const std::string& p : gemm_table_precisions()) keys.push_back("gemm." + p);
    for (const std::string& op : collective_ops()) keys.push_back("collective." + op);
    for (const std::string& k : keys)
      if (r.has("machine.sources." + k)) {
        const auto v = r.require<std::string>("machine.sources." + k);
        require(!v.empty(), r.source() + ": machine.sources." + k + " is empty: say where it comes from");
        m.sources[k] = v;
      }
    require(m.hw.host_kernels || !launch_given || m.sources.count("kernel_launch_us"),
            r.source() + ": machine.kernel_launch_us has no source: a GPU profile (machine.gpu) names one for every "
                         "figure in [machine.sources] (kernel_launch_us = \"...\")");
  }
  if (!m.hw.host_kernels) {
    // A device profile: every figure it gives names its source, and no rate is 0.
    for (const char* k : {"mem_bw_GBps", "bw_intra_GBps", "bw_inter_GBps", "memory_GB"})
      require(given.count(k),
              r.source() + ": machine." + k + " is missing: a GPU profile (machine.gpu) gives every figure");
    for (const auto& [k, v] : std::initializer_list<std::pair<const char*, double>>{
             {"mem_bw_GBps", m.hw.mem_bw_GBps}, {"bw_intra_GBps", m.hw.bw_intra_GBps},
             {"bw_inter_GBps", m.hw.bw_inter_GBps}, {"memory_GB", m.hw.memory_GB}})
      require(v > 0, r.source() + ": machine." + k + " must be > 0 on a GPU profile (machine.gpu)");
    for (const std::string& k : profile_figures())
      require(!given.count(k) || m.sources.count(k),
              r.source() + ": machine." + k + " has no source: a GPU profile (machine.gpu) names one for every "
                                              "figure in [machine.sources] (" + k + " = \"...\")");
  }
  // Parallel arrays of one table: every one present, of one length >= 1.
  auto columns = [&](const std::string& table, const std::vector<std::string>& names) {
    std::vector<std::vector<double>> cols;
    for (const std::string& n : names) {
      const std::string key = table + "." + n;
      cols.push_back(r.require<std::vector<double>>(key, Bounds::positive()));
      require(!cols.back().empty(), r.source() + ": " + key + " must list at least one value");
      require(cols.back().size() == cols.front().size(),
              r.source() + ": " + key + " has " + std::to_string(cols.back().size()) + " values, " + table + "." +
                  names.front() + " " + std::to_string(cols.front().size()) + " (one per entry)");
    }
    return cols;
  };
  auto whole = [&](const std::string& key, double v) {
    require(v == std::floor(v) && v <= double(int64_t(1) << 40),
            r.source() + ": " + key + " must hold whole numbers up to 2^40, got " + std::to_string(v));
    return int64_t(v);
  };
  for (const std::string& p : gemm_table_precisions()) {
    const std::string t = "machine.gemm." + p;
    if (!r.has(t + ".m")) continue;
    const auto c = columns(t, {"m", "n", "k", "gflops"});
    for (size_t i = 0; i < c[0].size(); ++i)
      m.gemm[p].push_back({whole(t + ".m", c[0][i]), whole(t + ".n", c[1][i]), whole(t + ".k", c[2][i]), c[3][i]});
  }
  for (const std::string& op : collective_ops()) {
    const std::string t = "machine.collective." + op;
    if (!r.has(t + ".group_size")) continue;
    const auto c = columns(t, {"group_size", "alpha_us", "GBps"});
    for (size_t i = 0; i < c[0].size(); ++i) {
      const int64_t g = whole(t + ".group_size", c[0][i]);
      require(g >= 2, r.source() + ": " + t + ".group_size must be >= 2, got " + std::to_string(g));
      m.hw.collectives[op].push_back({g, c[1][i], c[2][i]});
    }
  }
  if (r.has("machine.shape.work")) {
    const std::string t = "machine.shape";
    const auto names = r.require<std::vector<std::string>>(t + ".workload");
    const auto c = columns(t, shape_columns());
    require(names.size() == c[0].size(), r.source() + ": " + t + ".workload has " + std::to_string(names.size()) +
                                             " values, " + t + ".work " + std::to_string(c[0].size()) +
                                             " (one per entry)");
    for (size_t i = 0; i < names.size(); ++i) {
      require(!names[i].empty(), r.source() + ": " + t + ".workload must name each shape");
      require(i == 0 || c[0][i] > c[0][i - 1], r.source() + ": " + t + ".work must be strictly ascending");
      m.shapes.push_back({names[i], c[0][i], c[1][i], c[2][i], c[3][i], c[4][i], c[5][i], c[6][i]});
    }
  }
  r.check_no_unknown_keys();
  return m;
}

double shape_work(const ModelConfig& m, int64_t b, int64_t s, int tp, int cp) {
  return to_double(stage_flops(m, b, s, Recompute::none, m.L, false, m.moe_layers()).model) / double(m.L) /
         double(int64_t(tp) * cp);
}

ShapeFigures shape_figures_at(const std::vector<ShapeFigures>& shapes, double work) {
  if (shapes.empty()) return {};
  if (!(work > shapes.front().work)) return shapes.front();
  if (work >= shapes.back().work) return shapes.back();
  size_t i = 1;
  while (shapes[i].work < work) ++i;
  const ShapeFigures &a = shapes[i - 1], &b = shapes[i];
  const double w = std::log(work / a.work) / std::log(b.work / a.work);
  auto mix = [w](double x, double y) { return x + (y - x) * w; };
  return {a.workload + " .. " + b.workload,
          work,
          mix(a.mem_bw_GBps, b.mem_bw_GBps),
          mix(a.shared_mem_bw_GBps, b.shared_mem_bw_GBps),
          mix(a.optimizer_mem_bw_GBps, b.optimizer_mem_bw_GBps),
          mix(a.buffer_mem_bw_GBps, b.buffer_mem_bw_GBps),
          mix(a.compute_scale, b.compute_scale),
          mix(a.corun_scale, b.corun_scale)};
}

const std::vector<std::string>& gemm_table_precisions() {
  static const std::vector<std::string> v = {"fp32", "bf16", "fp64"};
  return v;
}

const std::vector<std::string>& collective_ops() {
  static const std::vector<std::string> v = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all",
                                             "send_recv"};
  return v;
}

std::string machine_toml(const MachineProfile& m) {
  ConfigReader r;
  r.set("machine.name", m.name());
  r.set("machine.source", m.source);
  auto num = [&](const char* key, double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    r.set(key, std::stod(buf));
  };
  num("machine.peak_tflops_bf16", m.peak_tflops_bf16);
  num("machine.peak_tflops_fp32", m.peak_tflops_fp32);
  num("machine.peak_tflops_fp64", m.peak_tflops_fp64);
  num("machine.mem_bw_GBps", m.hw.mem_bw_GBps);
  num("machine.bw_intra_GBps", m.hw.bw_intra_GBps);
  num("machine.bw_inter_GBps", m.hw.bw_inter_GBps);
  num("machine.latency_us", m.hw.latency_us);
  num("machine.gemm_efficiency", m.hw.gemm_efficiency);
  num("machine.memory_GB", m.hw.memory_GB);
  r.set("machine.ranks_per_node", m.ranks_per_node);
  num("machine.wake_us", m.wake_us);
  num("machine.latency_inter_us", m.hw.latency_inter_us);
  if (m.hw.latency_call_us > 0 || m.sources.count("latency_call_us"))
    num("machine.latency_call_us", m.hw.latency_call_us);
  if (!m.hw.host_kernels) r.set("machine.gpu", true);
  if (m.hw.rails > 0) r.set("machine.rails", m.hw.rails);
  if (m.hw.oversubscription != 1 || m.hw.leaf_nodes > 0) {
    num("machine.oversubscription", m.hw.oversubscription);
    r.set("machine.leaf_nodes", m.hw.leaf_nodes);
  }
  if (m.gemm_achievable_tflops_bf16 > 0) num("machine.gemm_achievable_tflops_bf16", m.gemm_achievable_tflops_bf16);
  if (m.flash_attention_tflops_bf16 > 0) num("machine.flash_attention_tflops_bf16", m.flash_attention_tflops_bf16);
  if (m.hw.overlap_compute_slowdown > 0) num("machine.overlap_compute_slowdown", m.hw.overlap_compute_slowdown);
  if (m.hw.host_op_us > 0) num("machine.host_op_us", m.hw.host_op_us);
  if (m.hw.gemm_spread > 0) num("machine.gemm_spread", m.hw.gemm_spread);
  if (m.hw.ring_plateau != 1) num("machine.ring_plateau", m.hw.ring_plateau);
  for (const KindRate& k : kKindRates)
    if (m.hw.*k.rate > 0) num((std::string("machine.") + k.key).c_str(), m.hw.*k.rate);
  if (m.kernel_launch_us > 0) num("machine.kernel_launch_us", m.kernel_launch_us);
  if (m.hw.gemm_units > 0) {
    r.set("machine.gemm_units", m.hw.gemm_units);
    r.set("machine.gemm_tile_m", m.hw.gemm_tile_m);
    r.set("machine.gemm_tile_n", m.hw.gemm_tile_n);
  }
  for (const auto& [k, v] : m.sources)
    if (k != "flash_attention_rates") r.set("machine.sources." + k, v);  // the table is the built-ins' only
  auto nums = [&](const std::string& key, const std::vector<double>& v) {
    std::vector<double> out;
    for (double x : v) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.6g", x);
      out.push_back(std::stod(buf));
    }
    r.set(key, out);
  };
  for (const auto& [p, table] : m.gemm) {
    std::vector<int64_t> mm, nn, kk;
    std::vector<double> g;
    for (const GemmRate& e : table) {
      mm.push_back(e.m);
      nn.push_back(e.n);
      kk.push_back(e.k);
      g.push_back(e.gflops);
    }
    const std::string t = "machine.gemm." + p;
    r.set(t + ".m", mm);
    r.set(t + ".n", nn);
    r.set(t + ".k", kk);
    nums(t + ".gflops", g);
  }
  for (const auto& [op, fits] : m.hw.collectives) {
    std::vector<int64_t> g;
    std::vector<double> a, b;
    for (const CollectiveFit& f : fits) {
      g.push_back(f.group_size);
      a.push_back(f.alpha_us);
      b.push_back(f.GBps);
    }
    const std::string t = "machine.collective." + op;
    r.set(t + ".group_size", g);
    nums(t + ".alpha_us", a);
    nums(t + ".GBps", b);
  }
  if (!m.shapes.empty()) {
    std::vector<std::string> names;
    std::vector<double> f[7];
    for (const ShapeFigures& x : m.shapes) {
      names.push_back(x.workload);
      const double v[7] = {x.work, x.mem_bw_GBps, x.shared_mem_bw_GBps, x.optimizer_mem_bw_GBps,
                           x.buffer_mem_bw_GBps, x.compute_scale, x.corun_scale};
      for (int i = 0; i < 7; ++i) f[i].push_back(v[i]);
    }
    r.set("machine.shape.workload", names);
    for (size_t i = 0; i < shape_columns().size(); ++i) nums("machine.shape." + shape_columns()[i], f[i]);
  }
  return r.dump();
}

LineFit fit_line(const std::vector<std::pair<double, double>>& xt) {
  require(xt.size() >= 2, "fit: needs at least two points");
  double sx = 0, st = 0;
  for (const auto& [x, t] : xt) {
    require(std::isfinite(t) && std::isfinite(x), "fit: values must be finite");
    sx += x;
    st += t;
  }
  const double n = double(xt.size()), mx = sx / n, mt = st / n;
  double sxx = 0, sxt = 0;
  for (const auto& [x, t] : xt) {
    sxx += (x - mx) * (x - mx);
    sxt += (x - mx) * (t - mt);
  }
  require(sxx > 0, "fit: needs two distinct sizes");
  LineFit f;
  f.slope = sxt / sxx;
  f.intercept = mt - f.slope * mx;
  return f;
}

CollectiveFit fit_alpha_beta(std::string_view op, int64_t n, const std::vector<std::pair<double, double>>& xt,
                             double small_max, const std::string& what, const std::string& hint) {
  std::vector<double> small;
  std::vector<std::pair<double, double>> large;
  std::set<double> distinct;
  for (const auto& [x, t] : xt) {
    if (x <= small_max) small.push_back(t);
    if (x >= double(1 << 20)) {
      large.push_back({bus_bytes(op, n, x), t});
      distinct.insert(x);
    }
  }
  require(distinct.size() >= 2, what + ": needs sizes of 1 MiB and more, at least two (has " +
                                    std::to_string(distinct.size()) + ")");
  const LineFit fit = fit_line(large);
  require(fit.slope > 0, what + ": the times do not grow with size" + hint);
  double alpha = std::max(0.0, fit.intercept);
  if (!small.empty()) {
    std::sort(small.begin(), small.end());
    alpha = small[small.size() / 2];
  }
  return {n, alpha * 1e6, 1 / fit.slope / 1e9};
}

InterNodeFit fit_inter_node(const std::string& path) {
  CsvTable t;
  try {
    t = read_csv(path);
  } catch (const InputError& e) {
    throw InputError(std::string("--inter-node: ") + e.what());
  }
  auto col = [&](const char* name) {
    try {
      return t.column(name);
    } catch (const std::out_of_range&) {
      throw InputError("--inter-node: " + path + " has no '" + name +
                       "' column (a collectives.csv of parabench collectives, with its nodes column)");
    }
  };
  const size_t kind = col("kind"), status = col("status"), op = col("op"), dtype = col("dtype"),
               inplace = col("inplace"), nodes = col("nodes"), world = col("world"), bytes = col("bytes"),
               time = col("time_us");
  auto number = [&](size_t row, size_t c) {
    const std::string& v = t.rows[row][c];
    try {
      size_t used = 0;
      const double x = std::stod(v, &used);
      if (used == v.size() && std::isfinite(x)) return x;
    } catch (const std::exception&) {
    }
    throw InputError("--inter-node: " + path + " line " + std::to_string(t.row_lines[row]) + ": '" + t.header[c] +
                     "' is not a number: '" + v + "'");
  };
  std::vector<size_t> use;
  InterNodeFit f;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const auto& r = t.rows[i];
    if (r[kind] != "collective" || r[status] != "ok" || r[op] != "all_reduce" || r[dtype] != "fp32" ||
        r[inplace] != "0" || r[nodes].empty() || number(i, nodes) < 2)
      continue;
    use.push_back(i);
    f.world = std::max(f.world, int(number(i, world)));
  }
  require(!use.empty(), "--inter-node: " + path +
                            " has no ok fp32 all_reduce rows across 2 or more nodes (run `parabench collectives "
                            "all_reduce -b 4 -e 16M -f 4` under mpirun over the nodes)");
  require(f.world >= 2, "--inter-node: " + path + ": the rows' world is below 2");
  std::vector<std::pair<double, double>> xt;
  for (size_t i : use) {
    if (int(number(i, world)) != f.world) continue;
    const double x = number(i, bytes), s = number(i, time) * 1e-6;
    require(x >= 0 && s > 0, "--inter-node: " + path + " line " + std::to_string(t.row_lines[i]) +
                                 ": bytes must be >= 0 and time_us > 0");
    xt.push_back({x, s});
  }
  f.rows = int(xt.size());
  const CollectiveFit fit = fit_alpha_beta("all_reduce", f.world, xt, 65536, "--inter-node: " + path + " (all_reduce)");
  f.GBps = fit.GBps;
  f.latency_us = fit.alpha_us / ring_steps("all_reduce", f.world);
  return f;
}

Hardware hardware_for(const MachineProfile& m, Precision precision) {
  Hardware h = m.hw;
  h.peak_tflops = precision == Precision::fp64   ? m.peak_tflops_fp64
                  : precision == Precision::fp32 ? m.peak_tflops_fp32
                                                 : m.peak_tflops_bf16;
  const char* key = precision == Precision::fp64 ? "fp64" : precision == Precision::fp32 ? "fp32" : "bf16";
  if (const auto it = m.gemm.find(key); it != m.gemm.end()) h.gemm_rates = it->second;
  // The achievable matmul rate was measured in BF16: the GEMM model holds for bf16-mixed only.
  if (precision == Precision::bf16_mixed) h.gemm_achievable_tflops = m.gemm_achievable_tflops_bf16;
  else h.gemm_units = h.gemm_tile_m = h.gemm_tile_n = 0;
  // FlashAttention's rate was measured in BF16 (FP16) too.
  h.flash_attention_tflops = precision == Precision::bf16_mixed ? m.flash_attention_tflops_bf16 : 0;
  if (precision == Precision::bf16_mixed) h.flash_rates = m.flash_rates_bf16;
  return h;
}

Hardware hardware_for(const MachineProfile& m, const PlanInput& in) {
  Hardware h = hardware_for(m, in.precision);
  if (m.shapes.empty() || !in.shape) return h;
  const int64_t seq = in.seq > 0 ? in.seq : in.shape->maxT;
  const ShapeFigures f =
      shape_figures_at(m.shapes, shape_work(*in.shape, std::max<int64_t>(1, in.microbatch_size), seq, in.tp, in.cp));
  if (f.mem_bw_GBps > 0) h.mem_bw_GBps = f.mem_bw_GBps;
  h.shared_mem_bw_GBps = f.shared_mem_bw_GBps;
  h.optimizer_mem_bw_GBps = f.optimizer_mem_bw_GBps;
  h.buffer_mem_bw_GBps = f.buffer_mem_bw_GBps;
  h.compute_scale = f.compute_scale;
  h.corun_scale = f.corun_scale;
  h.corun_ranks = m.ranks_per_node;
  return h;
}

}  // namespace pb::planner
