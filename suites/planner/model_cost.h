// Analytic costs of the canonical GPT (DESIGN.md) for the planner: named
// shapes up to 1T parameters, the parameters a (tp, pp) rank holds, FLOPs per
// iteration and activation bytes, as pure functions of the shape.
//
// FLOPs: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
// on GPU Clusters Using Megatron-LM", Sec. 5.1 eq. (3):
//   F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))   (with full recomputation)
// i.e. 96Bslh^2 + 16Bs^2lh + 6BshV; without recomputation the layers cost
// 3x forward instead of 4x: 72Bslh^2 + 12Bs^2lh + 6BshV (the model FLOPs
// MFU counts); selective recomputation adds the attention core's forward,
// 4Bs^2h per layer. Computed in 128-bit integers: exact at 1T parameters.
//
// Activations: Korthikanti et al. 2022, "Reducing Activation Recomputation in
// Large Transformer Models", Sec. 4 (eq. 1-2, Table 2): per layer
// sbh(34 + 5as/h) bytes for 16-bit activations with dropout; with tensor
// parallel t: sbh(10 + 24/t + 5as/(ht)); with sequence parallel:
// sbh/t (34 + 5as/h); selective recomputation drops the 5as^2b term; full
// recomputation keeps only the layer input, 2sbh (2sbh/t with SP).
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "impl/pipeline/cost.h"
#include "impl/tensor_parallel/cost.h"
#include "reference/model_config.h"

namespace pb::planner {

__extension__ typedef unsigned __int128 u128;

// Recomputation modes and the activation formula are the tensor axis's
// (impl/tensor_parallel/cost.h): one source for the strategy and the planner.
using pb::parse_recompute;
using pb::Recompute;
using pb::recompute_name;
using tp::ActivationShape;
using tp::layer_activation_bytes;

// The reference's named shapes plus published large ones: gpt-1.3b (GPT-3 XL:
// L24 C2048 NH16 T2048), gpt-7b (L32 C4096 NH32 T2048), gpt3-175b (GPT-3:
// L96 C12288 NH96 T2048, Brown et al. 2020 Table 2.1), megatron-1t (Narayanan
// et al. 2021 Table 1, the 1008B row: L128 C25600 NH160, V51200 T2048).
// Aliases: 124m, 350m, 1.3b, 7b, 175b, 1t. InputError listing the names.
ModelConfig planner_model(std::string_view name);
std::vector<std::string> planner_model_names();

// Parameters held by pipeline rank `rank` with tensor parallel `tp` under the
// pipeline's partition (impl/pipeline/cost.h partition_layers), split into
// sharding units: [embeddings] on virtual stage 0, one unit per block, and on
// the last stage [final LN] and, when pp > 1, [tied LM-head copy] (Megatron
// keeps a copy of the word embeddings on the last stage).
// Per block and tp rank: 12C^2/t + 7C/t + 6C (QKV, attention-projection and
// MLP weights and column-parallel biases split; row biases and LayerNorms
// replicated). The vocab-parallel embedding holds ceil(V/t) rows.
std::vector<int64_t> rank_param_units(const ModelConfig& m, int tp, const pipeline::Partition& part, int rank);
// The llama family (docs/planner.md#the-llama-family), computed here from the
// model config's fields: the units of a tp rank (vocabulary-parallel
// embed_tokens; per block two RMSNorm weights, q and o C^2/t each, k and v
// C x kv each, the SwiGLU MLP 3CF/t or E experts of 3CF/t and a router of
// E*C; model.norm and the untied lm_head), summing to num_params at tp 1.
// kv = the rank's kv heads x head size: kv_heads / tp, or one head
// replicated when kv_heads < tp.
int64_t llama_kv_heads_per_rank(const ModelConfig& m, int tp);
std::vector<int64_t> llama_unit_params(const ModelConfig& m, int tp);
// The tp-replicated parameters (RMSNorm weights) of `layers` blocks and, with
// `head`, the final norm.
int64_t llama_replicated_params(const ModelConfig& m, int64_t layers, bool head);
// Blocks of the largest chunk on `rank`.
int max_chunk_layers(const pipeline::Partition& part, int rank);

struct Flops {
  u128 model = 0;     // 72Bslh^2 + 12Bs^2lh + 6BshV: no recomputation
  u128 hardware = 0;  // what runs, including recomputation
};
// One iteration of B sequences of s tokens.
Flops iteration_flops(const ModelConfig& m, int64_t B, int64_t s, Recompute r);
// The part of iteration_flops a set of `blocks` transformer blocks, and the
// LM head when `head`, do (a pipeline stage's; the embedding does none): the
// stages of a partition add up to iteration_flops. `moe_blocks` of them are
// mixture-of-experts blocks: each token runs its top_k experts' MLPs and the
// router (48 (k - 1) h^2 + 6 h E per token more than a dense block, as
// model_flops_per_step counts them; full recomputation runs their forward
// again), every admitted choice assumed (no drops).
Flops stage_flops(const ModelConfig& m, int64_t B, int64_t s, Recompute r, int64_t blocks, bool head,
                  int64_t moe_blocks = 0);
// The attention core's part of stage_flops' hardware FLOPs for `blocks`
// blocks (scores and weighted values, 4Bs^2h per forward; backward twice a
// forward; selective and full recomputation run the forward once more).
u128 attention_core_flops(const ModelConfig& m, int64_t B, int64_t s, Recompute r, int64_t blocks);
double to_double(u128 x);

// One GEMM shape of a training step: C (m x n) = op(A) op(B) with inner
// dimension k, A transposed when ta (stored k x m), B when tb (stored n x k);
// `count` calls per microbatch, forward and backward.
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  bool ta = false, tb = false;
  double count = 0;
  // Independent GEMMs of this shape run as one batched call (the attention
  // core's per-head GEMMs: b x heads per rank); 1 for the linears. Only the
  // tile and wave quantization of a GPU profile looks at it (Hardware).
  double batch = 1;
};
// The rate (GFLOP/s) of GEMM g on a profile's GEMM model
// (Hardware::gemm_achievable_tflops, gemm_units, gemm_tile_m/n): the
// achievable rate times the used share of the tiles and waves g occupies,
// and at most what device memory feeds it (the roofline: NVIDIA's 'Matrix
// Multiplication Background User's Guide', Sec. 2 'Math And Memory Bounds'):
// 2mnk FLOPs over the (mk + kn + mn) elements of `elem_bytes` each that the
// call reads and writes at least, at `mem_bw_GBps` (0: no bound). Only thin
// GEMMs meet it, as the unfused attention core's per-head products over a
// head dimension of 64-160.
double modeled_gemm_gflops(double achievable_tflops, int64_t units, int64_t tile_m, int64_t tile_n,
                           const GemmShape& g, double mem_bw_GBps = 0, int64_t elem_bytes = 2);
