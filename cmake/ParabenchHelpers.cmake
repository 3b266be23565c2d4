# One helper per kind of target. Every target gets the project's warnings.

function(parabench_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wno-unused-parameter>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${PARABENCH_WERROR}>>:-Werror>)
endfunction()

# parabench_library(NAME name ALIAS ns::name SOURCES ... DEPS ...)
function(parabench_library)
  cmake_parse_arguments(A "" "NAME;ALIAS" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${A_NAME} STATIC ${A_SOURCES})
  add_library(${A_ALIAS} ALIAS ${A_NAME})
  target_include_directories(${A_NAME} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${A_NAME} PUBLIC ${A_DEPS} PRIVATE ${A_PRIVATE_DEPS})
  parabench_warnings(${A_NAME})
endfunction()

# parabench_test(NAME name SOURCES ... DEPS ... [LABELS ...] [TIMEOUT s] [ARGS ...])
function(parabench_test)
  if(NOT PARABENCH_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(A "" "NAME;TIMEOUT" "SOURCES;DEPS;LABELS;ARGS" ${ARGN})
  add_executable(${A_NAME} ${A_SOURCES})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} GTest::gtest GTest::gtest_main)
  parabench_warnings(${A_NAME})
  add_test(NAME ${A_NAME} COMMAND ${A_NAME} ${A_ARGS})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  set_tests_properties(${A_NAME} PROPERTIES TIMEOUT ${A_TIMEOUT} LABELS "unit;${A_LABELS}")
endfunction()

# parabench_mpi_test(NAME name NP n COMMAND exe args...): runs under mpirun.
# --oversubscribe lets 4+ ranks share 2 cores; --allow-run-as-root because CI
# and containers run as root (Open MPI refuses otherwise).
function(parabench_mpi_test)
  if(NOT PARABENCH_HAVE_MPI OR NOT PARABENCH_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(A "" "NAME;NP;TIMEOUT" "COMMAND" ${ARGN})
  add_test(NAME ${A_NAME}
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${A_NP}
            --oversubscribe --allow-run-as-root --bind-to none
            ${MPIEXEC_PREFLAGS} ${A_COMMAND} ${MPIEXEC_POSTFLAGS})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  set_tests_properties(${A_NAME} PROPERTIES TIMEOUT ${A_TIMEOUT} LABELS "mpi"
    ENVIRONMENT "OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_btl_vader_single_copy_mechanism=none")
endfunction()

# parabench_benchmark(NAME name SOURCES ... DEPS ...)
function(parabench_benchmark)
  if(NOT PARABENCH_BUILD_BENCHMARKS)
    return()
  endif()
  cmake_parse_arguments(A "" "NAME" "SOURCES;DEPS" ${ARGN})
  add_executable(${A_NAME} ${A_SOURCES})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} benchmark::benchmark)
  parabench_warnings(${A_NAME})
endfunction()
