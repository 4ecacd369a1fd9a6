# CUDA kernels are plain .cu files without torch headers, so they compile with nvcc even where
# LibTorch has no CUDA (as on the CPU CI machine); NCCL is linked to keep its path from rotting.
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
# The GPU architecture the kernels are built for: MEMFINE_CUDA_ARCH (scripts/gpu-build reads it off
# the GPU), else 90 (H100, H200). A property of the target, because a CUDA LibTorch's CMake package
# sets CMAKE_CUDA_ARCHITECTURES to OFF and passes its own flags.
set(MEMFINE_CUDA_ARCH 90 CACHE STRING "CUDA architecture of the memfine kernels (90: H100, H200)")
# PyTorch's wheels bring their own NCCL (nvidia-nccl-*, only libnccl.so.2): link that one where it
# is, so a process loads one NCCL; else the toolkit's or the system's.
execute_process(COMMAND python3 -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])"
                OUTPUT_VARIABLE MEMFINE_PIP_NCCL OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
find_library(MEMFINE_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${MEMFINE_PIP_NCCL}/lib ${CUDAToolkit_LIBRARY_DIR}
             /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu)
find_path(MEMFINE_NCCL_INCLUDE nccl.h HINTS ${MEMFINE_PIP_NCCL}/include ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)

file(GLOB_RECURSE MEMFINE_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/core/*.cu)
add_library(memfine_cuda STATIC ${MEMFINE_CUDA_SOURCES})
set_target_properties(memfine_cuda PROPERTIES CUDA_ARCHITECTURES "${MEMFINE_CUDA_ARCH}")
target_include_directories(memfine_cuda PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(memfine_cuda PUBLIC CUDA::cudart)
if(MEMFINE_NCCL_LIBRARY AND MEMFINE_NCCL_INCLUDE)
  message(STATUS "memfine: NCCL ${MEMFINE_NCCL_LIBRARY}")
  target_include_directories(memfine_cuda PUBLIC ${MEMFINE_NCCL_INCLUDE})
  target_link_libraries(memfine_cuda PUBLIC ${MEMFINE_NCCL_LIBRARY})
  target_compile_definitions(memfine_cuda PRIVATE MEMFINE_NCCL=1)
elseif(MEMFINE_TORCH_HAS_CUDA)
  # A GPU build must not stop here: the kernels do not need NCCL, and ranks use LibTorch's own.
  message(WARNING "memfine: no NCCL found; the kernels build without it (memfine_cuda_check reports NCCL 0)")
else()
  message(FATAL_ERROR "memfine: no NCCL found (nccl.h and libnccl) in the CUDA toolkit or the system")
endif()

# Links the kernels and NCCL into a runnable check: on a GPU it runs them against the host
# reference, elsewhere it says why not.
add_executable(memfine_cuda_check core/cli/cuda_check_main.cpp core/moe/kernels_host.cpp)
target_link_libraries(memfine_cuda_check PRIVATE memfine_cuda)
set_target_properties(memfine_cuda_check PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})

if(MEMFINE_TORCH_HAS_CUDA)
  # A CUDA LibTorch: dispatch and combine run the kernels on the GPU (kernels: fused).
  target_link_libraries(memfine_base INTERFACE memfine_cuda CUDA::cudart)
  target_compile_definitions(memfine_base INTERFACE MEMFINE_KERNELS=1)
else()
  # A LibTorch without CUDA (Debian's) still ships the CUDA and NCCL headers of its API: compile the
  # files with CUDA-LibTorch branches (NCCL process group, CUDA meter and environment, kernel calls,
  # the timer's device wait, CUDA graphs)
  # against them, so that code cannot rot where no GPU build runs. Never linked. The shim stands in
  # for one generated header the package leaves out.
  find_path(MEMFINE_TORCH_NCCL_HEADER torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp HINTS ${TORCH_INCLUDE_DIRS})
  if(MEMFINE_TORCH_NCCL_HEADER)
    add_library(memfine_torch_cuda_compile_check OBJECT core/dist/dist.cpp core/meter/memory_meter.cpp core/record/environment.cpp
                core/moe/fused.cpp core/meter/timer.cpp core/run/graph_step.cpp)
    target_include_directories(memfine_torch_cuda_compile_check BEFORE PRIVATE ${CMAKE_SOURCE_DIR}
                               ${CMAKE_SOURCE_DIR}/cmake/torch_cuda_shim)
    target_compile_definitions(memfine_torch_cuda_compile_check PRIVATE MEMFINE_TORCH_CUDA=1 MEMFINE_KERNELS=1
                               USE_C10D_NCCL)
    target_compile_options(memfine_torch_cuda_compile_check PRIVATE -Wall -Wextra -Wno-unused-parameter
                           -Wno-missing-field-initializers)
    target_link_libraries(memfine_torch_cuda_compile_check PRIVATE torch ${MEMFINE_YAML_CPP} nlohmann_json::nlohmann_json
                          CUDA::cudart)
    # The GPU-only test (the kernels and a whole CUDA step against ATen and the CPU) compiles too.
    find_package(GTest QUIET)
    if(GTest_FOUND AND MEMFINE_TESTS)
      target_sources(memfine_torch_cuda_compile_check PRIVATE ${CMAKE_SOURCE_DIR}/tests/test_kernels.cpp
                     ${CMAKE_SOURCE_DIR}/tests/test_grouped.cpp)
      target_include_directories(memfine_torch_cuda_compile_check PRIVATE ${CMAKE_SOURCE_DIR}/tests)
      target_link_libraries(memfine_torch_cuda_compile_check PRIVATE GTest::gtest)
    endif()
  endif()
endif()
