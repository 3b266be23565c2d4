# sweep: throughput / memory / communication scaling of the strategies
# (parabench sweep), one sweep row per point.
parabench_library(NAME pb_sweep ALIAS pb::sweep
  SOURCES sweep/sweep_config.cc sweep/sweep_point.cc sweep/sweep_rows.cc sweep/shape_step.cc sweep/sweep_plan.cc
          sweep/sweep.cc sweep/reliability.cc
  DEPS pb::calibrate pb::planner pb::strategies pb::data_parallel pb::reference pb::harness pb::kernels_cpu)
parabench_test(NAME sweep_test SOURCES sweep/sweep_test.cc sweep/sweep_plan_test.cc DEPS pb::sweep TIMEOUT 600
               ARGS --gtest_filter=-Sweep.ResumeReplacesTheExtrapolatedRows)
# Its slowest case (a sweep with extrapolated rows run, killed and resumed:
# ~15 s alone) in the full command, so the quick suite keeps its 12 minutes.
if(TARGET sweep_test)
  add_test(NAME sweep_test_resume_extrapolated COMMAND sweep_test --gtest_filter=Sweep.ResumeReplacesTheExtrapolatedRows)
  set_tests_properties(sweep_test_resume_extrapolated PROPERTIES TIMEOUT 600 LABELS "unit;full")
endif()
parabench_test(NAME sweep_reliability_test SOURCES sweep/reliability_test.cc DEPS pb::sweep TIMEOUT 60)

list(APPEND PB_CLI_SOURCES cli/cmd_sweep.cc)
list(APPEND PB_CLI_DEPS pb::sweep)

# Through the binary: an unknown [sweep] key exits 2; a SIGKILLed sweep leaves
# no partial row and --resume completes it without duplicates.
if(PARABENCH_BUILD_TESTS)
  set(PB_SWEEP_WORK ${CMAKE_CURRENT_BINARY_DIR}/sweep_cli_work)
  file(WRITE ${PB_SWEEP_WORK}/bad_key.toml "[sweep]\nworlds = [1]\nstratgies = [\"shard=none\"]\n")
  add_test(NAME sweep_cli_unknown_key
           COMMAND /bin/sh -c "\"$0\" sweep --config \"$1\" --out \"$2\"; test $? -eq 2"
                   $<TARGET_FILE:parabench> ${PB_SWEEP_WORK}/bad_key.toml ${PB_SWEEP_WORK}/out)
  # Issue #50, class 3: 2e9 sequences per rank at dp2 wrapped to a negative global batch.
  file(WRITE ${PB_SWEEP_WORK}/batch_overflow.toml "[sweep]\nworlds = [1, 2]\nbatch_per_rank = 2000000000\n")
  add_test(NAME sweep_cli_batch_overflow
           COMMAND /bin/sh -c "\"$0\" sweep --config \"$1\" --out \"$2\" 2>&1 | grep -F 'sweep.batch_per_rank x the largest dp = 2000000000 x 2'; test $? -eq 0 && { \"$0\" sweep --config \"$1\" --out \"$2\" >/dev/null 2>&1; test $? -eq 2; }"
                   $<TARGET_FILE:parabench> ${PB_SWEEP_WORK}/batch_overflow.toml ${PB_SWEEP_WORK}/out)
  add_test(NAME sweep_cli_kill_resume
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/sweep/sweep_kill_test.py
                   $<TARGET_FILE:parabench> ${PB_SWEEP_WORK}/kill)
  add_test(NAME sweep_cli_kill_resume_rounds
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/sweep/sweep_kill_test.py
                   $<TARGET_FILE:parabench> ${PB_SWEEP_WORK}/kill_rounds 2)
  set_tests_properties(sweep_cli_unknown_key sweep_cli_batch_overflow sweep_cli_kill_resume
                       sweep_cli_kill_resume_rounds PROPERTIES TIMEOUT 120 LABELS "cli")
  # The report on a sweep with a row marked unreliable, and on a schema-1 sweep CSV.
  add_test(NAME sweep_report_unreliable
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/sweep/report_unreliable_test.py
                   $<TARGET_FILE:parabench> ${PB_SWEEP_WORK}/report_unreliable)
  set_tests_properties(sweep_report_unreliable PROPERTIES TIMEOUT 300 LABELS "cli")
endif()

# Under mpirun (the script runs mpirun itself: it also runs the local sweep it
# compares with, and the error paths).
if(PARABENCH_BUILD_TESTS AND PARABENCH_HAVE_MPI)
  add_test(NAME sweep_mpi_np2
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/sweep/sweep_mpi_test.py
                   $<TARGET_FILE:parabench> ${MPIEXEC_EXECUTABLE} ${CMAKE_CURRENT_BINARY_DIR}/sweep_mpi_work)
  set_tests_properties(sweep_mpi_np2 PROPERTIES TIMEOUT 600 LABELS "mpi"
    ENVIRONMENT "OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_btl_vader_single_copy_mechanism=none")
endif()