// The GEMMs one rank runs for one microbatch of b sequences of s tokens
// (reference/gpt.cc, impl/tensor_parallel): per block the four linears (y =
// x W^T forward; dx = dy W and dW = dy^T x backward), the tied LM head, and
// per head the attention core (S = Q K^T, O = P V; dP = dO V^T, dQ = dS K,
// dV = P^T dO, dK = dS^T Q). Tensor parallel t splits the column-parallel
// outputs (qkv, fc), the row-parallel inputs (proj, fc2), the heads and the
// vocabulary; context parallel c splits the queries (s/c x s scores per
// head). A mixture-of-experts block's MLP is its router (C -> E, on every
// token; every tp rank runs it whole, its count a tp rank's share of the
// model's, as the planner charges each rank world's share of the FLOPs) and
// its experts: a rank of expert parallel `ep` runs E / ep of them,
// each on the N k ep / E rows routed to it from the ep group (balanced, no
// drops; the shape's rows rounded, its count carrying the exact FLOPs), their
// hidden split over tp like the dense MLP's. No recomputation (the planner
// scales by hardware FLOPs). attention_core = false: the linears and the head
// only (what the rates time when the attention core's time is measured,
// Hardware::attention_fwd_s).
std::vector<GemmShape> rank_gemms(const ModelConfig& m, int64_t b, int64_t s, int tp, int cp,
                                  bool attention_core = true, int ep = 1);
