# calibrate: this machine's measured figures (communication rates, kernel
# rates at a training shape), which both `parabench sweep` (its plan rows) and
# `parabench calibrate` (a machine profile) take.
parabench_library(NAME pb_calibrate ALIAS pb::calibrate
  SOURCES calibrate/comm_rates.cc calibrate/local_hardware.cc calibrate/kernel_rates.cc calibrate/shape_rates.cc
  DEPS pb::planner pb::context_parallel pb::harness pb::kernels_cpu)
parabench_test(NAME calibrate_test SOURCES calibrate/local_hardware_test.cc calibrate/shape_rates_test.cc
  DEPS pb::calibrate TIMEOUT 120)

list(APPEND PB_CLI_SOURCES cli/cmd_calibrate.cc)
list(APPEND PB_CLI_DEPS pb::calibrate)
