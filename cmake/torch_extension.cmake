# The torch binding and the Python extension grouped_linear._C. Include and
# library paths come from the installed torch itself (the same ones
# torch.utils.cpp_extension uses), which avoids TorchConfig.cmake's CUDA
# discovery and works for CPU and CUDA builds of torch alike.
find_package(Python COMPONENTS Interpreter Development.Module REQUIRED)

execute_process(
  COMMAND "${Python_EXECUTABLE}" -c [=[
import os, torch
from torch.utils import cpp_extension as ce
print('|'.join(ce.include_paths()))
print(os.path.join(os.path.dirname(torch.__file__), 'lib'))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(1 if torch.version.cuda else 0)
print(torch.__version__)
flags = []
for name in ('COMPILER_TYPE', 'STDLIB', 'BUILD_ABI'):
    value = getattr(torch._C, '_PYBIND11_' + name, None)
    if value is not None:
        flags.append('PYBIND11_%s="%s"' % (name, value))
print('|'.join(flags) or 'NONE')
]=]
  OUTPUT_VARIABLE GL_TORCH_INFO OUTPUT_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE GL_TORCH_RESULT)
if(NOT GL_TORCH_RESULT EQUAL 0)
  message(FATAL_ERROR "grouped_linear: could not import torch with ${Python_EXECUTABLE}")
endif()
string(REPLACE "\n" ";" GL_TORCH_INFO "${GL_TORCH_INFO}")
list(GET GL_TORCH_INFO 0 GL_TORCH_INCLUDES)
list(GET GL_TORCH_INFO 1 GL_TORCH_LIBDIR)
list(GET GL_TORCH_INFO 2 GL_TORCH_CXX11_ABI)
list(GET GL_TORCH_INFO 3 GL_TORCH_HAS_CUDA)
list(GET GL_TORCH_INFO 4 GL_TORCH_VERSION)
list(GET GL_TORCH_INFO 5 GL_PYBIND_FLAGS)
string(REPLACE "|" ";" GL_TORCH_INCLUDES "${GL_TORCH_INCLUDES}")
string(REPLACE "|" ";" GL_PYBIND_FLAGS "${GL_PYBIND_FLAGS}")
if(GL_PYBIND_FLAGS STREQUAL "NONE")
  set(GL_PYBIND_FLAGS "")
endif()
message(STATUS "grouped_linear: torch ${GL_TORCH_VERSION} (CUDA: ${GL_TORCH_HAS_CUDA})")

set(GL_EXT_SOURCES
  csrc/torch_binding/tensor_views.cpp
  csrc/torch_binding/exec_context.cpp
  csrc/torch_binding/group_splits.cpp
  csrc/torch_binding/grouped_ops.cpp
  csrc/torch_binding/autograd_function.cpp
  csrc/torch_binding/fp8_bindings.cpp
  csrc/torch_binding/fp8_gemm_ops.cpp
  csrc/torch_binding/fp8_tensors.cpp
  csrc/torch_binding/fp8_state.cpp
  csrc/torch_binding/fp8_autograd.cpp
  csrc/torch_binding/op_registration.cpp
  csrc/torch_binding/python_module.cpp)
set(GL_EXT_LIBS c10 torch torch_cpu torch_python)
set(GL_EXT_WITH_CUDA OFF)
if(GL_TORCH_HAS_CUDA)
  if(NOT GL_CUDA_ENABLED)
    message(FATAL_ERROR "grouped_linear: torch has CUDA but nvcc/cuBLAS were not found")
  endif()
  set(GL_EXT_WITH_CUDA ON)
  list(APPEND GL_EXT_SOURCES csrc/torch_binding/cuda_exec_context.cpp)
  list(APPEND GL_EXT_LIBS c10_cuda torch_cuda)
endif()

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
target_include_directories(_C PRIVATE ${GL_TORCH_INCLUDES})
target_link_directories(_C PRIVATE "${GL_TORCH_LIBDIR}")
target_link_libraries(_C PRIVATE gl_core ${GL_EXT_LIBS})
# torch's pybind11 ABI flags are not passed by default: without them our module
# keeps its own pybind11 internals instead of sharing torch._C's. On torch 2.11
# (CUDA) a C++ exception crossing the shared translator registry crashed the
# interpreter; python_module.cpp also converts every exception itself.
# Tensors cross through torch's own type casters, which need no shared
# internals. GL_SHARE_PYBIND_INTERNALS=ON passes the flags anyway.
option(GL_SHARE_PYBIND_INTERNALS "Build _C with torch's pybind11 ABI flags" OFF)
target_compile_definitions(_C PRIVATE TORCH_EXTENSION_NAME=_C TORCH_API_INCLUDE_EXTENSION_H
                                      _GLIBCXX_USE_CXX11_ABI=${GL_TORCH_CXX11_ABI})
if(GL_SHARE_PYBIND_INTERNALS)
  target_compile_definitions(_C PRIVATE ${GL_PYBIND_FLAGS})
endif()
target_compile_options(_C PRIVATE -O2 -fvisibility=hidden)
# torch's headers need C++20 from torch 2.10 on.
set_target_properties(_C PROPERTIES CXX_STANDARD 20)
if(GL_EXT_WITH_CUDA)
  target_compile_definitions(_C PRIVATE GL_WITH_CUDA)
  target_link_libraries(_C PRIVATE gl_core_cuda CUDA::cudart)
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
