# pkg-config files for builds without CMake: collectives.pc (the headers and threads),
# with the TCP part collectives-tcp.pc (adds Boost's headers and OpenSSL's libcrypto
# through its own libcrypto.pc), and with the hwloc part collectives-hwloc.pc (adds
# libhwloc through hwloc.pc and COLLECTIVES_WITH_HWLOC). The library is header-only
# and these files name no library of its own, so they go to share/pkgconfig. Their
# prefix is found from where the file lies (${pcfiledir}), so an installed tree can be
# moved, as a .deb unpacked with dpkg-deb -x is.
set(pkgconfig_dir ${CMAKE_INSTALL_DATAROOTDIR}/pkgconfig)
file(RELATIVE_PATH pc_prefix_from_pcfiledir /prefix/${pkgconfig_dir} /prefix)
string(REGEX REPLACE "/$" "" pc_prefix_from_pcfiledir "${pc_prefix_from_pcfiledir}")
configure_file(cmake/collectives.pc.in ${CMAKE_CURRENT_BINARY_DIR}/collectives.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/collectives.pc DESTINATION ${pkgconfig_dir})
if(collectives_has_tcp)
  # Boost has no .pc file; its headers need a flag only outside the compiler's own paths.
  set(pc_boost_cflags "")
  foreach(dir IN LISTS Boost_INCLUDE_DIRS)
    if(NOT dir IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
      string(APPEND pc_boost_cflags " -I${dir}")
    endif()
  endforeach()
  configure_file(cmake/collectives-tcp.pc.in ${CMAKE_CURRENT_BINARY_DIR}/collectives-tcp.pc @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/collectives-tcp.pc DESTINATION ${pkgconfig_dir})
endif()
if(collectives_has_hwloc)
  configure_file(cmake/collectives-hwloc.pc.in ${CMAKE_CURRENT_BINARY_DIR}/collectives-hwloc.pc @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/collectives-hwloc.pc DESTINATION ${pkgconfig_dir})
endif()
