include_guard(GLOBAL)
include(CMakePackageConfigHelpers)
install(TARGETS wbaudit_util wbaudit_stats wbaudit_sim wbaudit_forecast wbaudit_audit wbaudit_runners wbaudit_random123 wbaudit_hdf5
        EXPORT wbauditTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS wbaudit RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(module util stats sim forecast audit runners)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${module}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/wbaudit/${module}
          FILES_MATCHING PATTERN "*.hpp")
endforeach()
install(EXPORT wbauditTargets NAMESPACE wbaudit:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/wbaudit)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/wbauditConfig.cmake.in
  ${PROJECT_BINARY_DIR}/wbauditConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/wbaudit)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/wbauditConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/wbauditConfig.cmake ${PROJECT_BINARY_DIR}/wbauditConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/wbaudit)
