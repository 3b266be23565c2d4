# calibrate: this machine's measured figures (communication rates, kernel
# rates at a training shape), which both `parabench sweep` (its plan rows) and
# `parabench calibrate` (a machine profile) take.
parabench_library(NAME pb_calibrate ALIAS pb::calibrate
  SOURCES calibrate/comm_rates.cc calibrate/local_hardware.cc calibrate/kernel_rates.cc calibrate/shape_rates.cc
          calibrate/device_rates.cc
  DEPS pb::planner pb::context_parallel pb::harness pb::kernels_cpu pb::collectives)
parabench_test(NAME calibrate_test SOURCES calibrate/local_hardware_test.cc calibrate/shape_rates_test.cc
  DEPS pb::calibrate TIMEOUT 120)
# calibrate --device cuda's measurements and profile on the CPU stand-in device.
parabench_test(NAME calibrate_device_test SOURCES calibrate/device_rates_test.cc
  DEPS pb::calibrate pb::reference TIMEOUT 60)

list(APPEND PB_CLI_SOURCES cli/cmd_calibrate.cc)
list(APPEND PB_CLI_DEPS pb::calibrate)
