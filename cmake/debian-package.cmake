# `cpack -G DEB` in the build folder: one package, collectives, with everything
# `cmake --install` installs, under /usr.
set(CPACK_PACKAGE_NAME collectives)
set(CPACK_PACKAGE_VENDOR "the collectives authors")
set(CPACK_PACKAGE_CONTACT "the collectives authors")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_DESCRIPTION "Collective operations (all_reduce, all_gather, all_to_all, ...) over\n\
threads, shared memory, TCP and CUDA IPC, with the collectives-run launcher.")
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "the collectives authors")
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
# What the installed CMake and pkg-config files point consumers of the TCP part to.
set(collectives_deb_depends "")
if(collectives_has_tcp)
  set(collectives_deb_depends "libboost-dev (>= 1.74)" libssl-dev)
endif()
# The parts a program asks for by name: what their CMake and pkg-config files look for.
set(collectives_deb_suggests "")
if(collectives_has_cuda)
  list(APPEND collectives_deb_suggests nvidia-cuda-toolkit)
endif()
if(collectives_has_hwloc)
  list(APPEND collectives_deb_suggests libhwloc-dev)
endif()
list(JOIN collectives_deb_suggests ", " CPACK_DEBIAN_PACKAGE_SUGGESTS)
# The programs' own libraries (libc, libstdc++, libcrypto): with their versions where
# dpkg-shlibdeps (dpkg-dev) is there to read them, else by name.
find_program(collectives_dpkg_shlibdeps dpkg-shlibdeps)
if(collectives_dpkg_shlibdeps)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
else()
  list(APPEND collectives_deb_depends "libc6" "libstdc++6" "libgcc-s1")
endif()
list(JOIN collectives_deb_depends ", " CPACK_DEBIAN_PACKAGE_DEPENDS)
include(CPack)
