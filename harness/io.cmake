# io: RNG, config, CSV, results schema, safetensors, timers, run metadata.
# results/schema.json is compiled into the library (ResultsSchema::builtin()),
# so binaries validate rows without finding the source tree; editing the JSON
# re-runs configure.
set(PB_SCHEMA_JSON_FILE ${PROJECT_SOURCE_DIR}/results/schema.json)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PB_SCHEMA_JSON_FILE})
file(READ ${PB_SCHEMA_JSON_FILE} PB_SCHEMA_JSON)
configure_file(schema_builtin.cc.in ${CMAKE_CURRENT_BINARY_DIR}/schema_builtin.cc @ONLY)

# The git revision at configure time (read-only rev-parse); "unknown" outside a
# repository or before the first commit.
execute_process(COMMAND git rev-parse --short=12 HEAD
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
  OUTPUT_VARIABLE PB_GIT_REV OUTPUT_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE PB_GIT_RESULT ERROR_QUIET)
if(NOT PB_GIT_RESULT EQUAL 0 OR PB_GIT_REV STREQUAL "")
  set(PB_GIT_REV unknown)
endif()
set_source_files_properties(run_meta.cc PROPERTIES COMPILE_DEFINITIONS "PB_GIT_REV=\"${PB_GIT_REV}\"")

target_sources(pb_harness PRIVATE
  rng.cc config.cc csv.cc csv_schema.cc safetensors.cc run_meta.cc
  ${CMAKE_CURRENT_BINARY_DIR}/schema_builtin.cc)

parabench_test(NAME harness_rng_test SOURCES rng_test.cc DEPS pb::harness TIMEOUT 60)
parabench_test(NAME harness_config_test SOURCES config_test.cc DEPS pb::harness TIMEOUT 60)
parabench_test(NAME harness_csv_test SOURCES csv_test.cc DEPS pb::harness TIMEOUT 60)
parabench_test(NAME harness_csv_schema_test SOURCES csv_schema_test.cc DEPS pb::harness TIMEOUT 60)
parabench_test(NAME harness_run_meta_test SOURCES run_meta_test.cc DEPS pb::harness TIMEOUT 60)
parabench_test(NAME harness_safetensors_test SOURCES safetensors_test.cc DEPS pb::harness TIMEOUT 60)
parabench_test(NAME harness_timer_test SOURCES timer_test.cc DEPS pb::harness TIMEOUT 60)
if(TARGET harness_csv_schema_test)
  target_compile_definitions(harness_csv_schema_test PRIVATE
    PB_SCHEMA_JSON_PATH="${PB_SCHEMA_JSON_FILE}"
    PB_SCHEMA_MD_PATH="${PROJECT_SOURCE_DIR}/results/SCHEMA.md")
endif()
if(TARGET harness_safetensors_test)
  target_compile_definitions(harness_safetensors_test PRIVATE
    PB_SAFETENSORS_CHECK_PY="${CMAKE_CURRENT_SOURCE_DIR}/safetensors_check.py")
endif()
