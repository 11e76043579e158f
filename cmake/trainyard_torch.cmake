# LibTorch for the engine: the CMake config inside TRAINYARD_PYTHON's torch wheel
# (torch.utils.cmake_prefix_path; deploy/python-requirements.txt pins it), unless
# Torch_DIR or CMAKE_PREFIX_PATH already names one. Defines, for worker/engine/:
#   TORCH_LIBRARIES, TORCH_CXX_FLAGS, Torch_VERSION   as TorchConfig.cmake sets them;
#   TRAINYARD_TORCH_VERSION        Torch_VERSION, cached for the whole tree;
#   TRAINYARD_TORCH_INCLUDE_DIRS   LibTorch's headers without the third-party protobuf it
#                                  bundles (see below);
#   TRAINYARD_TORCH_DIR            the torch package folder (lib/, include/);
#   TRAINYARD_TORCH_LIB_DIR        its lib/, cached for the whole tree;
#   TRAINYARD_NCCL_INCLUDE_DIR     nccl.h of a CUDA LibTorch (the nvidia-nccl wheel beside it,
#                                  or NCCL_ROOT), empty when none was found.

# The LibTorch minor versions this engine builds against and CI checks. Another minor
# stops the configure step, since its c10d and profiler APIs are not known to compile
# (-DTRAINYARD_TORCH_ANY_VERSION=ON builds it anyway, to find out).
set(TRAINYARD_TORCH_SUPPORTED 2.11)
option(TRAINYARD_TORCH_ANY_VERSION "Build against a LibTorch minor outside TRAINYARD_TORCH_SUPPORTED" OFF)

set(_ty_wheel_cuda "")
if(NOT Torch_DIR)
  execute_process(
    COMMAND ${TRAINYARD_PYTHON} -c "import torch; print(torch.utils.cmake_prefix_path); print(torch.version.cuda or '')"
    RESULT_VARIABLE _ty_rc OUTPUT_VARIABLE _ty_out ERROR_VARIABLE _ty_err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _ty_rc EQUAL 0)
    message(FATAL_ERROR "${TRAINYARD_PYTHON} cannot import torch, which brings LibTorch: run "
                        "`bash deploy/install-deps.sh`, or set -DTRAINYARD_PYTHON / -DTorch_DIR.\n${_ty_err}")
  endif()
  string(REPLACE "\n" ";" _ty_out "${_ty_out}")
  list(GET _ty_out 0 _ty_prefix)
  list(LENGTH _ty_out _ty_n)
  if(_ty_n GREATER 1)
    list(GET _ty_out 1 _ty_wheel_cuda)
  endif()
  list(PREPEND CMAKE_PREFIX_PATH "${_ty_prefix}")
endif()

