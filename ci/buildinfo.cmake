# buildinfo.cmake — this build's identity from what was compiled, written to ${OUT} (a C header)
# at every build by the gate_buildinfo target in CMakeLists.txt; the file is touched only when its
# content changes.
#
# Inputs: SRC (the source tree), OUT (the header), FLAGS (build flags text), COMPILED (optional: a
# file listing, one per line, every source file CMake compiles into the gate binary), IDENTITY
# (optional: a build-identity file, ci/identity.cmake, used when git gives no commit for SRC's
# own repository, or gives another commit than the file names while the whole tree verifies
# against the file (a stale .git): the tree then counts as that commit when every file it lists
# has the SHA-256 it records, the checks below reading its list instead of git's; issue 25 R1).
#
# The build is clean only when all of this holds (settled question 1; issue 11):
#   - HEAD resolves to a commit of SRC's own repository (or the build-identity file names one);
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
#
# The build configuration is part of the identity (settled question 1; issue 23 §4). Inputs BUILD
# (the build folder: compile_commands.json, and build.ninja + CMakeFiles/rules.ninja or the
# Makefile generator's CMakeFiles/<target>.dir/link.txt) and CONFIG (gate_buildconfig.cmake,
# written at configure time by CMakeLists.txt: compiler, launchers, allowed definitions and
# dependency prefixes). The build is also dirty when:
#   - the compile or link commands of the gate binary (targets gate, gate_core, gate_base)
#     cannot be read, or a compiled file has no compile command;
#   - a command carries a flag that injects code or moves the search for it: -include,
#     -imacros, -Wp,/-Xpreprocessor, -Wa,/-Xassembler, -Wl,/-Xlinker, -fplugin, -specs, -B,
#     -wrapper, --sysroot/-isysroot, -iprefix/-iwithprefix*, -nostdinc*, -U, @response files
#     (-Wl,-rpath,DIRS and -Wl,-rpath-link,DIRS, which CMake writes for libraries linked from
#     outside the system folders, are allowed when every DIR is an absolute path that passes the
#     path rule below);
#   - a -D names a macro that is not one the project or its dependencies define (ALLOWED_DEFINES);
#   - a path in a command (-I/-isystem/-iquote/-idirafter/-L, or any absolute path in any
#     argument) lies outside the source tree, the build folder, /usr, /bin, /lib, /opt and the
#     dependency prefixes that pkg-config reported (PREFIXES);
#   - the compiler or a launcher (ccache) lies outside those prefixes;
#   - a header file sits in the build folder other than gate_buildinfo.h (the build folder is on
#     the include path: a build/sodium.h would shadow <sodium.h>), or an untracked *.h at the top
#     of the source tree;
#   - the build runs with CPATH, C_INCLUDE_PATH, CPLUS_INCLUDE_PATH, OBJC_INCLUDE_PATH,
#     GCC_EXEC_PREFIX, COMPILER_PATH, LIBRARY_PATH, LD_PRELOAD, CCACHE_PREFIX or
#     CCACHE_PREFIX_CPP naming a path outside those prefixes (they change what the compiler reads
#     without showing in a command);
#   - CONFIG records a configure-time reason (a toolchain file or CMAKE_PROJECT_INCLUDE*).
#
# Output: GATE_GIT_COMMIT, GATE_GIT_DIRTY (0/1), GATE_DIRTY_COUNT (number of reasons),
# GATE_DIRTY_REASON (the first reason, "" when clean), GATE_SOURCE_SHA256 (SHA-256 of the sorted
# `git ls-tree -r HEAD` lines of the source files above, each line ending in "\n": the same on
# every host at one commit, whatever it compiled), GATE_BUILD_FLAGS, GATE_COMPILER (id, version,
# path, real path and the SHA-256 of the compiler driver), GATE_BUILD_CONFIG_SHA256 (SHA-256 of
# the compiler identity, the launchers and the exact compile and link commands of the gate
# binary as the build folder holds them, absolute paths included: two builds with equal digests
# were compiled the same way, in the same folders).

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

