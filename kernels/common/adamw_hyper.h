// AdamW's hyperparameters for one step, as the CPU kernel and the device seam
// (device_ops.h) take them.
#pragma once

namespace pb::kernels {

struct AdamWHyper {
  double lr = 3e-4, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  long step = 1;            // 1-based, for bias correction
  double grad_scale = 1.0;  // multiplies the gradient first (global-norm clipping)
};

}  // namespace pb::kernels
