# CUDA kernels are plain .cu files without torch headers, so they compile with nvcc even where
# LibTorch has no CUDA (as on the CPU CI machine); NCCL is linked to keep its path from rotting.
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "52")
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
find_library(MEMFINE_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64
             /usr/lib/x86_64-linux-gnu REQUIRED)
find_path(MEMFINE_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include REQUIRED)

file(GLOB MEMFINE_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/core/*.cu)
add_library(memfine_cuda STATIC ${MEMFINE_CUDA_SOURCES})
target_include_directories(memfine_cuda PUBLIC ${CMAKE_SOURCE_DIR} ${MEMFINE_NCCL_INCLUDE})
target_link_libraries(memfine_cuda PUBLIC CUDA::cudart ${MEMFINE_NCCL_LIBRARY})

# Links the kernels and NCCL into a runnable check: on a GPU it runs them, elsewhere it says why not.
add_executable(memfine_cuda_check core/cuda_check_main.cpp)
target_link_libraries(memfine_cuda_check PRIVATE memfine_cuda)
set_target_properties(memfine_cuda_check PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