# Caffe2's CUDA config looks for nvcc on PATH; the toolkit's usual home when it is not.
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
  find_program(_ty_nvcc nvcc)
  if(NOT _ty_nvcc AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  elseif(NOT _ty_nvcc AND _ty_wheel_cuda)
    # TorchConfig.cmake would stop with "uses CUDA but I cannot find the CUDA libraries".
    message(FATAL_ERROR "The torch wheel is a CUDA ${_ty_wheel_cuda} build, and its CMake config needs the "
                        "CUDA toolkit (nvcc, headers), which this machine lacks: install NVIDIA's "
                        "cuda-toolkit-13-0 (developer.download.nvidia.com/compute/cuda/repos/debian12) "
                        "or set CUDACXX / -DCMAKE_CUDA_COMPILER to an nvcc of that major version")
  endif()
endif()
find_package(Torch REQUIRED)

string(REGEX MATCH "^[0-9]+\\.[0-9]+" _ty_torch_minor "${Torch_VERSION}")
if(NOT _ty_torch_minor IN_LIST TRAINYARD_TORCH_SUPPORTED)
  if(TRAINYARD_TORCH_ANY_VERSION)
    message(WARNING "LibTorch ${Torch_VERSION} is outside the supported minors (${TRAINYARD_TORCH_SUPPORTED})")
  else()
    message(FATAL_ERROR "LibTorch ${Torch_VERSION} (${Torch_DIR}) is not a supported version: the engine builds "
                        "against ${TRAINYARD_TORCH_SUPPORTED} (deploy/python-requirements.txt pins it); "
                        "-DTRAINYARD_TORCH_ANY_VERSION=ON tries anyway")
  endif()
endif()

# For targets outside worker/engine/ (the imported targets are made global there, plain
# variables are not).
set(TRAINYARD_TORCH_VERSION "${Torch_VERSION}" CACHE INTERNAL "The LibTorch version the engine builds against")

# TORCH_INSTALL_PREFIX is the torch package folder (TorchConfig.cmake sets it).
set(TRAINYARD_TORCH_DIR "${TORCH_INSTALL_PREFIX}")
# Where installed engine programs find LibTorch (their RUNPATH; deploy/install.cmake).
get_filename_component(_ty_torch_lib "${TRAINYARD_TORCH_DIR}/lib" REALPATH)
set(TRAINYARD_TORCH_LIB_DIR "${_ty_torch_lib}" CACHE INTERNAL "LibTorch's library folder")

# The wheel's include/ also holds headers of libraries LibTorch links privately, among
# them protobuf 3.13 (google/protobuf/). On the include path before /usr/include they
# would shadow the system protobuf that the engine's generated trainyard.v1 messages
# are compiled against. So the engine sees a copy of include/ made of links to every
# entry but google/; no LibTorch header the engine includes needs it.
set(_ty_torch_inc "${CMAKE_BINARY_DIR}/torch-include")
file(GLOB _ty_entries RELATIVE "${TRAINYARD_TORCH_DIR}/include" "${TRAINYARD_TORCH_DIR}/include/*")
file(REMOVE_RECURSE "${_ty_torch_inc}")
file(MAKE_DIRECTORY "${_ty_torch_inc}")
foreach(_e IN LISTS _ty_entries)
  if(NOT _e STREQUAL "google")
    file(CREATE_LINK "${TRAINYARD_TORCH_DIR}/include/${_e}" "${_ty_torch_inc}/${_e}" SYMBOLIC)
  endif()
endforeach()
set(TRAINYARD_TORCH_INCLUDE_DIRS "${_ty_torch_inc}" "${_ty_torch_inc}/torch/csrc/api/include")
# Torch's imported targets (torch, torch_cpu, c10, ...) carry the original include/ on
# their interface; point them at the copy.
get_property(_ty_imported DIRECTORY PROPERTY IMPORTED_TARGETS)
foreach(_t IN LISTS _ty_imported)
  get_target_property(_inc ${_t} INTERFACE_INCLUDE_DIRECTORIES)
  if(_inc)
    set(_new "")
    foreach(_d IN LISTS _inc)
      get_filename_component(_real "${_d}" REALPATH)
      get_filename_component(_torch_inc "${TRAINYARD_TORCH_DIR}/include" REALPATH)
      if(_real STREQUAL _torch_inc)
        list(APPEND _new "${_ty_torch_inc}")
      elseif(_real STREQUAL "${_torch_inc}/torch/csrc/api/include")
        list(APPEND _new "${_ty_torch_inc}/torch/csrc/api/include")
      else()
        list(APPEND _new "${_d}")
      endif()
    endforeach()
    list(REMOVE_DUPLICATES _new)
    set_target_properties(${_t} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_new}")
  endif()
endforeach()
set(TORCH_INCLUDE_DIRS ${TRAINYARD_TORCH_INCLUDE_DIRS})

# nccl.h for ProcessGroupNCCL.hpp: from NCCL_ROOT, else the nvidia-nccl wheel installed
# with torch (the NCCL libtorch_cuda.so loads), else the CUDA toolkit's.
set(TRAINYARD_NCCL_INCLUDE_DIR "")
if(TORCH_CUDA_LIBRARIES)
  get_filename_component(_ty_site "${TRAINYARD_TORCH_DIR}" DIRECTORY)
  find_path(_ty_nccl_h nccl.h
    HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} "${_ty_site}/nvidia/nccl" /usr/local/cuda
    PATH_SUFFIXES include NO_DEFAULT_PATH)
  if(_ty_nccl_h)
    set(TRAINYARD_NCCL_INCLUDE_DIR "${_ty_nccl_h}")
  endif()
endif()
