# The installed torch and gl_torch: the torch binding without Python (autograd
# node, products on at::Tensor, m_splits, FP8 state), linked by the extension
# _C (torch_extension.cmake) and by the C++ API (cpp_api.cmake).
#
# Include and library paths come from the installed torch itself (the same
# ones torch.utils.cpp_extension uses), which avoids TorchConfig.cmake's CUDA
# discovery and works for CPU and CUDA builds of torch alike.
#
# In:  GL_TORCH_REQUIRED  fail when torch cannot be imported (else GL_TORCH_FOUND=OFF)
# Out: GL_TORCH_FOUND, GL_TORCH_INCLUDES, GL_TORCH_LIBDIR, GL_TORCH_CXX11_ABI,
#      GL_TORCH_HAS_CUDA, GL_PYBIND_FLAGS, target gl_torch
set(GL_TORCH_FOUND OFF)
if(GL_BUILD_PYTHON)
  find_package(Python COMPONENTS Interpreter Development.Module REQUIRED)
else()
  find_package(Python COMPONENTS Interpreter)
endif()
if(NOT Python_Interpreter_FOUND)
  if(GL_TORCH_REQUIRED)
    message(FATAL_ERROR "grouped_linear: no Python interpreter to find torch with")
  endif()
  return()
endif()

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
  RESULT_VARIABLE GL_TORCH_RESULT ERROR_QUIET)
if(NOT GL_TORCH_RESULT EQUAL 0)
  if(GL_TORCH_REQUIRED)
    message(FATAL_ERROR "grouped_linear: could not import torch with ${Python_EXECUTABLE}")
  endif()
  message(STATUS "grouped_linear: torch not found with ${Python_EXECUTABLE}")
  return()
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
if(GL_TORCH_HAS_CUDA AND NOT GL_CUDA_ENABLED)
  message(FATAL_ERROR "grouped_linear: torch has CUDA but nvcc/cuBLAS were not found")
endif()
set(GL_TORCH_FOUND ON)

# No file here includes Python or pybind11 headers: what needs them is in _C.
add_library(gl_torch STATIC
  csrc/torch_binding/tensor_views.cpp
  csrc/torch_binding/exec_context.cpp
  csrc/torch_binding/group_splits.cpp
  csrc/torch_binding/grouped_ops.cpp
  csrc/torch_binding/autograd_function.cpp
  csrc/torch_binding/engines.cpp
  csrc/torch_binding/fp8_tensors.cpp
  csrc/torch_binding/fp8_state.cpp
  csrc/torch_binding/fp8_autocast.cpp
  csrc/torch_binding/fp8_autograd.cpp
  csrc/torch_binding/recipe_ints.cpp)
target_include_directories(gl_torch SYSTEM PUBLIC ${GL_TORCH_INCLUDES})
target_link_directories(gl_torch PUBLIC "${GL_TORCH_LIBDIR}")
target_link_libraries(gl_torch PUBLIC gl_core c10 torch torch_cpu)
# Whatever includes torch's headers must agree with torch's C++ ABI.
target_compile_definitions(gl_torch PUBLIC _GLIBCXX_USE_CXX11_ABI=${GL_TORCH_CXX11_ABI})
# Hidden: _C exports nothing but its init function.
target_compile_options(gl_torch PRIVATE -O2 -fvisibility=hidden)
# torch's headers need C++20 from torch 2.10 on; our sources are C++17.
target_compile_features(gl_torch PUBLIC cxx_std_20)
if(GL_TORCH_HAS_CUDA)
  target_sources(gl_torch PRIVATE csrc/torch_binding/cuda_exec_context.cpp)
  target_compile_definitions(gl_torch PRIVATE GL_WITH_CUDA)
  target_link_libraries(gl_torch PUBLIC gl_core_cuda CUDA::cudart c10_cuda torch_cuda)
endif()
