# Fails when a header under include/collectives includes a header of a higher layer,
# when includes form a circle (a header reaching itself through others: with
# #pragma once, which definition comes first then depends on which header a program
# includes first), or when a header belongs to no layer (a new one must be placed in
# the table). A header's .ipp (its definitions, compiled in the library) and the .hpp
# that includes it in header-only mode are one header here.
#   cmake -DINCLUDE_DIR=<dir holding collectives/> -P check_layers.cmake
# The table is the project's layering (docs/architecture.md explains it). A header
# may include headers of its own layer and of the layers below it. Entries are
# regular expressions over the path below include/collectives, the first match wins.
cmake_policy(VERSION 3.25)
set(layers
  "0 foundation:  ^(config|error|log|memory_space|settings|trace)\\.(hpp|ipp)$"
  "1 vocabulary:  ^concepts/ ^device_span\\.hpp$ ^element_types\\.hpp$"
  "2 services:    ^ops/ ^bootstrap/"
  "3 schedules:   ^algorithm/(automatic|direct|halving_doubling|hierarchical|ring|schedule|tree)\\.(hpp|ipp)$"
  "4 runtime:     ^runtime/ ^device/"
  "5 transports:  ^transport/[a-z_]+/ ^transport/(cuda_ipc|declarations|device_ipc|faulty|inproc|selection|sim|subgroup)\\.hpp$"
  "6 communicator: ^communicator\\.hpp$ ^transport/(automatic|rdma|shm|tcp)\\.hpp$"
  "7 calls:       ^detail/ ^(all_gather|all_reduce|all_to_all|barrier|broadcast|completion_tokens|fixed_point|gather|gradient_bucketer|nonblocking|point_to_point|reduce|reduce_scatter|scatter|simulation|split|run_ranks)\\.hpp$"
  "8 umbrella:    ^collectives\\.hpp$ ^impl/ ^algorithm/(element_work|executor|executor_core|in_flight|plan_cache|progress_thread|shared_transport|workspace)\\.hpp$")

if(NOT INCLUDE_DIR)
  message(FATAL_ERROR "check_layers: pass -DINCLUDE_DIR=<the include directory>")
endif()
set(root ${INCLUDE_DIR}/collectives)

# Sets `${out}_rank` and `${out}_name` to the layer of `path` (relative to root), or
# the rank to -1 when no entry matches.
function(layer_of path out)
  foreach(layer IN LISTS layers)
    string(REGEX MATCH "^([0-9]+) ([a-z]+):" head "${layer}")
    set(rank ${CMAKE_MATCH_1})
    set(name ${CMAKE_MATCH_2})
    string(REPLACE "${head}" "" patterns "${layer}")
    string(REGEX REPLACE " +" ";" patterns "${patterns}")
    foreach(pattern IN LISTS patterns)
      if(pattern AND path MATCHES "${pattern}")
        set(${out}_rank ${rank} PARENT_SCOPE)
        set(${out}_name ${name} PARENT_SCOPE)
        return()
      endif()
    endforeach()
  endforeach()
  set(${out}_rank -1 PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE headers RELATIVE ${root} ${root}/*.hpp ${root}/*.ipp ${root}/*.cuh)
list(SORT headers)
set(problems "")
set(checked 0)
foreach(header IN LISTS headers)
  layer_of(${header} own)
  if(own_rank EQUAL -1)
    string(APPEND problems "  ${header} belongs to no layer: add it to the table in ${CMAKE_CURRENT_LIST_FILE}\n")
    continue()
  endif()
  file(STRINGS ${root}/${header} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]")
  get_filename_component(dir ${root}/${header} DIRECTORY)
  foreach(line IN LISTS lines)
    if(line MATCHES "#[ \t]*include[ \t]*\"([^\"]+)\"")
      get_filename_component(target ${CMAKE_MATCH_1} ABSOLUTE BASE_DIR ${dir})
    elseif(line MATCHES "#[ \t]*include[ \t]*<(collectives/[^>]+)>")
      set(target ${INCLUDE_DIR}/${CMAKE_MATCH_1})
    else()
      continue()  # a system or third-party header
    endif()
    file(RELATIVE_PATH included ${root} ${target})
    string(REGEX REPLACE "\\.ipp$" ".hpp" from "${header}")
    string(REGEX REPLACE "\\.ipp$" ".hpp" to "${included}")
    if(NOT from STREQUAL to)
      list(APPEND "includes_of_${from}" "${to}")
    endif()
    if(included MATCHES "^\\.\\./")
      string(APPEND problems "  ${header} includes ${included}, outside include/collectives\n")
      continue()
    endif()
    layer_of(${included} theirs)
    math(EXPR checked "${checked} + 1")
    if(theirs_rank EQUAL -1)
      string(APPEND problems "  ${header} includes ${included}, which belongs to no layer\n")
    elseif(theirs_rank GREATER own_rank)
      string(APPEND problems "  ${header} (layer ${own_rank}, ${own_name}) includes ${included} "
                             "(layer ${theirs_rank}, ${theirs_name}): an include that climbs\n")
    endif()
  endforeach()
endforeach()

# Circles: the headers left once every header that includes none of the others left is
# taken away, again and again, each include a circle or on the way to one.
set(left "")
foreach(header IN LISTS headers)
  string(REGEX REPLACE "\\.ipp$" ".hpp" node "${header}")
  list(APPEND left "${node}")
endforeach()
list(REMOVE_DUPLICATES left)
set(removed TRUE)
while(removed)
  set(removed FALSE)
  foreach(node IN LISTS left)
    set(reaches_left FALSE)
    foreach(to IN LISTS "includes_of_${node}")
      if(to IN_LIST left)
        set(reaches_left TRUE)
        break()
      endif()
    endforeach()
    if(NOT reaches_left)
      list(REMOVE_ITEM left "${node}")
      set(removed TRUE)
    endif()
  endforeach()
endwhile()
# One circle to name: follow includes among the headers left until one comes again.
if(left)
  list(GET left 0 node)
  set(path "")
  while(NOT node IN_LIST path)
    list(APPEND path "${node}")
    foreach(to IN LISTS "includes_of_${node}")
      if(to IN_LIST left)
        set(node "${to}")
        break()
      endif()
    endforeach()
  endwhile()
  list(FIND path "${node}" first)
  list(SUBLIST path ${first} -1 circle)
  list(APPEND circle "${node}")
  list(JOIN circle " -> " circle)
  list(LENGTH left in_circles)
  string(APPEND problems "  includes that form a circle: ${circle} (${in_circles} headers in circles or leading to one)\n")
endif()

list(LENGTH headers count)
if(problems)
  message(FATAL_ERROR "check_layers: headers that break the layering:\n${problems}")
endif()
message(STATUS "check_layers: ${count} headers, ${checked} includes of the library's own headers, none climbs, none forms a circle")