# The commit: git's, for SRC's own repository (not an enclosing one); else, when git gives none
# (the tree travelled without .git, or the host has no git: issue 25 R1), the build-identity
# file IDENTITY (ci/identity.cmake) written from the clean commit where git worked, each file
# then verified against the SHA-256 it records instead of against git's blobs.
include("${CMAKE_CURRENT_LIST_DIR}/identity.cmake")
identity_git_commit("${SRC}" commit)
# A .git that travelled but is not the tree's (the device copy carried a snapshot of .git from
# an earlier commit than the one prepared: its HEAD names another commit and git calls every
# later edit dirty): when the identity file names a different commit and the whole tree verifies
# against it, the tree is that commit. A tree that does not verify keeps git's answer.
if(NOT commit STREQUAL "" AND DEFINED IDENTITY AND NOT IDENTITY STREQUAL ""
   AND EXISTS "${IDENTITY}")
  identity_read("${IDENTITY}")
  if(id_error STREQUAL "" AND NOT id_commit STREQUAL commit)
    identity_verify("${SRC}" why)
    if(why STREQUAL "")
      message(STATUS "buildinfo: git's HEAD is ${commit}, but the tree verifies as commit "
                     "${id_commit} (its build identity): a stale .git; the identity counts")
      set(commit "")
    endif()
  endif()
endif()
set(by_identity 0)
set(tree "")
if(commit STREQUAL "")
  set(commit "unknown")
  if(DEFINED IDENTITY AND NOT IDENTITY STREQUAL "" AND EXISTS "${IDENTITY}")
    identity_read("${IDENTITY}")
    if(id_error STREQUAL "")
      set(commit "${id_commit}")
      set(by_identity 1)
      foreach(p IN LISTS id_paths)
        string(APPEND tree "${id_line_${p}}\n")
      endforeach()
    else()
      dirty_because("no git commit at ${SRC}, and the build identity is unusable: ${id_error}")
    endif()
  else()
    dirty_because("no git commit at ${SRC} (and no build-identity file)")
  endif()
endif()

