# buildinfo.cmake — this build's identity from what was compiled, written to ${OUT} (a C header)
# at every build by the gate_buildinfo target in CMakeLists.txt; the file is touched only when its
# content changes.
#
# Inputs: SRC (the source tree), OUT (the header), FLAGS (build flags text), COMPILED (optional: a
# file listing, one per line, every source file CMake compiles into the gate binary).
#
# The build is clean only when all of this holds (settled question 1; issue 11):
#   - HEAD resolves to a commit;
#   - every file tracked at HEAD under a source folder (base/ engine/ kernels/ oracles/
#     faults/ receipts/ harness/ cli/ and the top-level folder of every compiled file),
#     CMakeLists.txt and ci/*.cmake has working content whose git blob hash (`git hash-object
#     --no-filters`, which hashes the bytes as they are: no clean filter, and no
#     assume-unchanged or skip-worktree bit can hide an edit) equals the blob at HEAD;
#   - every compiled file is one of those tracked files;
#   - no untracked or ignored file lies inside a source folder (an untracked header there can
#     shadow a tracked one), and no untracked ci/*.cmake or top-level CMakeLists.txt exists.
# Replacement objects (`git replace`) are ignored, so the tree read is the commit's own.
#
# Output: GATE_GIT_COMMIT, GATE_GIT_DIRTY (0/1), GATE_DIRTY_COUNT (number of reasons),
# GATE_DIRTY_REASON (the first reason, "" when clean), GATE_SOURCE_SHA256 (SHA-256 of the sorted
# `git ls-tree -r HEAD` lines of the source files above, each line ending in "\n": the same on
# every host at one commit, whatever it compiled), GATE_BUILD_FLAGS.

cmake_minimum_required(VERSION 3.20) # script mode: today's policies (CMP0007: keep empty list items)

set(folders base engine kernels oracles faults receipts harness cli)
set(git git --no-replace-objects -C "${SRC}" -c core.quotePath=false)
set(reasons "")
set(n_reasons 0)

macro(dirty_because text)
  if(n_reasons EQUAL 0)
    set(reasons "${text}")
  endif()
  math(EXPR n_reasons "${n_reasons} + 1")
endmacro()

# The compiled files, relative to SRC; their top-level folders are source folders too.
set(compiled "")
if(DEFINED COMPILED AND NOT COMPILED STREQUAL "")
  if(EXISTS "${COMPILED}")
    file(STRINGS "${COMPILED}" compiled_abs)
    foreach(f IN LISTS compiled_abs)
      file(RELATIVE_PATH rel "${SRC}" "${f}")
      list(APPEND compiled "${rel}")
      if(rel MATCHES "^\\.\\./")
        continue()
      endif()
      if(rel MATCHES "^([^/]+)/")
        list(APPEND folders "${CMAKE_MATCH_1}")
      endif()
    endforeach()
  else()
    dirty_because("the list of compiled files ${COMPILED} is missing")
  endif()
endif()
list(REMOVE_DUPLICATES folders)
list(SORT folders)
string(REPLACE ";" "|" folder_re "${folders}")
set(source_re "^((${folder_re})/.*|CMakeLists\\.txt|ci/[^/]*\\.cmake)$")

