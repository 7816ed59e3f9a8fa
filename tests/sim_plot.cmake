# collectives-sim --plot: a small run writes a PNG (its signature, a plausible size, and
# an image that PIL opens at the size collectives-sim-plot.py draws).
#   cmake -DSIM=<collectives-sim> -DWORK_DIR=<folder> -P sim_plot.cmake
cmake_minimum_required(VERSION 3.25)

set(png ${WORK_DIR}/all_reduce.png)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
execute_process(COMMAND ${SIM} all_reduce --ranks 8 --model uniform -b 1K -e 1M -f 32 --plot ${png}
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "collectives-sim --plot failed (${status}):\n${out}\n${err}")
endif()
if(NOT EXISTS ${png})
  message(FATAL_ERROR "collectives-sim --plot wrote no ${png}:\n${out}")
endif()
file(READ ${png} signature LIMIT 8 HEX)
file(SIZE ${png} bytes)
if(NOT signature STREQUAL "89504e470d0a1a0a" OR bytes LESS 5000 OR bytes GREATER 1000000)
  message(FATAL_ERROR "${png} is not a plot: it starts ${signature} and has ${bytes} bytes")
endif()
execute_process(COMMAND /usr/bin/python3 -c "import sys; from PIL import Image; print(*Image.open(sys.argv[1]).size)" ${png}
                RESULT_VARIABLE status OUTPUT_VARIABLE size ERROR_VARIABLE err)
if(NOT status EQUAL 0 OR NOT size MATCHES "^([0-9]+) ([0-9]+)\n$"
   OR CMAKE_MATCH_1 LESS 600 OR CMAKE_MATCH_2 LESS 250)
  message(FATAL_ERROR "PIL does not read ${png} as a plot of two panels (${status}): ${size}${err}")
endif()
message(STATUS "${png}: ${bytes} bytes, ${CMAKE_MATCH_1}x${CMAKE_MATCH_2}")
