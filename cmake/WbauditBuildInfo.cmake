include_guard(GLOBAL)
# Compiles the git commit and dirty flag into the binary. The header is regenerated at every build (a custom
# target), but only rewritten when its content changes, so an unchanged tree does not trigger a rebuild.
set(WBAUDIT_BUILD_INFO_HPP ${PROJECT_BINARY_DIR}/generated/wbaudit/build_info.hpp)
add_custom_target(wbaudit_build_info_gen
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DOUTPUT=${WBAUDIT_BUILD_INFO_HPP}
          -DVERSION=${PROJECT_VERSION} -P ${PROJECT_SOURCE_DIR}/cmake/WriteBuildInfo.cmake
  BYPRODUCTS ${WBAUDIT_BUILD_INFO_HPP}
  COMMENT "wbaudit build identity")
add_library(wbaudit_build_info INTERFACE)
add_dependencies(wbaudit_build_info wbaudit_build_info_gen)
target_include_directories(wbaudit_build_info INTERFACE $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated>)
