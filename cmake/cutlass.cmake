# Finds the CUTLASS/CuTe headers (>= 4.2) and defines the interface target blockfuse::cutlass.
#
# Order: -DCUTLASS_DIR=<a CUTLASS checkout or the wheel's source folder>, else the PyPI wheel that
# scripts/deps installs into .deps/cutlass (nvidia-cutlass==4.2.0.0, --no-deps).
set(_bf_wheel_src "${CMAKE_CURRENT_SOURCE_DIR}/.deps/cutlass/cutlass_library/source")
set(CUTLASS_DIR "" CACHE PATH "CUTLASS root (the folder holding include/cutlass and tools/util/include)")
if(NOT CUTLASS_DIR)
  set(CUTLASS_DIR "${_bf_wheel_src}")
endif()

set(_bf_version_h "${CUTLASS_DIR}/include/cutlass/version.h")
if(NOT EXISTS "${_bf_version_h}")
  message(FATAL_ERROR
    "blockfuse needs the CUTLASS/CuTe headers (>= 4.2) and found none at '${CUTLASS_DIR}'.\n"
    "Get them with:  scripts/deps   (pip install --no-deps --target .deps/cutlass nvidia-cutlass==4.2.0.0)\n"
    "or point at a checkout:  cmake -DCUTLASS_DIR=/path/to/cutlass ...")
endif()
file(STRINGS "${_bf_version_h}" _bf_major REGEX "^#define CUTLASS_MAJOR [0-9]+")
string(REGEX REPLACE "^#define CUTLASS_[A-Z]+ " "" _bf_major "${_bf_major}")
file(STRINGS "${_bf_version_h}" _bf_minor REGEX "^#define CUTLASS_MINOR [0-9]+")
string(REGEX REPLACE "^#define CUTLASS_[A-Z]+ " "" _bf_minor "${_bf_minor}")
file(STRINGS "${_bf_version_h}" _bf_patch REGEX "^#define CUTLASS_PATCH [0-9]+")
string(REGEX REPLACE "^#define CUTLASS_[A-Z]+ " "" _bf_patch "${_bf_patch}")
string(REGEX MATCH "[0-9]+" _bf_major "${_bf_major}")
string(REGEX MATCH "[0-9]+" _bf_minor "${_bf_minor}")
string(REGEX MATCH "[0-9]+" _bf_patch "${_bf_patch}")
set(BLOCKFUSE_CUTLASS_VERSION "${_bf_major}.${_bf_minor}.${_bf_patch}")
if(BLOCKFUSE_CUTLASS_VERSION VERSION_LESS 4.2)
  message(FATAL_ERROR
    "blockfuse needs CUTLASS >= 4.2; '${CUTLASS_DIR}' holds ${BLOCKFUSE_CUTLASS_VERSION}.\n"
    "Get 4.2 with:  scripts/deps   (pip install --no-deps --target .deps/cutlass nvidia-cutlass==4.2.0.0)\n"
    "or point at a newer checkout:  cmake -DCUTLASS_DIR=/path/to/cutlass ...")
endif()
message(STATUS "blockfuse: CUTLASS ${BLOCKFUSE_CUTLASS_VERSION} at ${CUTLASS_DIR}")

add_library(blockfuse_cutlass INTERFACE)
target_include_directories(blockfuse_cutlass SYSTEM INTERFACE
  "${CUTLASS_DIR}/include" "${CUTLASS_DIR}/tools/util/include")
add_library(blockfuse::cutlass ALIAS blockfuse_cutlass)