execute_process(COMMAND ${git} rev-parse --verify HEAD^{commit} OUTPUT_VARIABLE commit
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
  dirty_because("no git commit at ${SRC}")
endif()

# The tracked source files at HEAD: "mode type blob<TAB>path" lines.
set(tracked_lines "")
set(tracked_paths "")
set(source_text "")
if(NOT commit STREQUAL "unknown")
  execute_process(COMMAND ${git} ls-tree -r --full-tree HEAD OUTPUT_VARIABLE tree
                  ERROR_QUIET RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    dirty_because("cannot list the tree of HEAD")
    set(tree "")
  endif()
  string(REPLACE "\n" ";" tree_lines "${tree}")
  foreach(line IN LISTS tree_lines)
    if(NOT line MATCHES "^([0-7]+) ([a-z]+) ([0-9a-f]+)\t(.*)$")
      continue()
    endif()
    set(mode "${CMAKE_MATCH_1}")
    set(blob "${CMAKE_MATCH_3}")
    set(path "${CMAKE_MATCH_4}")
    if(NOT path MATCHES "${source_re}")
      continue()
    endif()
    list(APPEND tracked_lines "${line}")
    list(APPEND tracked_paths "${path}")
    set(blob_of_${path} "${blob}")
    set(mode_of_${path} "${mode}")
  endforeach()
  list(SORT tracked_lines)
  foreach(line IN LISTS tracked_lines)
    string(APPEND source_text "${line}\n")
  endforeach()
endif()
string(SHA256 source_sha256 "${source_text}")

# Every compiled file must be tracked at HEAD (then it is checked below with the others).
foreach(f IN LISTS compiled)
  if(NOT DEFINED blob_of_${f})
    dirty_because("compiled file ${f} is not tracked at HEAD")
  endif()
endforeach()

# Working content of every tracked source file against its blob at HEAD.
set(regular "")
foreach(path IN LISTS tracked_paths)
  set(full "${SRC}/${path}")
  if("${mode_of_${path}}" STREQUAL "160000")
    continue() # a submodule: its own commit is in the tree line
  elseif("${mode_of_${path}}" STREQUAL "120000")
    if(NOT IS_SYMLINK "${full}")
      dirty_because("tracked symlink ${path} is not a symlink in the working tree")
    else()
      file(READ_SYMLINK "${full}" target)
      execute_process(COMMAND ${git} cat-file blob ${blob_of_${path}} OUTPUT_VARIABLE want
                      ERROR_QUIET)
      if(NOT target STREQUAL want)
        dirty_because("symlink ${path} differs from HEAD")
      endif()
    endif()
  elseif(IS_SYMLINK "${full}" OR IS_DIRECTORY "${full}" OR NOT EXISTS "${full}")
    dirty_because("tracked file ${path} is missing or not a regular file")
  else()
    list(APPEND regular "${path}")
  endif()
endforeach()
if(regular)
  string(REPLACE ";" "\n" stdin_text "${regular}")
  get_filename_component(out_dir "${OUT}" DIRECTORY)
  set(list_file "${out_dir}/gate_buildinfo.paths")
  file(WRITE "${list_file}" "${stdin_text}\n")
  execute_process(COMMAND ${git} hash-object --no-filters --stdin-paths
                  WORKING_DIRECTORY "${SRC}" INPUT_FILE "${list_file}"
                  OUTPUT_VARIABLE hashes ERROR_QUIET RESULT_VARIABLE rc)
  file(REMOVE "${list_file}")
  string(REPLACE "\n" ";" hashes "${hashes}")
  list(FILTER hashes INCLUDE REGEX "^[0-9a-f]+$")
  list(LENGTH regular n_regular)
  list(LENGTH hashes n_hashes)
  if(NOT rc EQUAL 0 OR NOT n_regular EQUAL n_hashes)
    dirty_because("cannot hash the working copies of the source files")
  else()
    math(EXPR last "${n_regular} - 1")
    foreach(i RANGE ${last})
      list(GET regular ${i} path)
      list(GET hashes ${i} h)
      if(NOT h STREQUAL "${blob_of_${path}}")
        dirty_because("${path} differs from HEAD")
      endif()
    endforeach()
  endif()
endif()

# Untracked and ignored files (no exclude rules: ignored files count) inside the source folders.
if(NOT commit STREQUAL "unknown")
  execute_process(COMMAND ${git} ls-files --others -- ${folders} CMakeLists.txt ci
                  WORKING_DIRECTORY "${SRC}" OUTPUT_VARIABLE others ERROR_QUIET
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    dirty_because("cannot list untracked files")
  endif()
  string(REPLACE "\n" ";" others "${others}")
  foreach(f IN LISTS others)
    if(f STREQUAL "")
      continue()
    endif()
    if(f MATCHES "${source_re}")
      dirty_because("untracked file ${f} in a source folder")
    endif()
  endforeach()
endif()

if(n_reasons EQUAL 0)
  set(dirty 0)
else()
  set(dirty 1)
endif()
# C string literal: escape backslashes, quotes and control characters of file names
string(REPLACE "\\" "\\\\" reason_c "${reasons}")
string(REPLACE "\"" "\\\"" reason_c "${reason_c}")
string(REGEX REPLACE "[\n\r\t]" "?" reason_c "${reason_c}")
string(REPLACE "\\" "\\\\" flags_c "${FLAGS}")
string(REPLACE "\"" "\\\"" flags_c "${flags_c}")
set(text "/* generated by ci/buildinfo.cmake */
#define GATE_GIT_COMMIT \"${commit}\"
#define GATE_GIT_DIRTY ${dirty}
#define GATE_DIRTY_COUNT ${n_reasons}
#define GATE_DIRTY_REASON \"${reason_c}\"
#define GATE_SOURCE_SHA256 \"${source_sha256}\"
#define GATE_BUILD_FLAGS \"${flags_c}\"
")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
else()
  set(old "")
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
