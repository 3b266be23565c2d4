# pipeline conformance: the pipeline executor (impl/pipeline) under the
# conformance engine's rule, composed with DDP / ZeRO-1.
parabench_library(NAME pb_pipeline_conformance ALIAS pb::pipeline_conformance
  SOURCES conformance/pipeline_engine.cc
  DEPS pb::conformance pb::pipeline pb::reference pb::harness)
parabench_test(NAME conformance_pipeline_test SOURCES conformance/pipeline_conformance_test.cc
               DEPS pb::pipeline_conformance TIMEOUT 300)
list(APPEND PB_CLI_DEPS pb::pipeline_conformance)

# One pipeline config per world under mpirun (mpi backend, one process per rank).
if(PARABENCH_HAVE_MPI AND PARABENCH_BUILD_TESTS)
  add_executable(conformance_pipeline_mpi_test conformance/pipeline_conformance_mpi_test.cc)
  target_link_libraries(conformance_pipeline_mpi_test PRIVATE pb::pipeline_conformance pb::comm GTest::gtest)
  parabench_warnings(conformance_pipeline_mpi_test)
  foreach(np 2 4)
    parabench_mpi_test(NAME conformance_pipeline_mpi_np${np} NP ${np} TIMEOUT 120
      COMMAND $<TARGET_FILE:conformance_pipeline_mpi_test>)
  endforeach()
endif()

# The teeth: every injected fault (data parallel and pipeline) at every
# precision, and the checks that catch it; teeth_table prints the README table.
parabench_library(NAME pb_teeth ALIAS pb::teeth
  SOURCES conformance/teeth.cc
  DEPS pb::pipeline_conformance pb::conformance)
parabench_test(NAME conformance_teeth_test SOURCES conformance/teeth_test.cc
               DEPS pb::teeth TIMEOUT 900)
add_executable(teeth_table conformance/teeth_table.cc)
target_link_libraries(teeth_table PRIVATE pb::teeth)
parabench_warnings(teeth_table)
