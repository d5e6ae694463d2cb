# Finds nvcc and cuBLAS. cuBLAS comes from the CUDA toolkit when it has it, or
# else from the nvidia-cublas wheel (headers and libcublas.so.13), which is how
# a machine with a bare nvcc (CI) still compiles every CUDA source.
set(GL_CUDA_ENABLED OFF)
if(GL_WITH_CUDA STREQUAL "OFF")
  return()
endif()

include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  if(GL_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "GL_WITH_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
  message(STATUS "grouped_linear: no nvcc found, building without the CUDA engines")
  return()
endif()

set(CMAKE_CUDA_ARCHITECTURES OFF)
# One CUDA runtime per process: torch loads the shared libcudart, so ours must
# be that one too (CMake's default, the static runtime, would be a second copy).
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

add_library(gl_cublas INTERFACE)
if(TARGET CUDA::cublas AND EXISTS "${CUDAToolkit_INCLUDE_DIRS}/cublas_v2.h")
  target_link_libraries(gl_cublas INTERFACE CUDA::cublas)
  message(STATUS "grouped_linear: cuBLAS from the CUDA toolkit")
else()
  find_package(Python3 COMPONENTS Interpreter REQUIRED)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c
      "import importlib.util, os; s = importlib.util.find_spec('nvidia'); print(';'.join(s.submodule_search_locations) if s else '')"
    OUTPUT_VARIABLE GL_NVIDIA_DIRS OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(GL_CUBLAS_INCLUDE "")
  set(GL_CUBLAS_LIBRARY "")
  foreach(dir IN LISTS GL_NVIDIA_DIRS)
    foreach(sub cu13 cublas)
      if(NOT GL_CUBLAS_INCLUDE AND EXISTS "${dir}/${sub}/include/cublas_v2.h")
        set(GL_CUBLAS_INCLUDE "${dir}/${sub}/include")
        file(GLOB GL_CUBLAS_CANDIDATES "${dir}/${sub}/lib/libcublas.so*")
        list(SORT GL_CUBLAS_CANDIDATES)
        list(GET GL_CUBLAS_CANDIDATES 0 GL_CUBLAS_LIBRARY)
      endif()
    endforeach()
  endforeach()
  if(NOT GL_CUBLAS_INCLUDE OR NOT GL_CUBLAS_LIBRARY)
    message(FATAL_ERROR "grouped_linear: nvcc found but no cuBLAS; install the CUDA toolkit's "
                        "cuBLAS or `pip install nvidia-cublas` (scripts/setup.sh does)")
  endif()
  get_filename_component(GL_CUBLAS_LIBDIR "${GL_CUBLAS_LIBRARY}" DIRECTORY)
  target_include_directories(gl_cublas INTERFACE "${GL_CUBLAS_INCLUDE}")
  target_link_libraries(gl_cublas INTERFACE "${GL_CUBLAS_LIBRARY}")
  set_property(GLOBAL APPEND PROPERTY GL_RUNTIME_LIBRARY_DIRS "${GL_CUBLAS_LIBDIR}")
  message(STATUS "grouped_linear: cuBLAS from ${GL_CUBLAS_INCLUDE}")
endif()
set(GL_CUDA_ENABLED ON)
