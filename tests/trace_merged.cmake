# Runs PROGRAM as 4 processes under collectives-run with COLLECTIVES_TRACE set and checks
# the one file the launcher merges: valid JSON, a "rank N" row and call events for each
# of the 4 ranks, the parts removed, and the launcher's line saying where it is.
#   cmake -DLAUNCHER=<collectives-run> -DPROGRAM=<program> -DWORK_DIR=<dir> -P trace_merged.cmake
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(trace ${WORK_DIR}/trace.json)
execute_process(COMMAND ${CMAKE_COMMAND} -E env COLLECTIVES_TRACE=${trace}
                        ${LAUNCHER} -n 4 --timeout 120 ${PROGRAM} 3
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "the job failed (${status}):\n${out}\n${err}")
endif()
if(NOT err MATCHES "collectives-run: the trace of 4 ranks is in ${trace}")
  message(FATAL_ERROR "the launcher did not say where the trace is:\n${err}")
endif()
file(GLOB parts ${WORK_DIR}/trace.rank*)
if(parts)
  message(FATAL_ERROR "the parts were not removed: ${parts}")
endif()

file(READ ${trace} text)
string(JSON events GET "${text}" traceEvents)  # fails on a file that is not JSON
string(JSON count LENGTH "${events}")
string(JSON unit GET "${text}" displayTimeUnit)
if(NOT unit STREQUAL "ns" OR count LESS 8)
  message(FATAL_ERROR "not a trace: displayTimeUnit ${unit}, ${count} events")
endif()
foreach(rank 0 1 2 3)
  string(REGEX MATCHALL "\"ph\":\"M\",\"pid\":${rank},\"tid\":0,\"args\":{\"name\":\"rank ${rank}\"}" row "${text}")
  string(REGEX MATCHALL "\"cat\":\"call\",\"ph\":\"X\",\"ts\":[0-9.]+,\"dur\":[0-9.]+,\"pid\":${rank}," calls "${text}")
  list(LENGTH row rows)
  list(LENGTH calls call_count)
  if(NOT rows EQUAL 1 OR call_count EQUAL 0)
    message(FATAL_ERROR "rank ${rank}: ${rows} process rows named \"rank ${rank}\", ${call_count} calls")
  endif()
  message(STATUS "rank ${rank}: ${call_count} calls")
endforeach()
message(STATUS "${count} events in ${trace}")
