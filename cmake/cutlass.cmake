# CUTLASS headers (pinned: nvidia-cutlass 4.2.0.0 on PyPI, which ships them
# under cutlass_library/source). Looked for in GL_CUTLASS_DIR, in .deps/cutlass
# (a copy carried to machines without a network), then in the installed wheel.
set(GL_CUTLASS_DIR "" CACHE PATH "Folder with include/ (cute, cutlass) and util/include")
set(GL_CUTLASS_FOUND OFF)
set(gl_cutlass_candidates "${GL_CUTLASS_DIR}" "${CMAKE_CURRENT_SOURCE_DIR}/.deps/cutlass")
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c
      "import importlib.util, os; s = importlib.util.find_spec('cutlass_library'); print(os.path.join(list(s.submodule_search_locations)[0], 'source') if s else '')"
    OUTPUT_VARIABLE gl_cutlass_wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  list(APPEND gl_cutlass_candidates "${gl_cutlass_wheel}")
endif()
foreach(dir IN LISTS gl_cutlass_candidates)
  if(dir AND EXISTS "${dir}/include/cute/tensor.hpp")
    set(GL_CUTLASS_INCLUDE "${dir}/include")
    if(EXISTS "${dir}/util/include/cutlass/util/packed_stride.hpp")
      set(GL_CUTLASS_UTIL_INCLUDE "${dir}/util/include")
    elseif(EXISTS "${dir}/tools/util/include/cutlass/util/packed_stride.hpp")
      set(GL_CUTLASS_UTIL_INCLUDE "${dir}/tools/util/include")
    endif()
    if(GL_CUTLASS_UTIL_INCLUDE)
      set(GL_CUTLASS_FOUND ON)
      message(STATUS "grouped_linear: CUTLASS from ${dir}")
      break()
    endif()
  endif()
endforeach()
if(NOT GL_CUTLASS_FOUND)
  message(WARNING "grouped_linear: CUTLASS headers not found (pip install nvidia-cutlass==4.2.0.0); "
                  "building without the Hopper grouped engine")
endif()
