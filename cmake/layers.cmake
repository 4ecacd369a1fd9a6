# The code's layers, held by the build. Each folder of core/ is a layer: an OBJECT library of its
# .cpp files (sub-folders included) that names the layers it uses. A layer can use only layers
# declared before it, so the uses run one way; and before a layer compiles, a check reads every
# `#include "core/..."` and `#include "baselines/..."` of its files and stops the build at one that
# reaches a layer it does not name (cmake/check_layer.cmake). memfine_core gathers every layer's
# objects, so static registrations (the baselines) are never dropped by the linker.

add_library(memfine_base INTERFACE)  # what every layer compiles and links with
target_include_directories(memfine_base INTERFACE ${CMAKE_SOURCE_DIR})
add_library(memfine_core INTERFACE)  # every layer's objects: what executables and tests link
target_link_libraries(memfine_core INTERFACE memfine_base)
set(MEMFINE_LAYERS "" CACHE INTERNAL "")

# memfine_layer_check(<target> <layer> <folder> USES...): <target> builds after its includes pass.
function(memfine_layer_check target layer folder)
  set(uses ${ARGN})
  file(GLOB_RECURSE files CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${folder}/*.cpp ${CMAKE_SOURCE_DIR}/${folder}/*.h
       ${CMAKE_SOURCE_DIR}/${folder}/*.cu)
  set(stamp ${CMAKE_BINARY_DIR}/layers/${layer}.checked)
  string(REPLACE ";" "," uses_arg "${uses}")
  add_custom_command(OUTPUT ${stamp}
                     COMMAND ${CMAKE_COMMAND} -DLAYER=${layer} -DFOLDER=${folder} "-DUSES=${uses_arg}"
                             -DSOURCE_DIR=${CMAKE_SOURCE_DIR} -DSTAMP=${stamp} -P ${CMAKE_SOURCE_DIR}/cmake/check_layer.cmake
                     DEPENDS ${files} ${CMAKE_SOURCE_DIR}/cmake/check_layer.cmake
                     COMMENT "Checking the includes of layer ${layer}" VERBATIM)
  add_custom_target(${target}_includes DEPENDS ${stamp})
  add_dependencies(${target} ${target}_includes)
endfunction()

# memfine_reuse_pch(<target>...): <target>s compile against the first layer's precompiled LibTorch
# headers (GCC takes them whatever the targets' own definitions and warnings): the later layers,
# the executables and the tests.
function(memfine_reuse_pch)
  if(MEMFINE_PCH)
    list(GET MEMFINE_LAYERS 0 first)
    foreach(target ${ARGN})
      target_precompile_headers(${target} REUSE_FROM memfine_${first})
    endforeach()
  endif()
endfunction()

# memfine_layer(<name> [FOLDER <dir>] [USES <layer>...] [EXCLUDE <regex>]): core/<name> unless FOLDER
# says otherwise; EXCLUDE leaves out files the executables compile themselves (their main()s).
function(memfine_layer name)
  cmake_parse_arguments(L "" "FOLDER;EXCLUDE" "USES" ${ARGN})
  if(NOT L_FOLDER)
    set(L_FOLDER core/${name})
  endif()
  foreach(used ${L_USES})
    if(NOT used IN_LIST MEMFINE_LAYERS)
      message(FATAL_ERROR "layer ${name} uses ${used}, which is not declared before it: the layers run one way")
    endif()
  endforeach()
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${L_FOLDER}/*.cpp)
  if(L_EXCLUDE)
    list(FILTER sources EXCLUDE REGEX "${L_EXCLUDE}")
  endif()
  add_library(memfine_${name} OBJECT ${sources})
  target_link_libraries(memfine_${name} PUBLIC memfine_base)
  foreach(used ${L_USES})
    target_link_libraries(memfine_${name} PUBLIC memfine_${used})
  endforeach()
  target_compile_options(memfine_${name} PRIVATE -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)
  # LibTorch's headers take most of each file's compile: parsed once, by the first layer, and reused
  # by the others (they share every flag). Each file still includes what it uses (the check below).
  if(NOT MEMFINE_LAYERS)
    if(MEMFINE_PCH)
      target_precompile_headers(memfine_${name} PRIVATE <ATen/ATen.h> <torch/csrc/autograd/custom_function.h>)
    endif()
  else()
    memfine_reuse_pch(memfine_${name})
  endif()
  memfine_layer_check(memfine_${name} ${name} ${L_FOLDER} ${L_USES})
  target_sources(memfine_core INTERFACE $<TARGET_OBJECTS:memfine_${name}>)
  set(MEMFINE_LAYERS ${MEMFINE_LAYERS} ${name} CACHE INTERNAL "")
endfunction()