// The fraction of peak_flops (FLOP/s) the GEMMs reach at rate(g) GFLOP/s
// each: their flops over their time, over the peak, at most 1.
template <class Rate>
double gemm_efficiency(const std::vector<GemmShape>& gemms, Rate rate, double peak_flops) {
  double flops = 0, time = 0;
  for (const GemmShape& g : gemms) {
    const double f = 2.0 * double(g.m) * double(g.n) * double(g.k) * g.count;
    flops += f;
    time += f / (rate(g) * 1e9);
  }
  return time > 0 && peak_flops > 0 ? std::min(1.0, flops / time / peak_flops) : 1.0;
}

// Activation bytes per layer: tp::layer_activation_bytes (Korthikanti Sec. 4;
// at e = 2, dropout, cp = 1 exactly the paper's sbh(10 + 24/t + 5as/(ht))).
// Extra activation bytes of the first stage (embedding output / dropout mask)
// and of the last stage (final LN and LM-head inputs, fp32 logits for the loss:
// 4sbV/t, Korthikanti Sec. 4.3).
// The llama family's layer (Korthikanti's count adapted: no dropout, RMSNorm,
// SwiGLU, GQA; stated in docs/planner.md).
int64_t llama_layer_activation_bytes(const ModelConfig& m, const ActivationShape& x, Recompute r);
int64_t first_stage_extra_bytes(const ActivationShape& x);
int64_t last_stage_extra_bytes(const ActivationShape& x, int64_t vocab);
// The last stage run eagerly as torchtitan's train.py runs it: the final
// RMSNorm keeps its fp32 upcast of the input (norms.py: self._norm(x.float()),
// 4h), its normalised output before the weight (e h) and the head's input
// (e h); the loss, cross_entropy(pred.float()) (at::cross_entropy_loss is
// log_softmax then nll_loss, aten/src/ATen/native/LossNLL.cpp), peaks in
// log-softmax's backward: its kept fp32 output, the fp32 gradient nll_loss
// writes and the fp32 gradient log-softmax writes, 12 bytes per local
// vocabulary entry and token (train.py frees the bf16 logits before
// backward: `del pred`). In forward the bf16 logits, the fp32 copy and the
// log-softmax output (e + 8) are live, fewer.
int64_t last_stage_eager_extra_bytes(const ActivationShape& x, int64_t vocab);

