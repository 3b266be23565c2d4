# results: the analytic planner (parabench plan), the regression gate
# (parabench gate) and the report (parabench report -> scripts/report.py).
parabench_library(NAME pb_planner ALIAS pb::planner
  SOURCES planner/model_cost.cc planner/planner.cc planner/planner_memory.cc planner/planner_comm.cc
          planner/planner_time.cc planner/plan_input.cc planner/plan_output.cc planner/preflight.cc planner/machine.cc
  DEPS pb::spec pb::data_parallel pb::expert_parallel pb::pipeline pb::tensor_parallel pb::reference pb::harness)
parabench_test(NAME planner_flops_test SOURCES planner/planner_flops_test.cc DEPS pb::planner pb::comm TIMEOUT 120)
parabench_test(NAME planner_memory_test SOURCES planner/planner_memory_test.cc DEPS pb::planner pb::comm TIMEOUT 120)
parabench_test(NAME planner_time_test SOURCES planner/planner_time_test.cc DEPS pb::planner pb::comm TIMEOUT 120)
parabench_test(NAME planner_input_test SOURCES planner/plan_input_test.cc DEPS pb::planner TIMEOUT 60)
parabench_test(NAME planner_machine_test SOURCES planner/machine_test.cc DEPS pb::planner pb::comm TIMEOUT 120)
parabench_test(NAME planner_llama_test SOURCES planner/planner_llama_test.cc DEPS pb::planner TIMEOUT 60)
parabench_test(NAME planner_tp_overlap_test SOURCES planner/planner_tp_overlap_test.cc DEPS pb::planner TIMEOUT 60)
parabench_test(NAME planner_moe_test SOURCES planner/planner_moe_test.cc DEPS pb::planner pb::strategies pb::comm TIMEOUT 60
               ARGS --gtest_filter=-PlannerMoe.SpCpRecomputeAndZbH1StagesAreTheRanks:PlannerMoe.LlamaStagesAreTheRanks:PlannerMoe.LlamaSpCpRecomputeAreTheRanks)
if(TARGET planner_moe_test)
  # The MoE stages with sp, cp, recompute and zb-h1, and the llama family's
  # MoE in stages and under sp, cp, recompute (~5 s: label full).
  add_test(NAME planner_moe_stages_test COMMAND planner_moe_test
           --gtest_filter=PlannerMoe.SpCpRecomputeAndZbH1StagesAreTheRanks:PlannerMoe.LlamaStagesAreTheRanks:PlannerMoe.LlamaSpCpRecomputeAreTheRanks)
  set_tests_properties(planner_moe_stages_test PROPERTIES TIMEOUT 120 LABELS "unit;full")
endif()

parabench_library(NAME pb_report ALIAS pb::report
  SOURCES report/gate.cc report/validate.cc
  DEPS pb::harness nlohmann_json::nlohmann_json)
parabench_test(NAME report_gate_test SOURCES report/gate_test.cc DEPS pb::report TIMEOUT 120)
parabench_test(NAME report_validate_test SOURCES report/validate_test.cc DEPS pb::report pb::pipeline TIMEOUT 60)
if(TARGET report_validate_test)
  target_compile_definitions(report_validate_test PRIVATE PARABENCH_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endif()

list(APPEND PB_CLI_SOURCES cli/cmd_plan.cc cli/cmd_report.cc cli/cmd_gate.cc cli/cmd_validate.cc)
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

# The whole default job once (parabench run --quick, ~90 s: the sweep 25 s, the
# report 35 s): every CSV of its
# run directory passes `parabench validate`, every sweep point has its plan row
# and the report shows the planner-vs-measured table. The CI gate then compares
# that same run directory with the committed baseline (results/baselines/).
if(PARABENCH_BUILD_TESTS)
  # A space and a quote in the path: parts run without a shell in between.
  set(PB_RUN_WORK "${CMAKE_CURRENT_BINARY_DIR}/results_run_work it's")
  add_test(NAME results_run_csv
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/report/run_csv_test.py run
                   $<TARGET_FILE:parabench> ${PB_RUN_WORK})
  add_test(NAME results_gate_default
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/report/run_csv_test.py gate
                   $<TARGET_FILE:parabench> ${PB_RUN_WORK} ${PROJECT_SOURCE_DIR}/results/baselines/default)
  # RUN_SERIAL: the run's throughput figures are gated; other tests running
  # beside it on 2 cores would cut them several-fold.
  set_tests_properties(results_run_csv PROPERTIES TIMEOUT 900 LABELS "cli" FIXTURES_SETUP results_run
                       RUN_SERIAL TRUE)
  set_tests_properties(results_gate_default PROPERTIES TIMEOUT 120 LABELS "cli" FIXTURES_REQUIRED results_run)
  # scripts/report.py on hostile-but-valid CSVs and a 200k-row sweep (within 60 s CPU and 1 GiB).
  add_test(NAME report_py COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/report/report_py_test.py
                                  ${CMAKE_CURRENT_BINARY_DIR}/report_py_work)
  # `full`: its 200k-row case costs half a minute; the quick suite's report is results_run_csv's.
  set_tests_properties(report_py PROPERTIES TIMEOUT 300 LABELS "cli;full")
endif()
