// parabench selftest, a device: every op of the device seam
// (kernels/common/device_ops.h) run on the device and on the CPU's ops, on
// the same inputs and the same initial outputs (backward outputs accumulate),
// at fp32 and bf16 storage, over shapes that cross the CUDA kernels' tiles and
// blocks (head sizes 16, 64 and 192: above 128 the blockwise kernels' key
// tile halves; 150 and 300 rows, several 64-row blocks and 32-key tiles;
// LayerNorm rows wider than a block; a 50,257-entry vocabulary), output by
// output; gradients that accumulate start at values in one shape (the
// accumulation is seen) and at zero in another (the op's own contribution
// is measured, not drowned by the values it adds to). The model
// runs on a device through this seam, so this is what a vendor's first run
// must pass; ggml's test-backend-ops is the model. On this machine it runs
// against a stand-in device whose ops are the CPU's (errors exactly 0, every
// buffer moved through to_device/to_host) and a deliberately wrong one.
// Error: max_i |device_i - cpu_i| / max_i |cpu_i| (equal infinities match).
// Tolerance per output (Match):
//  - exact: both sides do at most one correctly rounded operation per element
//    (copies, fills, one add or product, a max, a read);
//  - stat: fp32 statistics (LayerNorm mean and rstd, losses, log-sum-exp,
//    the optimizer's fp32 state) computed in fp32 in different orders: 128
//    fp32 eps (1.5e-5), both storage types;
//  - storage: outputs stored at the precision: 128 fp32 eps at fp32; at bf16
//    two bf16 eps (0.0156), each side rounding its own fp32 value once, plus
//    backward ops re-reading a rounded forward result;
//  - total: a sum in double (the loss's on the host, the clipping norm's sum
//    of squares on the device): 1e-12.
#pragma once
#include <string>
#include <vector>

#include "harness/dtype.h"
#include "reference/trainer.h"

namespace pb::selftest {

enum class Match { exact, stat, storage, total };

struct DeviceCheck {
  std::string op;     // "layernorm_backward.dweight"
  std::string shape;  // "N=37 C=300"
  DType dtype = DType::f32;
  Match match = Match::storage;
  double error = 0;  // max |device - cpu| / max |cpu|
  double tolerance = 0;
  bool pass = false;
};

double device_tolerance(Match m, DType storage);

// Every op of `device` at fp32 and bf16 (an op set the device lacks is an
// InputError from device_ops(), naming it). Throws what the device throws.
std::vector<DeviceCheck> check_device_ops(const TrainDevice& device);

// The checks as selftest prints them: one line per output, in the order
// run, with the worst error over its shapes at fp32 and at bf16, the
// tolerances and ok/FAIL; then one line per failed check naming its dtype
// and shape.
std::string device_check_table(const std::vector<DeviceCheck>& checks);

}  // namespace pb::selftest
