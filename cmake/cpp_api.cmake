# The C++ API for libtorch users (csrc/cpp_api): grouped_linear::GroupedLinear
# and ::Linear as torch::nn modules, on gl_torch; its example program and its
# host-overhead benchmark.
add_library(gl_cpp_api STATIC csrc/cpp_api/grouped_linear.cpp)
target_include_directories(gl_cpp_api PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/csrc/cpp_api/include)
target_link_libraries(gl_cpp_api PUBLIC gl_torch)
target_compile_options(gl_cpp_api PRIVATE $<$<CXX_COMPILER_ID:GNU,Clang>:-Wall -Wextra>)

add_executable(gl_train_experts examples/cpp/train_experts.cpp)
target_link_libraries(gl_train_experts PRIVATE gl_cpp_api)
# Executables find torch's shared libraries (and cuBLAS) without LD_LIBRARY_PATH.
get_property(gl_rpath GLOBAL PROPERTY GL_RUNTIME_LIBRARY_DIRS)
set(GL_CPP_API_RPATH "${GL_TORCH_LIBDIR};${gl_rpath}")
set_target_properties(gl_train_experts PROPERTIES BUILD_RPATH "${GL_CPP_API_RPATH}"
                                                  OUTPUT_NAME train_experts)

# Host cost per call of the C++ API (no Python): bench/cpp/host_overhead.cpp.
add_executable(gl_host_overhead bench/cpp/host_overhead.cpp)
target_link_libraries(gl_host_overhead PRIVATE gl_cpp_api)
set_target_properties(gl_host_overhead PROPERTIES BUILD_RPATH "${GL_CPP_API_RPATH}"
                                                  OUTPUT_NAME host_overhead)

# A plain `pip install .` builds the extension only; the C++ API is built when
# asked for, with the C++ tests (CI), or by a CMake build of its own.
if(GL_BUILD_CPP_API STREQUAL "AUTO" AND GL_BUILD_PYTHON AND NOT GL_BUILD_TESTS)
  set_target_properties(gl_cpp_api gl_train_experts gl_host_overhead PROPERTIES
                        EXCLUDE_FROM_ALL TRUE)
endif()
