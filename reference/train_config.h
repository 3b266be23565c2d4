// One training configuration: the model, the precision, the batch, the
// optimizer and the data. Loaded from TOML (train_config_io.h) or built in code.
#pragma once
#include <cstdint>
#include <string>

#include "harness/dtype.h"
#include "reference/model_config.h"

namespace pb {

// fp64: the truth. fp32. bf16-mixed: bf16 params, grads and activations; fp32
// master weights and Adam state (ZeRO's 2 + 2 + 12 bytes per parameter).
enum class Precision : uint8_t { fp64, fp32, bf16_mixed };
std::string precision_name(Precision p);
Precision parse_precision(const std::string& s);  // InputError on anything else
DType storage_dtype(Precision p);

// Where the model's buffers live and its kernels run (kernels/common/
// device_ops.h): the CPU, or CUDA GPUs (fp32 and bf16-mixed: the reference on
// one, every parallel strategy on one per rank).
enum class Device : uint8_t { cpu, cuda };
std::string device_name(Device d);
Device parse_device(const std::string& s);  // InputError on anything else

struct OptimConfig {
  double lr = 1e-3;
  double min_lr = 1e-4;
  int warmup = 0;              // steps of linear warmup
  std::string schedule = "cosine";  // cosine | constant
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
  double clip = 1.0;           // global-norm clipping; 0 disables it (negative: refused)
  bool operator==(const OptimConfig&) const = default;
};

struct DataConfig {
  uint64_t seed = 7;
  int branching = 3;
  double mix = 0.02;
  bool operator==(const DataConfig&) const = default;
};

struct TrainConfig {
  ModelConfig model;
  Precision precision = Precision::fp32;
  uint64_t seed = 1234;  // init
  int steps = 10;
  int batch = 8;         // global batch, sequences
  int seq = 16;          // tokens per sequence (<= model.maxT)
  int microbatches = 1;  // gradient accumulation steps per replica
  int threads = 1;       // BLAS threads per rank
  Device device = Device::cpu;
  OptimConfig optim;
  DataConfig data;

  int64_t tokens_per_step() const { return int64_t(batch) * seq; }
  // Throws InputError naming the field and the rule.
  void validate() const;
  bool operator==(const TrainConfig&) const = default;
};

// Learning rate at 1-based step s: linear warmup, then cosine to min_lr over
// the remaining steps (or constant).
double lr_at(const OptimConfig& o, int step, int total_steps);

// Global-norm clipping factor (PyTorch clip_grad_norm_): min(1, clip / (norm + 1e-6));
// 1 (no clipping) when clip is 0. validate() refuses a negative clip.
double clip_factor(double norm, double clip);

}  // namespace pb
