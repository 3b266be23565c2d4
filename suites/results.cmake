# results: the analytic planner (parabench plan), the regression gate
# (parabench gate) and the report (parabench report -> scripts/report.py).
parabench_library(NAME pb_planner ALIAS pb::planner
  SOURCES planner/model_cost.cc planner/planner.cc planner/plan_output.cc
  DEPS pb::data_parallel pb::pipeline pb::reference pb::harness)
parabench_test(NAME planner_test SOURCES planner/planner_test.cc DEPS pb::planner TIMEOUT 120)

list(APPEND PB_CLI_SOURCES cli/cmd_plan.cc)
list(APPEND PB_CLI_DEPS pb::planner)
