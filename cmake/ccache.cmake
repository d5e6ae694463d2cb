# Compiler caching: when ccache is installed, every C++ and CUDA compile goes
# through it. The cache lives outside the tree (ccache's default folder), and
# CCACHE_BASEDIR makes paths inside the source folder relative, so a fresh
# clone in another folder on the same machine (CI) reuses earlier compiles.
# GL_USE_CCACHE=OFF turns it off.
option(GL_USE_CCACHE "Compile through ccache when it is installed" ON)
if(GL_USE_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(GL_CCACHE_PROGRAM ccache)
  if(GL_CCACHE_PROGRAM)
    set(gl_launcher ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${CMAKE_SOURCE_DIR} CCACHE_NOHASHDIR=true
                    ${GL_CCACHE_PROGRAM})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${gl_launcher})
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${gl_launcher})
    message(STATUS "grouped_linear: compiling through ${GL_CCACHE_PROGRAM}")
  endif()
endif()
