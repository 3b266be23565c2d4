# results: the analytic planner (parabench plan), the regression gate
# (parabench gate) and the report (parabench report -> scripts/report.py).
parabench_library(NAME pb_planner ALIAS pb::planner
  SOURCES planner/model_cost.cc planner/planner.cc planner/plan_output.cc
  DEPS pb::data_parallel pb::pipeline pb::reference pb::harness)
parabench_test(NAME planner_test SOURCES planner/planner_test.cc DEPS pb::planner TIMEOUT 120)

parabench_library(NAME pb_report ALIAS pb::report
  SOURCES report/gate.cc
  DEPS pb::harness)
parabench_test(NAME report_gate_test SOURCES report/gate_test.cc DEPS pb::report TIMEOUT 120)

list(APPEND PB_CLI_SOURCES cli/cmd_plan.cc cli/cmd_report.cc cli/cmd_gate.cc)
list(APPEND PB_CLI_DEPS pb::planner pb::report)
set_source_files_properties(cli/cmd_report.cc PROPERTIES
  COMPILE_DEFINITIONS "PARABENCH_SOURCE_DIR=\"${PROJECT_SOURCE_DIR}\"")

# End to end through the binary: plan at 1T scale, flags -> exit codes, gate on
# doctored fixture CSVs, report PNGs + HTML (scripts/report_fixture.py).
parabench_test(NAME results_cli_test SOURCES report/results_cli_test.cc DEPS pb::harness TIMEOUT 300)
if(TARGET results_cli_test)
  add_dependencies(results_cli_test parabench)
  target_compile_definitions(results_cli_test PRIVATE
    PARABENCH_EXE="$<TARGET_FILE:parabench>"
    PARABENCH_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    RESULTS_CLI_TEST_DIR="${CMAKE_CURRENT_BINARY_DIR}/results_cli_work")
endif()
