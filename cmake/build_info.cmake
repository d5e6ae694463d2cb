# grouped_linear/_build_info.py: the commit the package was built from, read
# at configure time (scikit-build-core configures on every build), so that a
# benchmark reports the code that ran even where the measuring machine's
# checkout is another commit or has no .git. A pure-Python file: a new commit
# does not rebuild _C.
find_package(Git QUIET)
set(GL_BUILD_COMMIT "unknown")
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short HEAD
                  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                  OUTPUT_VARIABLE gl_head OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE gl_head_rc ERROR_QUIET)
  if(gl_head_rc EQUAL 0 AND gl_head)
    # Tracked files changed since that commit: the build is not the commit.
    execute_process(COMMAND ${GIT_EXECUTABLE} status --porcelain --untracked-files=no
                    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                    OUTPUT_VARIABLE gl_changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    set(GL_BUILD_COMMIT "${gl_head}")
    if(gl_changes)
      string(APPEND GL_BUILD_COMMIT "-dirty")
    endif()
  endif()
endif()
if(GL_SM90_TUNING)
  set(GL_BUILD_TUNING_PY True)
else()
  set(GL_BUILD_TUNING_PY False)
endif()
message(STATUS "grouped_linear: building commit ${GL_BUILD_COMMIT}")
file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/_build_info.py CONTENT
"# Written by cmake/build_info.cmake at build time.
commit = \"@GL_BUILD_COMMIT@\"
sm90_tuning = @GL_BUILD_TUNING_PY@
" @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/_build_info.py DESTINATION grouped_linear)