# The tracked source files at HEAD: "mode type blob<TAB>path" lines.
set(tracked_lines "")
set(tracked_paths "")
set(source_text "")
if(NOT commit STREQUAL "unknown")
  if(NOT by_identity)
    execute_process(COMMAND ${git} ls-tree -r --full-tree HEAD OUTPUT_VARIABLE tree
                    ERROR_QUIET RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      dirty_because("cannot list the tree of HEAD")
      set(tree "")
    endif()
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
  elseif(by_identity)
    identity_sha("${full}" "${mode_of_${path}}" sha)
    if(sha STREQUAL "missing")
      dirty_because("tracked file ${path} is missing or not a regular file")
    elseif(NOT sha STREQUAL "${id_sha_${path}}")
      dirty_because("${path} differs from commit ${commit} (its build identity)")
    endif()
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
if(by_identity) # every file there that the commit does not hold
  foreach(dir IN LISTS folders ITEMS ci)
    if(IS_DIRECTORY "${SRC}/${dir}")
      file(GLOB_RECURSE found LIST_DIRECTORIES false RELATIVE "${SRC}" "${SRC}/${dir}/*")
      foreach(f IN LISTS found)
        if(f MATCHES "${source_re}" AND NOT DEFINED id_sha_${f})
          dirty_because("untracked file ${f} in a source folder")
        endif()
      endforeach()
    endif()
  endforeach()
elseif(NOT commit STREQUAL "unknown")
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

# ---- the build configuration (issue 23 §4) --------------------------------------------------
set(config_text "")
set(compiler_text "unknown")
set(COMPILER "")
set(COMPILER_ID "")
set(COMPILER_VERSION "")
set(CUDA_COMPILER "")
set(LAUNCHERS "")
set(ALLOWED_DEFINES "")
set(PREFIXES "")
set(CONFIGURE_DIRTY "")
if(DEFINED CONFIG AND EXISTS "${CONFIG}")
  include("${CONFIG}")
else()
  dirty_because("the build configuration (gate_buildconfig.cmake) is not recorded")
endif()
foreach(why IN LISTS CONFIGURE_DIRTY)
  dirty_because("${why}")
endforeach()

# Where a file the compiler or linker reads may live.
set(allowed_roots "${SRC}" /usr /bin /lib /lib64 /opt ${PREFIXES})
if(DEFINED BUILD AND NOT BUILD STREQUAL "")
  list(APPEND allowed_roots "${BUILD}")
endif()
set(real_roots "")
foreach(r IN LISTS allowed_roots)
  if(NOT r STREQUAL "")
    file(REAL_PATH "${r}" rr)
    list(APPEND real_roots "${rr}")
  endif()
endforeach()

# check_path(path where): appends a reason to _bad unless path (relative: to BUILD) lies under
# an allowed root, after symbolic links are resolved.
function(check_path path where)
  set(base "${BUILD}")
  if(base STREQUAL "")
    set(base "${SRC}")
  endif()
  file(REAL_PATH "${path}" real BASE_DIRECTORY "${base}")
  string(LENGTH "${real}" lr)
  foreach(r IN LISTS real_roots)
    string(LENGTH "${r}" n)
    if(real STREQUAL r OR r STREQUAL "/")
      return()
    endif()
    if(lr GREATER n)
      string(SUBSTRING "${real}" 0 ${n} head)
      string(SUBSTRING "${real}" ${n} 1 sep)
      if(head STREQUAL r AND sep STREQUAL "/")
        return()
      endif()
    endif()
  endforeach()
  set(_bad "${_bad};${where} reads ${path}, outside the source tree, the build folder and the system and dependency prefixes" PARENT_SCOPE)
endfunction()

set(deny_re "^(-include|--include|-imacros|--imacros|-Wp,|-Xpreprocessor|-Wa,|-Xassembler|-Wl,|-Xlinker|-fplugin|-specs|--specs|-B|-wrapper|--sysroot|-isysroot|-iprefix|-iwithprefix|-nostdinc|-U|@)")

# check_args(args where): every argument of one compile or link command.
function(check_args args where)
  set(_bad "")
  set(prev "")
  foreach(a IN LISTS args)
    if(a STREQUAL "")
      continue()
    endif()
    if(prev MATCHES "^-(I|L|isystem|iquote|idirafter)$")
      check_path("${a}" "${where}")
    elseif(NOT prev MATCHES "^-(o|MF|MT|MQ|c|x)$" OR a MATCHES "^/")
      if(a MATCHES "^-Wl,-rpath(-link)?,([^,]+)$")
        # the run-time search path CMake writes for the libraries it links (the carried
        # dependency prefix, the CUDA toolkit's library folder): only where a clean build may
        # read from (issue 25: the device build links its libraries from a prefix)
        string(REPLACE ":" ";" dirs "${CMAKE_MATCH_2}")
        foreach(d IN LISTS dirs)
          if(d MATCHES "^/")
            check_path("${d}" "${where} (run-time search path)")
          else()
            set(_bad "${_bad};${where} has run-time search path entry ${d}, which is not an absolute path")
          endif()
        endforeach()
      elseif(a MATCHES "^-Wl,--dependency-file=([^,]+)$")
        # the linker writes the files it read into a depfile (CMake 3.27+ with Ninja, where the
        # linker supports it: CMAKE_LINK_DEPENDS_USE_LINKER); it changes nothing the linker reads,
        # only where that list goes: inside the build folder (seen on the GPU host's CMake)
        check_path("${CMAKE_MATCH_1}" "${where} (linker depfile)")
      elseif(a MATCHES "${deny_re}" OR a MATCHES ",(-include|-imacros|-Wp|-B|-specs|-fplugin)")
        set(_bad "${_bad};${where} has flag ${a}, which no clean build of gate uses")
      elseif(a MATCHES "^-D([A-Za-z_][A-Za-z0-9_]*)")
        list(FIND ALLOWED_DEFINES "${CMAKE_MATCH_1}" k)
        if(k LESS 0)
          set(_bad "${_bad};${where} defines ${CMAKE_MATCH_1}, which neither gate nor its dependencies define")
        endif()
      else()
        string(REGEX REPLACE "^-(I|L|isystem|iquote|idirafter)" "" rest "${a}")
        if(NOT rest STREQUAL a AND NOT rest MATCHES "^/")
          check_path("${rest}" "${where}") # -Irelative
        else()
          string(REGEX REPLACE "[=,:]" ";" pieces "${rest}")
          foreach(p IN LISTS pieces)
            if(p MATCHES "^/")
              check_path("${p}" "${where}")
            endif()
          endforeach()
        endif()
      endif()
    endif()
    set(prev "${a}")
  endforeach()
  set(_bad "${_bad}" PARENT_SCOPE)
endfunction()

macro(take_bad)
  foreach(b IN LISTS _bad)
    if(NOT b STREQUAL "")
      dirty_because("${b}")
    endif()
  endforeach()
  set(_bad "")
endmacro()

# tool_sha(PATH REAL_VAR SHA_VAR): a tool's real path and its SHA-256 ("missing" when absent)
function(tool_sha path real_var sha_var)
  file(REAL_PATH "${path}" r)
  set(s "missing")
  if(EXISTS "${r}")
    file(SHA256 "${r}" s)
  endif()
  set(${real_var} "${r}" PARENT_SCOPE)
  set(${sha_var} "${s}" PARENT_SCOPE)
endfunction()

# check_tool(PATH WHAT): check_path over one tool, each finding a reason the build is dirty
macro(check_tool path what)
  set(_bad "")
  check_path("${path}" "${what}")
  take_bad()
endmacro()

# the compiler and the launchers: identity, and where they live
if(NOT COMPILER STREQUAL "")
  tool_sha("${COMPILER}" cc_real cc_sha)
  set(compiler_text "${COMPILER_ID} ${COMPILER_VERSION} ${COMPILER} (${cc_real}) sha256:${cc_sha}")
  check_tool("${COMPILER}" "the compiler")
else()
  dirty_because("the compiler is not recorded")
endif()
string(APPEND config_text "compiler ${compiler_text}\n")
if(NOT CUDA_COMPILER STREQUAL "")
  tool_sha("${CUDA_COMPILER}" nv_real nv_sha)
  string(APPEND config_text "cuda compiler ${CUDA_COMPILER} (${nv_real}) sha256:${nv_sha}\n")
  check_tool("${CUDA_COMPILER}" "the CUDA compiler")
endif()
foreach(l IN LISTS LAUNCHERS)
  if(l STREQUAL "")
    continue()
  endif()
  if(NOT IS_ABSOLUTE "${l}")
    find_program(lp NAMES "${l}" NO_CACHE)
    if(NOT lp)
      dirty_because("launcher ${l} is not on PATH")
      continue()
    endif()
    set(l "${lp}")
  endif()
  tool_sha("${l}" l_real l_sha)
  string(APPEND config_text "launcher ${l} (${l_real}) sha256:${l_sha}\n")
  check_tool("${l}" "launcher ${l}")
endforeach()

# the environment of this build
foreach(v CPATH C_INCLUDE_PATH CPLUS_INCLUDE_PATH OBJC_INCLUDE_PATH GCC_EXEC_PREFIX COMPILER_PATH
          LIBRARY_PATH LD_PRELOAD CCACHE_PREFIX CCACHE_PREFIX_CPP)
  string(REGEX REPLACE "[: ]" ";" entries "$ENV{${v}}")
  set(_bad "")
  foreach(e IN LISTS entries)
    if(NOT e STREQUAL "")
      check_path("${e}" "the build's environment (${v})")
    endif()
  endforeach()
  take_bad()
endforeach()

# the compile commands of the gate binary
set(target_re "^CMakeFiles/(gate|gate_core|gate_base)\\.dir/")
if(NOT DEFINED BUILD OR BUILD STREQUAL "" OR NOT EXISTS "${BUILD}/compile_commands.json")
  dirty_because("the compile commands (compile_commands.json) are not recorded")
else()
  file(READ "${BUILD}/compile_commands.json" cc_json)
  string(JSON n_cmd ERROR_VARIABLE jerr LENGTH "${cc_json}")
  if(jerr)
    dirty_because("compile_commands.json cannot be read: ${jerr}")
    set(n_cmd 0)
  endif()
  set(cmd_lines "")
  set(have_cmd "")
  if(n_cmd GREATER 0)
    math(EXPR last_cmd "${n_cmd} - 1")
    foreach(i RANGE ${last_cmd})
      string(JSON cmd ERROR_VARIABLE jerr GET "${cc_json}" ${i} command)
      if(jerr OR NOT cmd MATCHES " -o ([^ ]+)" OR NOT CMAKE_MATCH_1 MATCHES "${target_re}")
        continue() # another target's object (tests, gate_broken_twin)
      endif()
      string(JSON file GET "${cc_json}" ${i} file)
      string(JSON dir GET "${cc_json}" ${i} directory)
      list(APPEND cmd_lines "${dir} ${cmd}")
      file(RELATIVE_PATH rel "${SRC}" "${file}")
      list(APPEND have_cmd "${rel}")
      separate_arguments(args UNIX_COMMAND "${cmd}")
      list(POP_FRONT args cc) # the compiler, checked above
      set(_bad "")
      check_args("${args}" "the compile command of ${rel}")
      take_bad()
    endforeach()
  endif()
  foreach(f IN LISTS compiled)
    if(f MATCHES "\\.(c|cu)$")
      list(FIND have_cmd "${f}" k)
      if(k LESS 0)
        dirty_because("compiled file ${f} has no compile command")
      endif()
    endif()
  endforeach()
  list(SORT cmd_lines)
  foreach(c IN LISTS cmd_lines)
    string(APPEND config_text "compile ${c}\n")
  endforeach()

  # the link commands: Ninja's build statements and rules, or the Makefiles' link.txt
  set(link_text "")
  if(EXISTS "${BUILD}/build.ninja" AND EXISTS "${BUILD}/CMakeFiles/rules.ninja")
    set(rule_re "^[A-Z_]+_LINKER__(gate|gate_core|gate_base)_[A-Za-z]*$")
    file(STRINGS "${BUILD}/build.ninja" ninja_lines)
    set(in_block 0)
    foreach(line IN LISTS ninja_lines)
      if(line MATCHES "^build ([^:]+): ([A-Za-z0-9_]+)")
        set(in_block 0)
        if(CMAKE_MATCH_2 MATCHES "${rule_re}")
          set(in_block 1)
          string(APPEND link_text "${line}\n")
        endif()
      elseif(in_block AND line MATCHES "^  ([A-Z_]+) = (.*)$")
        string(APPEND link_text "${line}\n")
        set(var "${CMAKE_MATCH_1}")
        set(value "${CMAKE_MATCH_2}")
        if(var MATCHES "^(FLAGS|LINK_FLAGS|LINK_LIBRARIES|LINK_PATH|LANGUAGE_COMPILE_FLAGS|PRE_LINK|POST_BUILD)$")
          separate_arguments(args UNIX_COMMAND "${value}")
          set(_bad "")
          check_args("${args}" "the link of the gate binary (${var})")
          take_bad()
        endif()
      elseif(NOT line MATCHES "^  ")
        set(in_block 0)
      endif()
    endforeach()
    file(STRINGS "${BUILD}/CMakeFiles/rules.ninja" rule_lines)
    set(in_rule 0)
    foreach(line IN LISTS rule_lines)
      if(line MATCHES "^rule ([A-Za-z0-9_]+)")
        set(in_rule 0)
        if(CMAKE_MATCH_1 MATCHES "${rule_re}" OR CMAKE_MATCH_1 MATCHES
                                                  "^[A-Z_]+_COMPILER__(gate|gate_core|gate_base)_[A-Za-z]*$")
          set(in_rule 1)
          string(APPEND link_text "${line}\n")
        endif()
      elseif(in_rule AND line MATCHES "^  command = (.*)$")
        string(APPEND link_text "${line}\n")
        separate_arguments(args UNIX_COMMAND "${CMAKE_MATCH_1}")
        set(_bad "")
        set(expect_prog 1)
        foreach(a IN LISTS args)
          # the programs a rule runs: the first word of each command (after a launcher, the next)
          if(a MATCHES "^\\$")
            continue()
          elseif(a STREQUAL "&&")
            set(expect_prog 1)
          elseif(expect_prog)
            list(FIND LAUNCHERS "${a}" k)
            if(a MATCHES "^/")
              check_path("${a}" "a build rule")
            elseif(k LESS 0 AND NOT a STREQUAL ":")
              set(_bad "${_bad};a build rule runs ${a}, which is not a recorded launcher")
            endif()
            if(k LESS 0)
              set(expect_prog 0)
            endif()
          endif()
        endforeach()
        take_bad()
      endif()
    endforeach()
  else()
    foreach(t gate gate_core gate_base)
      set(lt "${BUILD}/CMakeFiles/${t}.dir/link.txt")
      if(EXISTS "${lt}")
        file(READ "${lt}" txt)
        string(APPEND link_text "link ${t}: ${txt}\n")
        separate_arguments(args UNIX_COMMAND "${txt}")
        set(_bad "")
        check_args("${args}" "the link of ${t}")
        take_bad()
      else()
        dirty_because("the link command of ${t} is not recorded (neither build.ninja nor ${lt})")
      endif()
    endforeach()
  endif()
  string(APPEND config_text "${link_text}")

  # headers the include path could pick up that nobody committed
  file(GLOB_RECURSE build_headers LIST_DIRECTORIES false RELATIVE "${BUILD}" "${BUILD}/*.h")
  foreach(h IN LISTS build_headers)
    if(NOT h STREQUAL "gate_buildinfo.h" AND NOT h MATCHES "^CMakeFiles/")
      dirty_because("header ${h} in the build folder (on the include path) is not gate's")
    endif()
  endforeach()
endif()
if(by_identity)
  file(GLOB top_headers LIST_DIRECTORIES false RELATIVE "${SRC}" "${SRC}/*.h")
  list(FILTER top_headers EXCLUDE REGEX "^$")
  set(_known "")
  foreach(h IN LISTS top_headers)
    if(NOT DEFINED id_sha_${h})
      list(APPEND _known "${h}")
    endif()
  endforeach()
  set(top_headers "${_known}")
else()
  execute_process(COMMAND ${git} ls-files --others -- ":(glob)*.h" WORKING_DIRECTORY "${SRC}"
                  OUTPUT_VARIABLE top_headers ERROR_QUIET)
  string(REPLACE "\n" ";" top_headers "${top_headers}")
endif()
foreach(h IN LISTS top_headers)
  if(NOT h STREQUAL "")
    dirty_because("untracked header ${h} at the top of the source tree (on the include path)")
  endif()
endforeach()
string(SHA256 config_sha256 "${config_text}")

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
string(REPLACE "\\" "\\\\" compiler_c "${compiler_text}")
string(REPLACE "\"" "\\\"" compiler_c "${compiler_c}")
set(text "/* generated by ci/buildinfo.cmake */
#define GATE_GIT_COMMIT \"${commit}\"
#define GATE_GIT_DIRTY ${dirty}
#define GATE_DIRTY_COUNT ${n_reasons}
#define GATE_DIRTY_REASON \"${reason_c}\"
#define GATE_SOURCE_SHA256 \"${source_sha256}\"
#define GATE_BUILD_FLAGS \"${flags_c}\"
#define GATE_COMPILER \"${compiler_c}\"
#define GATE_BUILD_CONFIG_SHA256 \"${config_sha256}\"
")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
else()
  set(old "")
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
