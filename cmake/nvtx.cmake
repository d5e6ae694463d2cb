# NVTX ranges (csrc/core/nvtx.cpp), CUDA builds only: the header-only NVTX3
# (`nvtx3/nvToolsExt.h`) of the CUDA toolkit, or of the nvidia-nvtx wheel
# (nvidia/nvtx/include, or nvidia/cu13/include). Without it the ranges are
# compiled out and GROUPED_LINEAR_NVTX=1 only logs a warning.
set(GL_NVTX_FOUND OFF)
if(NOT GL_CUDA_ENABLED)
  return()
endif()
set(gl_nvtx_hints ${CUDAToolkit_INCLUDE_DIRS})
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c
      "import importlib.util; s = importlib.util.find_spec('nvidia'); print(';'.join(s.submodule_search_locations) if s else '')"
    OUTPUT_VARIABLE gl_nvidia_dirs OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  foreach(dir IN LISTS gl_nvidia_dirs)
    list(APPEND gl_nvtx_hints "${dir}/nvtx/include" "${dir}/cu13/include" "${dir}/cu12/include")
  endforeach()
endif()
find_path(GL_NVTX3_INCLUDE nvtx3/nvToolsExt.h HINTS ${gl_nvtx_hints})
if(GL_NVTX3_INCLUDE)
  set(GL_NVTX_FOUND ON)
  set_property(SOURCE csrc/core/nvtx.cpp APPEND PROPERTY INCLUDE_DIRECTORIES "${GL_NVTX3_INCLUDE}")
  set_property(SOURCE csrc/core/nvtx.cpp APPEND PROPERTY COMPILE_DEFINITIONS GL_WITH_NVTX)
  # NVTX3 loads its injection library (a profiler's) with dlopen.
  target_link_libraries(gl_core PRIVATE ${CMAKE_DL_LIBS})
  message(STATUS "grouped_linear: NVTX3 from ${GL_NVTX3_INCLUDE}")
else()
  message(STATUS "grouped_linear: nvtx3/nvToolsExt.h not found, NVTX ranges compiled out")
endif()
