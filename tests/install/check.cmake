# Installs the build into a fresh prefix (MODE=install: cmake --install; MODE=deb: the
# .deb cpack makes, unpacked with dpkg-deb -x, whose usr/ is the prefix), checks what
# is there, then builds and runs programs outside the project against it: through
# find_package (with and without each component) and through pkg-config.
# Inputs: BUILD_DIR, SOURCE (this folder), WORK_DIR, CXX, CPACK, VERSION, HAS_TCP, HAS_RDMA,
# HAS_CUDA, HAS_HWLOC, HAS_BENCH.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "failed (${status}): ${ARGV}")
  endif()
endfunction()
function(expect_in text what)
  foreach(want IN LISTS ARGN)
    string(FIND "${text}" "${want}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "${what} lacks '${want}':\n${text}")
    endif()
  endforeach()
endfunction()

if(MODE STREQUAL "deb")
  find_program(DPKG_DEB dpkg-deb)
  if(NOT DPKG_DEB)
    message(STATUS "deb_package_works skipped: no dpkg-deb here (not a Debian system)")
    return()
  endif()
  # As a user runs it; cpack first builds the whole build folder (its preinstall step),
  # which after the build that precedes the tests has nothing left to do.
  run(${CPACK} -G DEB --config ${BUILD_DIR}/CPackConfig.cmake -B ${WORK_DIR}/deb)
  file(GLOB debs ${WORK_DIR}/deb/*.deb)
  list(LENGTH debs count)
  if(NOT count EQUAL 1)
    message(FATAL_ERROR "cpack -G DEB made ${count} .deb files: ${debs}")
  endif()
  execute_process(COMMAND ${DPKG_DEB} -I ${debs} OUTPUT_VARIABLE control COMMAND_ERROR_IS_FATAL ANY)
  message(STATUS "dpkg-deb -I ${debs}:\n${control}")
  expect_in("${control}" "its control fields" "Package: collectives\n" "Version: ${VERSION}\n"
            "Maintainer: the collectives authors\n")
  if(HAS_TCP)
    string(REGEX MATCH "\n *Depends: [^\n]*" depends "${control}")
    expect_in("${depends}" "Depends" "libboost-dev (>= 1.74)" "libssl-dev")
  endif()
  if(HAS_HWLOC)
    string(REGEX MATCH "\n *Suggests: [^\n]*" suggests "${control}")
    expect_in("${suggests}" "Suggests" "libhwloc-dev")
  endif()
  run(${DPKG_DEB} -x ${debs} ${WORK_DIR}/root)
  set(prefix ${WORK_DIR}/root/usr)
else()
  set(prefix ${WORK_DIR}/prefix)
  run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
endif()

# What the tree holds beside the headers.
file(GLOB_RECURSE config_files RELATIVE ${prefix} ${prefix}/lib*/cmake/collectives/*.cmake)
message(STATUS "CMake package files: ${config_files}")
set(wanted_files share/doc/collectives/LICENSE share/man/man1/collectives-run.1 bin/collectives-run
    bin/collectives-sim bin/collectives-sim-plot.py
    share/pkgconfig/collectives.pc include/collectives/collectives.hpp)
if(HAS_TCP)
  list(APPEND wanted_files share/pkgconfig/collectives-tcp.pc)
  if(HAS_BENCH)
    list(APPEND wanted_files bin/collectives-perf)
  endif()
endif()
if(HAS_CUDA AND HAS_BENCH)
  list(APPEND wanted_files bin/collectives-perf-cuda)
endif()
if(HAS_HWLOC)
  list(APPEND wanted_files share/pkgconfig/collectives-hwloc.pc)
endif()
foreach(file IN LISTS wanted_files)
  if(NOT EXISTS ${prefix}/${file})
    message(FATAL_ERROR "not installed: ${file}")
  endif()
endforeach()
foreach(part Tcp Cuda Hwloc)
  string(TOUPPER ${part} has)
  set(targets_file collectives${part}Targets.cmake)
  if(HAS_${has} AND NOT config_files MATCHES "/${targets_file}")
    message(FATAL_ERROR "not installed: ${targets_file}")
  elseif(NOT HAS_${has} AND config_files MATCHES "/${targets_file}")
    message(FATAL_ERROR "installed without its part: ${targets_file}")
  endif()
endforeach()

# The man page: made from --help, it names every option, and groff reads it without
# a warning (and writes it as plain text: -P-cbou, no overstriking).
file(READ ${prefix}/share/man/man1/collectives-run.1 man_page)
expect_in("${man_page}" "the man page" ".SH SYNOPSIS" ".SH OPTIONS" "\\-\\-nproc" "\\-\\-transport" "\\-\\-timeout")
find_program(GROFF groff)
if(GROFF)
  execute_process(COMMAND ${GROFF} -man -Tutf8 -P-cbou -ww ${prefix}/share/man/man1/collectives-run.1
                  OUTPUT_VARIABLE rendered ERROR_VARIABLE groff_warnings COMMAND_ERROR_IS_FATAL ANY)
  if(NOT groff_warnings STREQUAL "")
    message(FATAL_ERROR "groff warns about collectives-run.1:\n${groff_warnings}")
  endif()
  expect_in("${rendered}" "the rendered man page" "collectives" "OPTIONS")
else()
  message(STATUS "no groff here: the man page is checked as text only")
endif()

# find_package: a host-only program needs no CUDA (CUDAToolkit hidden here; CMake
# warns that the setting went unused, as nothing looked for CUDA), the TCP consumer
# runs under the installed launcher, and the hwloc consumer reads the topology with hwloc. No build type: the check is that the package's
# targets bring what a program needs, which optimizing would only make slower to see.
set(consumer_options -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX}
    -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)
set(with_tcp OFF)
if(HAS_TCP AND NOT MODE STREQUAL "deb")  # the deb check leaves the slow TCP build to this one
  set(with_tcp ON)
endif()
run(${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK_DIR}/build ${consumer_options} -DWITH_TCP=${with_tcp}
    -DWITH_HWLOC=${HAS_HWLOC})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)
if(with_tcp)
  run(${prefix}/bin/collectives-run -n 2 --timeout 60 ${WORK_DIR}/build/tcp_consumer_compiled)
endif()
if(HAS_HWLOC)
  run(${WORK_DIR}/build/hwloc_consumer)
endif()

# Components, configured only (from the install tree: the .deb holds the same package
# files, which its check finds above). `name` must configure, or fail with `failure`
# in its output.
function(components name failure)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE}/components -B ${WORK_DIR}/components_${name}
                          -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX} ${ARGN}
                  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(failure STREQUAL "")
    if(NOT status EQUAL 0)
      message(FATAL_ERROR "components ${name}: configure failed:\n${out}")
    endif()
  elseif(status EQUAL 0)
    message(FATAL_ERROR "components ${name}: configured, though it should fail with '${failure}':\n${out}")
  else()
    string(REGEX REPLACE "[ \n]+" " " flat "${out}")  # CMake wraps long messages
    expect_in("${flat}" "components ${name}: the failure" "${failure}")
  endif()
  string(REGEX MATCHALL "component [a-z]+: [^\n]*" got "${out}")
  message(STATUS "components ${name}: ${ARGN}: ${got}")
  set(out "${out}" PARENT_SCOPE)
endfunction()
if(NOT MODE STREQUAL "deb")
  # Nothing named: core and tcp; CUDA never looked for, even where it is, nor libfabric
  # or hwloc.
  components(default "" -DNOT_LOOKED_FOR=CUDAToolkit,LIBFABRIC,HWLOC)
  if(HAS_TCP)
    expect_in("${out}" "components default" "component tcp: found 'TRUE', target YES")
  endif()
  expect_in("${out}" "components default" "component cuda: found '', target NO")
  # core alone: not even Boost.
  components(core "" -DREQUIRED_COMPONENTS=core -DNOT_LOOKED_FOR=CUDAToolkit,Boost,OpenSSL)
  expect_in("${out}" "components core" "component tcp: found '', target NO")
  if(HAS_TCP)
    # Without Boost: the default goes on without tcp; asking for tcp fails and says why.
    components(default_without_boost "" -DCMAKE_DISABLE_FIND_PACKAGE_Boost=ON)
    expect_in("${out}" "components default_without_boost" "component tcp: found 'FALSE', target NO"
              "no collectives::tcp: collectives::tcp needs Boost")
    components(tcp_without_boost "collectives::tcp needs Boost" -DREQUIRED_COMPONENTS=tcp -DCMAKE_DISABLE_FIND_PACKAGE_Boost=ON)
  endif()
  if(HAS_RDMA)  # rdma brings tcp's targets with its own
    components(rdma "" -DREQUIRED_COMPONENTS=rdma -DNOT_LOOKED_FOR=CUDAToolkit)
    expect_in("${out}" "components rdma" "component rdma: found 'TRUE', target YES" "component tcp: found 'TRUE', target YES")
  else()
    components(rdma "this copy of collectives was built without collectives::rdma" -DREQUIRED_COMPONENTS=rdma)
  endif()
  if(HAS_CUDA)
    components(cuda "" -DREQUIRED_COMPONENTS=cuda)
    expect_in("${out}" "components cuda" "component cuda: found 'TRUE', target YES")
    components(cuda_without_toolkit "collectives::cuda needs the CUDA toolkit" -DREQUIRED_COMPONENTS=cuda
               -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)
  else()
    components(cuda "this copy of collectives was built without collectives::cuda" -DREQUIRED_COMPONENTS=cuda)
  endif()
  # cuda where it is, and configures either way.
  set(cuda_found FALSE)
  if(HAS_CUDA)
    set(cuda_found TRUE)
  endif()
  components(optional_cuda "" -DOPTIONAL_COMPONENTS=cuda)
  expect_in("${out}" "components optional_cuda" "component cuda: found '${cuda_found}'")
  if(HAS_TCP)
    components(tcp_and_optional_cuda "" -DREQUIRED_COMPONENTS=tcp -DOPTIONAL_COMPONENTS=cuda)
    expect_in("${out}" "components tcp_and_optional_cuda" "component tcp: found 'TRUE', target YES"
              "component cuda: found '${cuda_found}'")
    if(HAS_CUDA)
      components(tcp_and_cuda "" -DREQUIRED_COMPONENTS=tcp,cuda)
      expect_in("${out}" "components tcp_and_cuda" "component tcp: found 'TRUE', target YES"
                "component cuda: found 'TRUE', target YES")
    endif()
  endif()
  if(HAS_HWLOC)  # hwloc alone: neither Boost nor CUDA; without pkg-config it fails and says why
    components(hwloc "" -DREQUIRED_COMPONENTS=hwloc -DNOT_LOOKED_FOR=CUDAToolkit,Boost,OpenSSL,LIBFABRIC)
    expect_in("${out}" "components hwloc" "component hwloc: found 'TRUE', target YES" "component tcp: found '', target NO")
    components(hwloc_without_pkg_config "collectives::hwloc needs hwloc (libhwloc-dev) and pkg-config"
               -DREQUIRED_COMPONENTS=hwloc -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON)
  else()
    components(hwloc "this copy of collectives was built without collectives::hwloc" -DREQUIRED_COMPONENTS=hwloc)
  endif()
  components(unknown "there is no component named nosuch" -DREQUIRED_COMPONENTS=nosuch)
endif()

# pkg-config, without CMake: the compiler line the README gives.
find_program(PKG_CONFIG pkg-config)
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "no pkg-config here (Debian: pkgconf; scripts/install-deps.sh installs it)")
endif()
set(pc_programs collectives:consumer.cpp)
if(with_tcp)
  set(pc_programs collectives-tcp:tcp_consumer.cpp)
endif()
if(HAS_HWLOC)
  list(APPEND pc_programs collectives-hwloc:hwloc_consumer.cpp)
endif()
foreach(program IN LISTS pc_programs)
  string(REPLACE ":" ";" program "${program}")
  list(GET program 0 pc_module)
  list(GET program 1 pc_source)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${prefix}/share/pkgconfig
                          ${PKG_CONFIG} --cflags --libs ${pc_module}
                  OUTPUT_VARIABLE pc_flags OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
  message(STATUS "pkg-config --cflags --libs ${pc_module}: ${pc_flags}")
  separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
  if(MODE STREQUAL "deb")
    # The .deb holds the same .pc files as the install tree, whose check compiles with
    # them: here, that their include folder is the unpacked tree's.
    list(FILTER pc_flags INCLUDE REGEX "^-I")
    list(TRANSFORM pc_flags REPLACE "^-I" "")
    list(GET pc_flags 0 pc_include)
    file(REAL_PATH "${pc_include}" pc_include)
    file(REAL_PATH "${prefix}/include" unpacked_include)
    if(NOT pc_include STREQUAL unpacked_include OR NOT EXISTS ${pc_include}/collectives/collectives.hpp)
      message(FATAL_ERROR "pkg-config's include folder is '${pc_flags}', not the unpacked ${prefix}/include")
    endif()
  else()
    run(${CXX} -std=c++20 ${SOURCE}/${pc_source} -o ${WORK_DIR}/pkg_config_${pc_module} ${pc_flags})
    run(${prefix}/bin/collectives-run -n 2 --timeout 60 ${WORK_DIR}/pkg_config_${pc_module})
  endif()
endforeach()

# The installed perf program, as a job of one rank.
if(HAS_TCP AND HAS_BENCH)
  run(${prefix}/bin/collectives-perf all_reduce -b 64 -e 64 -n 1 -w 1 -c 1)
endif()
