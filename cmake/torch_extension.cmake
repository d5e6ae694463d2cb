# The Python extension grouped_linear._C: the pybind11 face of the torch
# binding, on gl_torch (cmake/torch.cmake, included first).
set(GL_EXT_SOURCES
  csrc/torch_binding/fp8_bindings.cpp
  csrc/torch_binding/fp8_gemm_ops.cpp
  csrc/torch_binding/fp8_state_python.cpp
  csrc/torch_binding/op_registration.cpp
  csrc/torch_binding/python_module.cpp)
set(GL_EXT_LIBS gl_torch torch_python)
set(GL_EXT_WITH_CUDA ${GL_TORCH_HAS_CUDA})

Python_add_library(_C MODULE WITH_SOABI ${GL_EXT_SOURCES})
# The C++ runtime should be the shared libstdc++ that torch uses, so it is
# named explicitly. On the H200 machine (its g++ is a wrapper that adds the
# gcc library folder with -B) _C.so still ended up with about 4,600 libstdc++
# symbols of its own, with or without this line; streaming a number through
# that copy segfaulted, which is why core/error.h formats messages without
# iostreams. Finding what pulls libstdc++.a in there is still open.
execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so
                OUTPUT_VARIABLE GL_LIBSTDCXX OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT IS_ABSOLUTE "${GL_LIBSTDCXX}" OR NOT EXISTS "${GL_LIBSTDCXX}")
  find_library(GL_LIBSTDCXX NAMES libstdc++.so.6 stdc++)
endif()
if(GL_LIBSTDCXX)
  message(STATUS "grouped_linear: C++ runtime ${GL_LIBSTDCXX}")
  target_link_libraries(_C PRIVATE "${GL_LIBSTDCXX}")
endif()
target_link_libraries(_C PRIVATE ${GL_EXT_LIBS})
# torch's pybind11 ABI flags are not passed by default: without them our module
# keeps its own pybind11 internals instead of sharing torch._C's. On torch 2.11
# (CUDA) a C++ exception crossing the shared translator registry crashed the
# interpreter; python_module.cpp also converts every exception itself.
# Tensors cross through torch's own type casters, which need no shared
# internals. GL_SHARE_PYBIND_INTERNALS=ON passes the flags anyway.
option(GL_SHARE_PYBIND_INTERNALS "Build _C with torch's pybind11 ABI flags" OFF)
target_compile_definitions(_C PRIVATE TORCH_EXTENSION_NAME=_C TORCH_API_INCLUDE_EXTENSION_H)
if(GL_SHARE_PYBIND_INTERNALS)
  target_compile_definitions(_C PRIVATE ${GL_PYBIND_FLAGS})
endif()
target_compile_options(_C PRIVATE -O2 -fvisibility=hidden)
if(GL_EXT_WITH_CUDA)
  target_compile_definitions(_C PRIVATE GL_WITH_CUDA)
endif()
# torch's libraries are found through the torch package next to us at run time
# (torch is imported first), cuBLAS through its wheel or the toolkit.
get_property(gl_rpath GLOBAL PROPERTY GL_RUNTIME_LIBRARY_DIRS)
set_target_properties(_C PROPERTIES INSTALL_RPATH "${GL_TORCH_LIBDIR};${gl_rpath}"
                                    BUILD_RPATH "${GL_TORCH_LIBDIR};${gl_rpath}")
install(TARGETS _C LIBRARY DESTINATION grouped_linear)

# A CPU build of torch cannot call the CUDA engines: skip building them for
# the extension (the C++ test build still compiles them).
if(NOT GL_EXT_WITH_CUDA AND NOT GL_BUILD_TESTS AND TARGET gl_core_cuda)
  set_target_properties(gl_core_cuda PROPERTIES EXCLUDE_FROM_ALL TRUE)
  if(TARGET gl_sm90_kernels)
    set_target_properties(gl_sm90_kernels PROPERTIES EXCLUDE_FROM_ALL TRUE)
  endif()
endif()