// Bytes the memory-bound (non-GEMM) work of one microbatch moves on one rank,
// forward and backward, counted for unfused kernels as the reference runs
// them (a roofline term: time = bytes / memory bandwidth). Per layer and
// local token, forward reads and writes two LayerNorms (2h each), two
// residual adds (3h each), GELU (8h) and the softmax over a*s scores (2as);
// backward moves twice the forward (gradient in, saved input, gradient out).
// With tensor parallel the GELU and per-head parts split over t (everything
// with sp). Elements of elem_bytes each; with dropout (x.dropout) its masks
// and the attention dropout's kernel as layer_softmax_traffic_bytes and
// layer_shared_traffic_bytes say.
int64_t layer_traffic_bytes(const ActivationShape& x);
// The llama family's: the norms and adds as above, RoPE on q and k, SwiGLU
// over the rank's F/t, the softmax (docs/planner.md).
int64_t llama_layer_traffic_bytes(const ModelConfig& m, const ActivationShape& x);
// The same block run as PyTorch eager ops, one kernel each, as torchtitan's
// Llama runs it without torch.compile (torchtitan/models/norms.py RMSNorm,
// models/llama/model.py at 9dec370): each RMSNorm upcasts to fp32, squares,
// means, scales, downcasts and multiplies by its weight (36 bytes per element
// at 2-byte activations: (e + 4) + 8 + 4 + 8 + (4 + e) + 2e); RoPE upcasts q
// and k, multiplies them as complex numbers and downcasts (16 + 2e per
// element); repeat_kv copies k and v to every query head (when kv < h/t);
// the attention output is made contiguous (2e h/t); SiLU and the product
// are two kernels (5e F/t); the residual adds 3e h each; the softmax as
// llama_layer_traffic_bytes. Backward twice the forward.
// fused_norm: the RMSNorms as torchtitan's Triton kernel instead
// (norm_type = "fused_rmsnorm", torchtitan/models/norms.py at 1ea476e:
// _rms_norm_fwd_kernel reads x and writes y, 2e per element; its backward
// reads x and dy and writes dx), at 2e per element forward, backward twice
// that as every other op here.
int64_t llama_layer_eager_traffic_bytes(const ModelConfig& m, const ActivationShape& x, bool fused_norm = false);
// The head run eagerly: the final RMSNorm as above, and torchtitan's loss,
// cross_entropy(logits.float()): the upcast (e + 4), log-softmax (8), its
// backward (the gradient written, 4; log-softmax backward 12) and the
// downcast's backward (4 + e) per local vocabulary entry and token.
int64_t head_eager_traffic_bytes(const ActivationShape& x, int64_t vocab, bool fused_norm = false);
// What a mixture-of-experts block's MLP moves beyond a dense block's
// (layer_traffic_bytes), per local token: the GELU over its top_k experts'
// hidden rows (k - 1 more of 8h / t), the dispatch (each choice's row read
// and written into its expert's buffer: 2kh), the combine (k rows and their
// weights read, one written: (k + 1) h + k) and the router's softmax over E
// (2E); backward moves twice the forward. Every tp rank routes the same
// tokens whole (with sequence parallel too: the block gathers them first).
int64_t moe_layer_extra_traffic_bytes(const ActivationShape& x, const MoeConfig& moe);
// The scores' part of layer_traffic_bytes: the softmax (3 x 2as elements per
// local token) and, with dropout, the attention dropout over the
// probabilities (Megatron-LM's GPT: torch.nn.Dropout after the fused masked
// softmax; per score 2e + 1 bytes forward, the mask a byte, and as many
// backward).
int64_t layer_softmax_traffic_bytes(const ActivationShape& x);
// What running the scores' kernels forward again moves (selective
// recomputation's rerun of the attention core; full's within
// layer_forward_traffic_bytes).
int64_t layer_softmax_forward_traffic_bytes(const ActivationShape& x);
// The LayerNorms' and residual adds' part (3 x 10h per local token, over t
// with sp; with dropout the bias-dropout-adds' masks, a byte per element
// written forward and read backward): what sequence parallel shards, timed
// at its own rate (Hardware::shared_mem_bw_GBps).
int64_t layer_shared_traffic_bytes(const ActivationShape& x);
// The forward's share of each: what full recomputation runs again.
int64_t layer_shared_forward_traffic_bytes(const ActivationShape& x);
int64_t layer_forward_traffic_bytes(const ActivationShape& x);
// The head (final LayerNorm 2h + 4h, softmax cross-entropy over the local
// vocabulary V/t: 2V + 2V per token) and the embedding (3h + 2h per token).
int64_t head_traffic_bytes(const ActivationShape& x, int64_t vocab);
// The head with Megatron-LM's loss (NVIDIA/Megatron-LM 6985e58938 and
// 2755bcb87b, megatron/model/gpt_model.py: vocab_parallel_cross_entropy(
// output.float(), labels) unless --fp16-lm-cross-entropy, default off;
// megatron/mpu/cross_entropy.py _VocabParallelCrossEntropy, the same at
// both): the final LayerNorm as head_traffic_bytes, and per local
// vocabulary entry and token, forward the upcast (e + 4), torch.max (4),
// sub_ (8), exp in place (8), sum (4), div_ (8); backward the gradient's
// mul_ (8) and the upcast's backward (4 + e): 2e + 48 bytes (52 at e = 2;
// the per-token gathers and the target's correction are per token, not per
// entry, and left out).
int64_t head_megatron_traffic_bytes(const ActivationShape& x, int64_t vocab);
// What Megatron-LM's pretrain_gpt.py forward_step moves per call (each
// model chunk's forward of each microbatch) besides the model, at
// NVIDIA/Megatron-LM 6985e58938 and 2755bcb87b alike (PlanInput::train_loop
// megatron_lm): get_batch's tokens_[:, 1:] and
// [:, :-1] .contiguous() copies (int64, read and written: 32 b s) and
// megatron/utils.py get_ltor_masks_and_position_ids with its defaults
// (reset_attention_mask off: one s x s mask per call): torch.ones fp32
// (4 s^2 written), torch.tril (8 s^2), `attention_mask < 0.5` (4 s^2 read,
// 1 s^2 bool written), the fp32 loss mask's ones (4 b s) and arange's int64
// position ids (8 s; expand_as copies nothing): 17 s^2 + 36 b s + 8 s bytes.
// On the chunk holding the head, loss_func's sum(losses * loss_mask) /
// loss_mask.sum() over the fp32 per-token losses: 20 b s (`head`).
int64_t megatron_batch_traffic_bytes(int64_t b, int64_t s, bool head);
// The head with flash-attn's fused cross entropy as llm-foundry's MPT runs
// it (mosaicml/llm-foundry 061f2c7, llmfoundry/models/mpt/modeling_mpt.py:
// loss_fn default 'fused_crossentropy', flash_attn.losses.cross_entropy.
// CrossEntropyLoss(ignore_index=-100): smoothing 0, inplace_backward False,
// no process group; the logits F.linear(x, wte.weight) under bf16 autocast,
// passed as logits.view(-1, V) with no .float() or copy; setup.py's [gpu]
// extra installs flash-attn 1.0.9 and its xentropy_cuda_lib): flash-attn
// v1.0.9 (6d48e14a6c), csrc/xentropy/xentropy_kernel.cu. Per local
// vocabulary entry and token: forward, cunn_SoftMaxXEntropyForward reads
// the e-byte logits (two passes over each row, the max and sum, then the
// exp sum, by the block that owns the row; counted once, as every kernel's
// re-reads are here, PyTorch's multi-pass log_softmax included) and writes
// only the per-token loss and log-sum-exp in fp32; backward,
// cunn_SoftMaxXEntropyBackward reads the saved logits and writes the
// gradient into at::empty_like(logits) (e-byte; in place only with
// inplace_backward): 3e bytes, 6 at e = 2. The final LayerNorm as
// head_traffic_bytes; the per-token labels, losses, masked_fill_s and the
// mean are per token, not per entry, and left out.
// train_metrics: also composer's training metrics on the same logits
// (mosaicml/composer v0.16.4 composer/trainer/trainer.py _train_microbatch:
// after each microbatch's backward, _eval_train_metrics under the
// precision context; MPT's metrics, use_train_metrics default True:
// LanguageCrossEntropy and LanguagePerplexity, composer/metrics/nlp.py, each
// update a torch.nn.CrossEntropyLoss(reduction='sum') over the logits, which
// autocast runs in fp32, PyTorch's autocast op reference "CUDA Ops that can
// autocast to float32": cross_entropy): per metric the upcast (e + 4) and
// log_softmax (4 + 4), nll_loss per token: 2 (e + 12) bytes more, 34 in
// all at e = 2.
int64_t head_flash_xentropy_traffic_bytes(const ActivationShape& x, int64_t vocab, bool train_metrics);
int64_t embedding_traffic_bytes(const ActivationShape& x);

// The traffic by kind (RankBytes): of layer_traffic_bytes and
// llama_layer_traffic_bytes, the two norms' (2h forward each, 12h per local
// token with backward; of layer_shared_traffic_bytes) and of
// layer_forward_traffic_bytes theirs (4h); of llama_layer_eager_traffic_bytes
// the two RMSNorms' (its `norm` bytes per element forward, three times that
// with backward); of the heads the final norm's (head_traffic_bytes' 6h, the
// eager head's 3 x norm). The scores' softmax alone (6e per score, 2e
// forward), without the attention dropout layer_softmax_traffic_bytes adds.
int64_t layer_norm_traffic_bytes(const ActivationShape& x);
int64_t layer_norm_forward_traffic_bytes(const ActivationShape& x);
int64_t llama_layer_eager_norm_traffic_bytes(const ActivationShape& x, bool fused_norm = false);
int64_t head_norm_traffic_bytes(const ActivationShape& x);
int64_t head_eager_norm_traffic_bytes(const ActivationShape& x, bool fused_norm = false);
int64_t scores_softmax_traffic_bytes(const ActivationShape& x);
int64_t scores_softmax_forward_traffic_bytes(const ActivationShape& x);

}  // namespace pb::planner
