# End-to-end tests of the lead's commands through the binary.
if(PARABENCH_BUILD_TESTS)
  add_test(NAME cli_train_export_test
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/cli/cli_train_test.py
                   $<TARGET_FILE:parabench> ${CMAKE_CURRENT_BINARY_DIR}/cli_train_work)
  set_tests_properties(cli_train_export_test PROPERTIES TIMEOUT 300 LABELS "cli")
endif()
