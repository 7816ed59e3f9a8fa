# Runs PROGRAM (it makes all_to_allv calls) as 3 processes under collectives-run at each
# COLLECTIVES_DEBUG level and checks what each prints: INFO starts with the version and
# the launcher, and names the algorithm of a v-form call with its real size, DEBUG adds a line per finished call, TRACE a line per
# step; a word the library does not know is a warning, and the program still runs.
#   cmake -DLAUNCHER=<collectives-run> -DPROGRAM=<program> -P log_levels.cmake
cmake_minimum_required(VERSION 3.25)

function(run_at level)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env COLLECTIVES_DEBUG=${level} ${LAUNCHER} -n 3 --timeout 120 ${PROGRAM}
                  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "COLLECTIVES_DEBUG=${level}: the job failed (${status}):\n${out}\n${err}")
  endif()
  set(log "${err}" PARENT_SCOPE)
endfunction()

function(expect level pattern wanted)
  if(wanted AND NOT log MATCHES "${pattern}")
    message(FATAL_ERROR "COLLECTIVES_DEBUG=${level}: no line matches '${pattern}':\n${log}")
  elseif(NOT wanted AND log MATCHES "${pattern}")
    message(FATAL_ERROR "COLLECTIVES_DEBUG=${level}: a line matches '${pattern}', which this level must not print:\n${log}")
  endif()
endfunction()

set(v_form_info "collectives INFO: rank [0-9]+: all_to_allv of [1-9][0-9]* bytes sent and [1-9][0-9]* received runs ")
set(call_line "collectives DEBUG: rank [0-9]+: all_to_allv \\(call [0-9]+, [a-z_]+\\): finished in [0-9]+\\.[0-9]+ us, [0-9]+ bytes sent, [0-9]+ received")
set(step_line "collectives TRACE: rank [0-9]+: all_to_allv \\(call [0-9]+\\): post send to rank [0-9]+, [0-9]+ bytes")

run_at(WARN)
expect(WARN "collectives (INFO|DEBUG|TRACE):" NO)
run_at(INFO)
expect(INFO "${v_form_info}" YES)
# Rank 0's first INFO line names the library's version and whose variables were read.
string(REGEX MATCH "\\[0\\] collectives INFO: [^\n]*" first "${log}")
if(NOT first MATCHES "collectives INFO: collectives [0-9]+\\.[0-9]+\\.[0-9]+: rank 0 of 3 \\(0 of 3 on this host\\), from the variables of torchrun-style environment$")
  message(FATAL_ERROR "COLLECTIVES_DEBUG=INFO: rank 0's first line is not the version and launcher:\n${first}\n${log}")
endif()
expect(INFO "collectives (DEBUG|TRACE):" NO)
run_at(DEBUG)
expect(DEBUG "${v_form_info}" YES)
expect(DEBUG "${call_line}" YES)
expect(DEBUG "collectives TRACE:" NO)
run_at(trace)
expect(TRACE "${call_line}" YES)
expect(TRACE "${step_line}" YES)
expect(TRACE "collectives TRACE: rank [0-9]+: all_to_allv \\(call [0-9]+\\): complete recv from rank [0-9]+, [0-9]+ bytes" YES)

# Started directly (its ranks are threads, no launcher), with a word the library does not take.
execute_process(COMMAND ${CMAKE_COMMAND} -E env COLLECTIVES_DEBUG=LOUD ${PROGRAM}
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE log)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "COLLECTIVES_DEBUG=LOUD: the program failed (${status}):\n${out}\n${log}")
endif()
expect(LOUD "collectives WARN: COLLECTIVES_DEBUG=LOUD is not a choice \\(expected WARN, INFO, DEBUG, TRACE, warn, info, debug, trace, 0, 1, 2 or 3\\)[^\n]*; logging warnings only" YES)
message(STATUS "every level prints what it should")
