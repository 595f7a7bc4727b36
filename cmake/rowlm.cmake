# Shared build settings and the one way a module is declared.

set(ROWLM_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-missing-field-initializers
    -Wno-restrict)  # GCC 12 reports false -Wrestrict positives inside std::string

if(ROWLM_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=address,undefined)
endif()

# Options for the test binaries' own sources. Test code needs little
# optimisation: -O1 (after the build type's flags, so it wins) keeps the many
# test files cheap to compile. Under the sanitizers the test files are about
# half of the build's compile time and UBSan's checks of gtest's macros most of
# that, so there they are built at -O0 with AddressSanitizer alone: the code
# under test (the libraries, and what the tests call in them) keeps -O1 and
# both sanitizers.
if(ROWLM_SANITIZE)
  set(ROWLM_TEST_OPTIONS -O0 -fno-sanitize=undefined)
else()
  set(ROWLM_TEST_OPTIONS -O1)
endif()

# Per-ISA translation units: a kernel file named *_avx512.cc, *_avx512bf16.cc,
# *_avx512vnni.cc, *_amx.cc or *_avx2.cc is compiled for that instruction set only; callers pick one at
# run time.
# -ffp-contract=off: with FMA enabled GCC would otherwise fuse a*b+c (even
# written with intrinsics) where it likes, so ISA paths would round differently
# from each other and from the portable path; kernels ask for FMA explicitly.
set(ROWLM_AVX512_FLAGS -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c -mbmi2 -ffp-contract=off)
set(ROWLM_AVX512BF16_FLAGS ${ROWLM_AVX512_FLAGS} -mavx512bf16)
set(ROWLM_AVX512VNNI_FLAGS ${ROWLM_AVX512_FLAGS} -mavx512vnni)
set(ROWLM_AVX2_FLAGS -mavx2 -mfma -mf16c -mbmi2 -ffp-contract=off)
set(ROWLM_AMX_FLAGS ${ROWLM_AVX512_FLAGS} -mamx-tile -mamx-bf16)

# rowlm_module(NAME DEPS dep...) declares the static library rowlm_NAME from
# every *.cc in the current folder (not its subfolders: a subfolder with its own
# CMakeLists.txt is a module of its own), and the test binary NAME_tests from every
# *_test.cc beside them. Tests are registered with CTest.
function(rowlm_module name)
  cmake_parse_arguments(M "" "" "DEPS;TEST_DEPS" ${ARGN})
  file(GLOB all_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  set(sources "")
  set(tests "")
  foreach(f IN LISTS all_sources)
    if(f MATCHES "_test\\.cc$")
      list(APPEND tests ${f})
    else()
      list(APPEND sources ${f})
    endif()
    # A per-ISA file keeps its own translation unit (and flags) in unity builds.
    if(f MATCHES "_(avx512|avx512bf16|avx512vnni|amx|avx2)\\.cc$")
      set_source_files_properties(${f} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
    if(f MATCHES "_avx512\\.cc$")
      set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "${ROWLM_AVX512_FLAGS}")
    elseif(f MATCHES "_avx512bf16\\.cc$")
      set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "${ROWLM_AVX512BF16_FLAGS}")
    elseif(f MATCHES "_avx512vnni\\.cc$")
      set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "${ROWLM_AVX512VNNI_FLAGS}")
    elseif(f MATCHES "_avx2\\.cc$")
      set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "${ROWLM_AVX2_FLAGS}")
    elseif(f MATCHES "_amx\\.cc$")
      set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "${ROWLM_AMX_FLAGS}")
    endif()
  endforeach()
  if(sources)
    add_library(rowlm_${name} STATIC ${sources})
    target_link_libraries(rowlm_${name} PUBLIC ${M_DEPS})
  else()
    add_library(rowlm_${name} INTERFACE)
    target_link_libraries(rowlm_${name} INTERFACE ${M_DEPS})
  endif()
  if(sources)
    target_include_directories(rowlm_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
    target_compile_options(rowlm_${name} PRIVATE ${ROWLM_WARNINGS})
  else()
    target_include_directories(rowlm_${name} INTERFACE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
  endif()
  if(ROWLM_TESTS AND tests)
    add_executable(${name}_tests ${tests})
    target_link_libraries(${name}_tests PRIVATE rowlm_${name} ${M_TEST_DEPS} GTest::gtest GTest::gtest_main)
    target_compile_options(${name}_tests PRIVATE ${ROWLM_WARNINGS} ${ROWLM_TEST_OPTIONS})
    target_compile_definitions(${name}_tests PRIVATE
      ROWLM_SOURCE_DIR="${PROJECT_SOURCE_DIR}" ROWLM_BINARY_DIR="${PROJECT_BINARY_DIR}")
    gtest_discover_tests(${name}_tests DISCOVERY_MODE PRE_TEST
      PROPERTIES ENVIRONMENT "ROWLM_SOURCE_DIR=${PROJECT_SOURCE_DIR}" LABELS unit)
  endif()
endfunction()
