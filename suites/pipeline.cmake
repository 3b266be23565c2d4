# pipeline: `parabench schedule` (suites/cli/cmd_schedule.cc) over impl/pipeline,
# and its exit-code tests: 0 on good configs, 2 (InputError) on bad flags.
list(APPEND PB_CLI_SOURCES cli/cmd_schedule.cc)
list(APPEND PB_CLI_DEPS pb::pipeline)

if(PARABENCH_BUILD_TESTS)
  # cli_schedule_<name>: runs `parabench schedule <args>` and passes iff the exit code is `rc`.
  function(pb_schedule_cli_test name rc)
    add_test(NAME cli_schedule_${name}
      COMMAND sh -c "\"$0\" schedule \"$@\" >/dev/null 2>&1; test $? -eq ${rc}" $<TARGET_FILE:parabench> ${ARGN})
    set_tests_properties(cli_schedule_${name} PROPERTIES TIMEOUT 60 LABELS "cli")
  endfunction()
  pb_schedule_cli_test(gpipe 0 --pp 4 --microbatches 8 --schedule gpipe)
  pb_schedule_cli_test(1f1b_few_microbatches 0 --pp 4 --microbatches 2 --schedule 1f1b)
  pb_schedule_cli_test(interleaved 0 --pp 4 --microbatches 8 --schedule interleaved --virtual-stages 2)
  pb_schedule_cli_test(zb_h1_costs 0 --pp 4 --microbatches 8 --schedule zb-h1 --costs 2,2,1 --p2p 0.1)
  pb_schedule_cli_test(2bw 0 --pp 3 --microbatches 3 --schedule 2bw --steps 3 --width 80)
  pb_schedule_cli_test(interleaved_nccl 0 --pp 4 --microbatches 8 --schedule interleaved --virtual-stages 2 --transport nccl)
  pb_schedule_cli_test(bad_transport 2 --pp 2 --microbatches 4 --schedule 1f1b --transport ucx)
  pb_schedule_cli_test(pp_zero 2 --pp 0 --microbatches 8 --schedule 1f1b)
  pb_schedule_cli_test(unknown_schedule 2 --pp 2 --microbatches 4 --schedule foo)
  pb_schedule_cli_test(interleaved_not_divisible 2 --pp 4 --microbatches 6 --schedule interleaved --virtual-stages 2)
  pb_schedule_cli_test(zb_h1_too_few 2 --pp 4 --microbatches 3 --schedule zb-h1)
  pb_schedule_cli_test(virtual_on_1f1b 2 --pp 2 --microbatches 4 --schedule 1f1b --virtual-stages 2)
  pb_schedule_cli_test(bad_costs 2 --pp 2 --microbatches 4 --schedule 1f1b --costs 1,x,1)
  pb_schedule_cli_test(missing_flag 2 --pp 2 --schedule 1f1b)
  pb_schedule_cli_test(negative_width 2 --pp 2 --microbatches 4 --schedule 1f1b --width -3)
  # The CSV the report plots: header and one row per compute action (4 ranks x 8 x F, BW).
  add_test(NAME cli_schedule_csv
    COMMAND sh -c "rm -f \"$1\" && \"$0\" schedule --pp 4 --microbatches 8 --schedule 1f1b --csv \"$1\" >/dev/null &&
                   test \"$(head -n 1 \"$1\")\" = rank,action,microbatch,chunk,start,end &&
                   test \"$(wc -l < \"$1\")\" -eq 65 && test ! -e \"$1.tmp\""
            $<TARGET_FILE:parabench> ${CMAKE_CURRENT_BINARY_DIR}/cli_schedule_test.csv)
  set_tests_properties(cli_schedule_csv PROPERTIES TIMEOUT 60 LABELS "cli")
endif()
