// What `parabench calibrate --device cuda` asks of a GPU that the device seam
// does not give: its name and memory, and the cost of launching a kernel
// (an empty one, back to back on a stream of its own).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "kernels/cuda/check.h"
#include "kernels/cuda/calibrate.h"

namespace pb::kernels::cuda {
namespace {

__global__ void empty_kernel() {}

}  // namespace

DeviceInfo device_info(int ordinal) {
  int n = 0;
  detail::check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  if (ordinal < 0 || ordinal >= n)
    throw std::runtime_error("CUDA device " + std::to_string(ordinal) + " does not exist (" + std::to_string(n) +
                             " visible)");
  cudaDeviceProp prop{};
  detail::check(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
  DeviceInfo d;
  d.name = prop.name;
  d.memory_bytes = double(prop.totalGlobalMem);
  d.multiprocessors = prop.multiProcessorCount;
  return d;
}

LaunchCost measure_launch(int ordinal, int launches) {
  if (launches <= 0) throw std::invalid_argument("measure_launch: launches > 0");
  detail::check(cudaSetDevice(ordinal), "cudaSetDevice");
  cudaStream_t s = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  auto release = [&] {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (s) cudaStreamDestroy(s);
  };
  try {
    detail::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    detail::check(cudaEventCreate(&start), "cudaEventCreate");
    detail::check(cudaEventCreate(&stop), "cudaEventCreate");
    empty_kernel<<<1, 1, 0, s>>>();  // warm-up: the module loaded, the stream idle
    detail::check(cudaGetLastError(), "empty kernel launch");
    detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    detail::check(cudaEventRecord(start, s), "cudaEventRecord");
    for (int i = 0; i < launches; ++i) empty_kernel<<<1, 1, 0, s>>>();
    detail::check(cudaGetLastError(), "empty kernel launch");
    detail::check(cudaEventRecord(stop, s), "cudaEventRecord");
    const auto t1 = Clock::now();  // the launches issued
    detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    const auto t2 = Clock::now();  // and done
    float ms = 0;
    detail::check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    LaunchCost c;
    c.host_us = std::chrono::duration<double>(t1 - t0).count() * 1e6 / launches;
    c.device_us = double(ms) * 1e3 / launches;
    c.wall_us = std::chrono::duration<double>(t2 - t0).count() * 1e6 / launches;
    release();
    return c;
  } catch (...) {
    release();
    throw;
  }
}

}  // namespace pb::kernels::cuda
