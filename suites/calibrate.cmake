# calibrate: this machine's measured figures (communication rates, kernel
# rates at a training shape), which both `parabench sweep` (its plan rows) and
# `parabench calibrate` (a machine profile) take.
parabench_library(NAME pb_calibrate ALIAS pb::calibrate
  SOURCES calibrate/comm_rates.cc calibrate/local_hardware.cc calibrate/kernel_rates.cc calibrate/shape_rates.cc
          calibrate/device_rates.cc
  DEPS pb::planner pb::context_parallel pb::harness pb::kernels_cpu pb::collectives)
# (label `full`: ~30 s of measuring this machine; the quick suite keeps the
# calibrate command's own test, cli_calibrate's siblings, out of a newcomer's way).
parabench_test(NAME calibrate_test SOURCES calibrate/local_hardware_test.cc calibrate/shape_rates_test.cc
  DEPS pb::calibrate LABELS full TIMEOUT 120)
# calibrate --device cuda's measurements and profile on the CPU stand-in device.
parabench_test(NAME calibrate_device_test SOURCES calibrate/device_rates_test.cc
  DEPS pb::calibrate pb::reference TIMEOUT 60)

list(APPEND PB_CLI_SOURCES cli/cmd_calibrate.cc)
list(APPEND PB_CLI_DEPS pb::calibrate)

# calibrate --device cuda on 2 GPUs under mpirun (the nccl backend): writes a
# GPU profile and reads it back as plan --machine does. Skipped, with the
# command's reason, where there is no GPU or the build has no CUDA.
parabench_mpi_test(NAME calibrate_cuda_np2 NP 2 TIMEOUT 600
  COMMAND $<TARGET_FILE:parabench> calibrate --device cuda --seconds 0.2
          --out ${CMAKE_CURRENT_BINARY_DIR}/calibrate_cuda_np2.toml)
if(TEST calibrate_cuda_np2)
  set_tests_properties(calibrate_cuda_np2 PROPERTIES LABELS "mpi;gpu"
    SKIP_REGULAR_EXPRESSION "calibrate --device cuda: no GPU to calibrate")
endif()
