// What `parabench calibrate --device cuda` asks of a GPU that the device
// seam (gpu.h) does not give: its name and memory, and the cost of launching
// a kernel. Host-only header with no dependencies (calibrate.cu is compiled
// as CUDA C++17).
#pragma once
#include <string>

namespace pb::kernels::cuda {

// Device `ordinal` as cudaGetDeviceProperties names it (std::runtime_error
// when there is none): "NVIDIA H100 80GB HBM3", its memory and SMs.
struct DeviceInfo {
  std::string name;
  double memory_bytes = 0;
  int multiprocessors = 0;
};
DeviceInfo device_info(int ordinal);

// `launches` empty kernels (one thread) back to back on a stream of their
// own after a warm-up launch (kernels/cuda/calibrate.cu), per launch: the
// host's time to issue one (host_us), the device's time from the first to
// the last (CUDA events, device_us), and from the first issue to the
// stream's end as the host sees it (wall_us: the larger of the two bounds a
// chain of small kernels).
struct LaunchCost {
  double host_us = 0, device_us = 0, wall_us = 0;
};
LaunchCost measure_launch(int ordinal, int launches);

}  // namespace pb::kernels::cuda
