# comm: communicators (local | mpi | nccl), accounting, mesh, rank launching.
# pb::harness holds the local backend and needs no MPI; pb::harness_mpi and
# pb::harness_nccl are optional targets switched on by detection; pb::comm is
# the backend factory, built from the real backends or the *_off.cc sources
# that report one absent, so no code is conditional on the build.
target_sources(pb_harness PRIVATE
  comm.cc comm_log.cc comm_local.cc comm_local_ops.cc comm_local_sync.cc mesh.cc runner.cc)

set(PB_COMM_SOURCES comm_backends.cc)
set(PB_COMM_DEPS pb::harness)

if(PARABENCH_HAVE_MPI)
  parabench_library(NAME pb_harness_mpi ALIAS pb::harness_mpi
    SOURCES comm_mpi.cc comm_mpi_ops.cc
    DEPS pb::harness MPI::MPI_CXX)
  list(APPEND PB_COMM_DEPS pb::harness_mpi)
else()
  list(APPEND PB_COMM_SOURCES comm_mpi_off.cc)
endif()

set(PB_HAVE_NCCL OFF)
if(PARABENCH_HAVE_CUDA AND PARABENCH_HAVE_MPI)
  find_path(PB_NCCL_INCLUDE_DIR nccl.h HINTS /usr/local/include ${CUDAToolkit_INCLUDE_DIRS})
  find_library(PB_NCCL_LIBRARY nccl HINTS /usr/local/lib ${CUDAToolkit_LIBRARY_DIR})
  if(PB_NCCL_INCLUDE_DIR AND PB_NCCL_LIBRARY)
    set(PB_HAVE_NCCL ON)
  endif()
endif()
message(STATUS "parabench: NCCL backend=${PB_HAVE_NCCL}")

if(PB_HAVE_NCCL)
  parabench_library(NAME pb_harness_nccl ALIAS pb::harness_nccl
    SOURCES comm_nccl.cc
    DEPS pb::harness_mpi CUDA::cudart ${PB_NCCL_LIBRARY})
  target_include_directories(pb_harness_nccl PRIVATE ${PB_NCCL_INCLUDE_DIR})
  list(APPEND PB_COMM_DEPS pb::harness_nccl)
else()
  list(APPEND PB_COMM_SOURCES comm_nccl_off.cc)
endif()

parabench_library(NAME pb_comm ALIAS pb::comm SOURCES ${PB_COMM_SOURCES} DEPS ${PB_COMM_DEPS})

# Conformance checker shared by the local, mpi and nccl tests.
if(PARABENCH_BUILD_TESTS)
  parabench_library(NAME pb_comm_testing ALIAS pb::comm_testing SOURCES comm_testing.cc DEPS pb::harness)
endif()

parabench_test(NAME harness_mesh_test SOURCES mesh_test.cc DEPS pb::harness TIMEOUT 60)
parabench_test(NAME harness_comm_log_test SOURCES comm_log_test.cc DEPS pb::harness TIMEOUT 60)
parabench_test(NAME harness_comm_local_test SOURCES comm_local_test.cc DEPS pb::harness pb::comm_testing TIMEOUT 120)
parabench_test(NAME harness_runner_test SOURCES runner_test.cc DEPS pb::comm TIMEOUT 60)

# mpi: one test binary with its own main (MPI lives as long as the process),
# run under mpirun at several world sizes; each run also covers sub-groups.
if(PARABENCH_HAVE_MPI AND PARABENCH_BUILD_TESTS)
  add_executable(harness_comm_mpi_test comm_mpi_test.cc)
  target_link_libraries(harness_comm_mpi_test PRIVATE pb::comm pb::comm_testing GTest::gtest)
  parabench_warnings(harness_comm_mpi_test)
  foreach(np 1 2 3 5 8)  # np 8 also covers sub-groups of every size 1..8
    parabench_mpi_test(NAME harness_comm_mpi_np${np} NP ${np} TIMEOUT 120
      COMMAND $<TARGET_FILE:harness_comm_mpi_test>)
  endforeach()
  parabench_mpi_test(NAME harness_comm_mpi_np4_2nodes NP 4 TIMEOUT 120
    COMMAND $<TARGET_FILE:harness_comm_mpi_test> --ranks-per-node 2)
endif()

# nccl: runs only where GPUs are present; elsewhere exits 77 with the reason,
# which ctest reports as skipped.
if(PB_HAVE_NCCL AND PARABENCH_BUILD_TESTS)
  add_executable(harness_comm_nccl_test comm_nccl_test.cc)
  target_link_libraries(harness_comm_nccl_test PRIVATE pb::comm pb::comm_testing GTest::gtest)
  parabench_warnings(harness_comm_nccl_test)
  parabench_mpi_test(NAME harness_comm_nccl_np2 NP 2 TIMEOUT 120 COMMAND $<TARGET_FILE:harness_comm_nccl_test>)
  set_tests_properties(harness_comm_nccl_np2 PROPERTIES SKIP_RETURN_CODE 77)
endif()

parabench_benchmark(NAME comm_benchmark SOURCES comm_benchmark.cc DEPS pb::harness)
if(PARABENCH_HAVE_MPI AND PARABENCH_BUILD_BENCHMARKS)
  add_executable(mpi_allreduce_baseline mpi_allreduce_baseline.cc)
  target_link_libraries(mpi_allreduce_baseline PRIVATE pb::comm MPI::MPI_CXX)
  parabench_warnings(mpi_allreduce_baseline)
endif()
