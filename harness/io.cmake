# io: RNG, config, CSV, results schema, safetensors, timers, run metadata.
# results/schema.json is compiled into the library (ResultsSchema::builtin()),
# so binaries validate rows without finding the source tree; editing the JSON
# re-runs configure.
set(PB_SCHEMA_JSON_FILE ${PROJECT_SOURCE_DIR}/results/schema.json)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PB_SCHEMA_JSON_FILE})
file(READ ${PB_SCHEMA_JSON_FILE} PB_SCHEMA_JSON)
configure_file(schema_builtin.cc.in ${CMAKE_CURRENT_BINARY_DIR}/schema_builtin.cc @ONLY)

# The git revision of the build, refreshed by every build (a commit after
# configuring still shows), "-dirty" when tracked files have changes.
set(PB_GIT_REV_HEADER ${CMAKE_CURRENT_BINARY_DIR}/generated/pb_git_rev.h)
add_custom_target(pb_git_rev
  COMMAND ${CMAKE_COMMAND} -DSRC=${PROJECT_SOURCE_DIR} -DOUT=${PB_GIT_REV_HEADER}
          -P ${PROJECT_SOURCE_DIR}/cmake/git_rev.cmake
  BYPRODUCTS ${PB_GIT_REV_HEADER}
  COMMENT "git revision"
  VERBATIM)
add_dependencies(pb_harness pb_git_rev)
target_include_directories(pb_harness PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/generated)

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
