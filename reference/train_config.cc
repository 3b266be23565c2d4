#include "reference/train_config.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "harness/status.h"

namespace pb {

std::string precision_name(Precision p) {
  return p == Precision::fp64 ? "fp64" : p == Precision::fp32 ? "fp32" : "bf16-mixed";
}

Precision parse_precision(const std::string& s) {
  if (s == "fp64") return Precision::fp64;
  if (s == "fp32") return Precision::fp32;
  if (s == "bf16-mixed" || s == "bf16") return Precision::bf16_mixed;
  throw InputError("train.precision: must be one of fp64, fp32, bf16-mixed; got '" + s + "'");
}

DType storage_dtype(Precision p) {
  return p == Precision::fp64 ? DType::f64 : p == Precision::fp32 ? DType::f32 : DType::bf16;
}

std::string device_name(Device d) { return d == Device::cuda ? "cuda" : "cpu"; }

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu;
  if (s == "cuda") return Device::cuda;
  throw InputError("train.device: '" + s + "' is not cpu or cuda");
}

void TrainConfig::validate() const {
  model.validate();
  auto positive = [](const std::string& f, long x) {
    require(x > 0, f + ": must be > 0, got " + std::to_string(x));
  };
  positive("train.steps", steps);
  positive("train.batch", batch);
  positive("train.seq", seq);
  positive("train.microbatches", microbatches);
  positive("train.threads", threads);
  if (device == Device::cuda) {
    require(precision != Precision::fp64, "train.device: cuda runs fp32 and bf16-mixed (fp64 is the CPU's truth)");
    require(!model.llama(), "train.device: cuda does not run model family llama yet (its RMSNorm, RoPE and SwiGLU "
                            "kernels are the CPU's only)");
  }
  require(seq <= model.maxT, "train.seq: must be <= model.context (" + std::to_string(model.maxT) +
                                 "), got " + std::to_string(seq));
  require(batch % microbatches == 0, "train.microbatches: must divide train.batch (" +
                                         std::to_string(batch) + " % " +
                                         std::to_string(microbatches) + " != 0)");
  require(optim.lr > 0, "optim.lr: must be > 0");
  require(optim.min_lr >= 0 && optim.min_lr <= optim.lr, "optim.min_lr: must be in [0, optim.lr]");
  require(optim.warmup >= 0, "optim.warmup: must be >= 0");
  require(optim.schedule == "cosine" || optim.schedule == "constant",
          "optim.schedule: must be cosine or constant, got '" + optim.schedule + "'");
  require(optim.beta1 >= 0 && optim.beta1 < 1, "optim.beta1: must be in [0, 1)");
  require(optim.beta2 >= 0 && optim.beta2 < 1, "optim.beta2: must be in [0, 1)");
  require(optim.eps > 0, "optim.eps: must be > 0");
  require(optim.weight_decay >= 0, "optim.weight_decay: must be >= 0");
  require(optim.clip >= 0, "optim.clip: must be >= 0 (0: no clipping; else min(1, clip / (norm + 1e-6))), got " +
                               std::to_string(optim.clip));
  require(data.branching >= 1, "data.branching: must be >= 1");
  require(data.mix > 0 && data.mix < 1, "data.mix: must be in (0, 1)");
}

double lr_at(const OptimConfig& o, int step, int total_steps) {
  if (o.warmup > 0 && step <= o.warmup) return o.lr * step / o.warmup;
  if (o.schedule == "constant") return o.lr;
  int span = std::max(1, total_steps - o.warmup);
  double progress = std::min(1.0, double(step - o.warmup) / span);
  return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1 + std::cos(std::numbers::pi * progress));
}

double clip_factor(double norm, double clip) {
  if (clip == 0) return 1.0;
  return std::min(1.0, clip / (norm + 1e-6));
}

}  // namespace pb
