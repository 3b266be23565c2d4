// One CUDA GPU as a device of the seam (kernels/common/device_ops.h): its
// memory (cudaMalloc, zero-filled, for the tracked allocator) and the model's
// ops on one stream of its own with one cuBLAS handle, for fp32 and bf16
// storage (pb::bf16 has __nv_bfloat16's bits). Host-only header: no CUDA
// types in it, so the CLI can open a GPU without including CUDA headers.
// Invariant: the ops of one Gpu share its stream, so they run in issue order;
// to_host, sum and synchronize wait for it.
#pragma once
#include <memory>
#include <string>

#include "harness/memory.h"
#include "kernels/common/device_ops.h"

namespace pb::kernels::cuda {

struct Gpu {
  std::string name;  // "cuda:0 NVIDIA H100 80GB HBM3"
  std::shared_ptr<const DeviceOps<float>> f32;
  std::shared_ptr<const DeviceOps<bf16>> bf16_ops;
  std::shared_ptr<DeviceMemory> memory;
  void* stream = nullptr;  // the cudaStream_t every op above runs on (for Communicator::order_after)
};

// Visible devices; 0 with *why saying why when there are none or the runtime
// cannot be used (no driver, no device).
int device_count(std::string* why);

// The device this process's CUDA calls go to (cudaGetDevice): the nccl
// backend sets it to the rank's GPU, its index among its node's ranks.
int current_device();

// Opens device `ordinal` (std::runtime_error naming the failed CUDA call, or
// the ordinal when it is out of range).
Gpu open_gpu(int ordinal);

// The GEMM rate device `ordinal` reaches, FLOP/s: n x n x n cublasGemmEx in
// fp32 or bf16 storage with fp32 accumulation (CUBLAS_COMPUTE_32F, as the
// model's GEMMs), repeated for at least `min_seconds` after a warm-up call,
// timed with CUDA events on its own stream (device time, not host time).
double measure_gemm_flops(int ordinal, bool bf16, int n, double min_seconds);

}  // namespace pb::kernels::cuda
