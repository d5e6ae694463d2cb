# GoogleTest from an installed package, or from its sources (Debian's
# googletest package puts them in /usr/src/googletest; GL_GTEST_SOURCE_DIR
# names another copy, e.g. one carried to a machine without a network).
set(GL_GTEST_FOUND OFF)
set(GL_GTEST_SOURCE_DIR "" CACHE PATH "GoogleTest source tree")
foreach(candidate "${GL_GTEST_SOURCE_DIR}" "${CMAKE_CURRENT_SOURCE_DIR}/.deps/googletest"
                  "/usr/src/googletest")
  if(candidate AND EXISTS "${candidate}/CMakeLists.txt")
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
    add_subdirectory("${candidate}" "${CMAKE_BINARY_DIR}/googletest" EXCLUDE_FROM_ALL)
    set(GL_GTEST_FOUND ON)
    break()
  endif()
endforeach()
if(NOT GL_GTEST_FOUND)
  find_package(GTest QUIET)
  if(GTest_FOUND)
    set(GL_GTEST_FOUND ON)
  else()
    message(WARNING "grouped_linear: GoogleTest not found; the C++ tests are not built")
  endif()
endif()
