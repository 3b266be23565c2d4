# conformance: the numerics rule (compare), the engine, the check matrix.
parabench_library(NAME pb_conformance ALIAS pb::conformance
  SOURCES conformance/compare.cc conformance/engine.cc
  DEPS pb::data_parallel pb::reference pb::harness)
parabench_test(NAME conformance_compare_test SOURCES conformance/compare_test.cc DEPS pb::conformance)
parabench_test(NAME conformance_dp_test SOURCES conformance/dp_conformance_test.cc
               DEPS pb::conformance TIMEOUT 900)

list(APPEND PB_CLI_SOURCES cli/cmd_check.cc cli/cmd_run.cc)
set_source_files_properties(cli/cmd_run.cc PROPERTIES
  COMPILE_DEFINITIONS "PARABENCH_SOURCE_DIR=\"${PROJECT_SOURCE_DIR}\"")
list(APPEND PB_CLI_DEPS pb::conformance)
