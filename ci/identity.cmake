# identity.cmake — the build-identity file: a clean commit's identity that travels with a tree
# whose .git does not (issue 25 R1: the offline GPU host may receive the tree without .git, or
# have no git at all; without an identity every build there records commit "unknown", dirty,
# and every receipt it signs is refused).
#
# The file (default .deb/IDENTITY, git-ignored, carried with .deb/) is written here, where git
# works, from a clean commit, and read there instead of git:
#   # comment lines
#   commit <40 hex digits>
#   file <sha256> <mode> <type> <blob>\t<path>      one per tracked file at the commit
# where "<mode> <type> <blob>\t<path>" is the file's `git ls-tree -r --full-tree HEAD` line and
# <sha256> the SHA-256 of its content (of the link text for a symlink, "-" for a submodule). The
# writer checks first that the working tree is the commit: `git status --porcelain` succeeds with
# no output, and every tracked file's working content hashes (`git hash-object --no-filters`, so
# an assume-unchanged or skip-worktree edit cannot hide) to its blob at HEAD. The reader needs no
# git: each file's SHA-256 is computed from the tree it builds. ci/buildinfo.cmake reads it when
# git gives no commit for the source tree itself (no .git, no git, or a .git of an enclosing
# repository) and derives the same commit and source digest as git would; ci/gpu-check.sh's
# preflight runs the check mode below. The file is as trustworthy as a carried .git: it proves
# that the tree is the commit it names, not who wrote it.
#
# Script mode:
#   cmake -DMODE=write -DSRC=<tree> -DIDENTITY=<file> -P ci/identity.cmake
#       writes the file (exit 1, nothing written and a stale file removed, when the tree is not
#       its clean HEAD)
#   cmake -DMODE=check -DSRC=<tree> -DIDENTITY=<file> -P ci/identity.cmake
#       prints "identity: commit C, N tracked files verified" (exit 0) or "identity: <reason>"
#       (exit 1): a tracked file missing or differing, or a file no commit holds in a source
#       folder (base/ engine/ kernels/ oracles/ faults/ receipts/ harness/ cli/ ci/*.cmake)
# Included (MODE unset): defines identity_read(FILE) and identity_git_commit(SRC VAR).

cmake_minimum_required(VERSION 3.20)

# identity_git_commit(SRC VAR): VAR = the commit git gives for SRC's own repository, or "" when
# git fails or SRC is not the top of its repository (a tree copied without its .git into another
# repository's folder must not take that repository's commit).
function(identity_git_commit src var)
  set(${var} "" PARENT_SCOPE)
  set(git git --no-replace-objects -C "${src}")
  execute_process(COMMAND ${git} rev-parse --show-toplevel OUTPUT_VARIABLE top
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR top STREQUAL "")
    return()
  endif()
  file(REAL_PATH "${top}" top_real)
  file(REAL_PATH "${src}" src_real)
  if(NOT top_real STREQUAL src_real)
    return()
  endif()
  execute_process(COMMAND ${git} rev-parse --verify HEAD^{commit} OUTPUT_VARIABLE commit
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
  if(rc EQUAL 0 AND commit MATCHES "^[0-9a-f]+$")
    set(${var} "${commit}" PARENT_SCOPE)
  endif()
endfunction()

# identity_read(FILE): sets id_error ("" when the file is well formed), id_commit, id_paths (the
# tracked paths) and, per path P, id_line_<P> ("mode type blob\tpath") and id_sha_<P>.
macro(identity_read file)
  set(id_error "")
  set(id_commit "")
  set(id_paths "")
  if(NOT EXISTS "${file}")
    set(id_error "no build-identity file ${file}")
  else()
    file(STRINGS "${file}" _id_lines)
    foreach(_l IN LISTS _id_lines)
      if(_l MATCHES "^#" OR _l STREQUAL "")
        continue()
      elseif(_l MATCHES "^commit ([0-9a-f]+)$")
        set(id_commit "${CMAKE_MATCH_1}")
      elseif(_l MATCHES "^file ([0-9a-f]+|-) (([0-7]+) ([a-z]+) ([0-9a-f]+)\t(.+))$")
        set(id_sha_${CMAKE_MATCH_6} "${CMAKE_MATCH_1}")
        set(id_line_${CMAKE_MATCH_6} "${CMAKE_MATCH_2}")
        list(APPEND id_paths "${CMAKE_MATCH_6}")
      elseif(id_error STREQUAL "")
        set(id_error "${file}: malformed line '${_l}'")
      endif()
    endforeach()
    if(id_error STREQUAL "" AND NOT id_commit MATCHES "^[0-9a-f]+$")
      set(id_error "${file} names no commit")
    elseif(id_error STREQUAL "" AND NOT id_paths)
      set(id_error "${file} lists no files")
    endif()
  endif()
endmacro()

# identity_sha(FULL MODE VAR): the SHA-256 the identity records for a working file of that mode
function(identity_sha full mode var)
  if(mode STREQUAL "160000")
    set(s "-")
  elseif(mode STREQUAL "120000")
    if(IS_SYMLINK "${full}")
      file(READ_SYMLINK "${full}" t)
      string(SHA256 s "${t}")
    else()
      set(s "missing")
    endif()
  elseif(IS_SYMLINK "${full}" OR IS_DIRECTORY "${full}" OR NOT EXISTS "${full}")
    set(s "missing")
  else()
    file(SHA256 "${full}" s)
  endif()
  set(${var} "${s}" PARENT_SCOPE)
endfunction()

# identity_verify(SRC VAR): after identity_read, VAR = "" when every file the identity lists has
# its recorded content under SRC and no file the commit lacks sits in a source folder (base/
# engine/ kernels/ oracles/ faults/ receipts/ harness/ cli/ ci/*.cmake); else the first reason.
function(identity_verify src var)
  set(${var} "" PARENT_SCOPE)
  foreach(path IN LISTS id_paths)
    string(REGEX MATCH "^[0-7]+" mode "${id_line_${path}}")
    identity_sha("${src}/${path}" "${mode}" sha)
    if(sha STREQUAL "missing")
      set(${var} "tracked file ${path} of commit ${id_commit} is missing or not a ${mode} entry"
          PARENT_SCOPE)
      return()
    elseif(NOT sha STREQUAL "${id_sha_${path}}")
      set(${var} "${path} differs from commit ${id_commit}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  foreach(dir base engine kernels oracles faults receipts harness cli ci)
    if(NOT IS_DIRECTORY "${src}/${dir}")
      continue()
    endif()
    file(GLOB_RECURSE found LIST_DIRECTORIES false RELATIVE "${src}" "${src}/${dir}/*")
    foreach(f IN LISTS found)
      if(dir STREQUAL "ci" AND NOT f MATCHES "^ci/[^/]*\\.cmake$")
        continue()
      endif()
      if(NOT DEFINED id_sha_${f})
        set(${var} "${f} is not a file of commit ${id_commit} (a file in a source folder)"
            PARENT_SCOPE)
        return()
      endif()
    endforeach()
  endforeach()
endfunction()

if(NOT DEFINED MODE)
  return() # included
endif()
if(NOT DEFINED SRC OR NOT DEFINED IDENTITY)
  message(FATAL_ERROR "identity.cmake: -DSRC=<tree> and -DIDENTITY=<file> are needed")
endif()

function(fail text) # the reason on one line, then stop with exit status 1
  message("identity: ${text}")
  message(FATAL_ERROR "identity.cmake ${MODE}: failed")
endfunction()

if(MODE STREQUAL "write")
  file(REMOVE "${IDENTITY}")
  identity_git_commit("${SRC}" commit)
  if(commit STREQUAL "")
    fail("no commit: ${SRC} is not the top of a git repository with a HEAD")
  endif()
  set(git git --no-replace-objects -C "${SRC}" -c core.quotePath=false)
  execute_process(COMMAND ${git} status --porcelain OUTPUT_VARIABLE st ERROR_VARIABLE err
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    fail("git status failed: ${err}")
  elseif(NOT st STREQUAL "")
    string(REGEX MATCHALL "\n" nl "${st}")
    list(LENGTH nl n)
    string(REGEX REPLACE "\n.*" "" first "${st}")
    fail("the tree is not its commit (${n} git status entries, first: '${first}'): commit first")
  endif()
  execute_process(COMMAND ${git} ls-tree -r --full-tree HEAD OUTPUT_VARIABLE tree
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    fail("cannot list the tree of HEAD")
  endif()
  string(REPLACE "\n" ";" tree_lines "${tree}")
  set(regular "")
  set(body "")
  foreach(line IN LISTS tree_lines)
    if(line STREQUAL "")
      continue()
    endif()
    if(NOT line MATCHES "^([0-7]+) ([a-z]+) ([0-9a-f]+)\t(.+)$")
      fail("unexpected ls-tree line '${line}'")
    endif()
    set(mode "${CMAKE_MATCH_1}")
    set(blob "${CMAKE_MATCH_3}")
    set(path "${CMAKE_MATCH_4}")
    if(path MATCHES "[\\\\\"]" OR path MATCHES "[][]")
      fail("tracked path '${path}' has a character the identity file cannot hold")
    endif()
    identity_sha("${SRC}/${path}" "${mode}" sha)
    if(sha STREQUAL "missing")
      fail("tracked file ${path} is missing or of another kind than at HEAD")
    endif()
    if(mode MATCHES "^100")
      list(APPEND regular "${path}")
      set(blob_of_${path} "${blob}")
    endif()
    string(APPEND body "file ${sha} ${line}\n")
  endforeach()
  # the working content is the commit's, byte for byte (no index bit can hide an edit)
  string(REPLACE ";" "\n" paths_text "${regular}")
  set(list_file "${IDENTITY}.paths")
  get_filename_component(id_dir "${IDENTITY}" DIRECTORY)
  file(MAKE_DIRECTORY "${id_dir}")
  file(WRITE "${list_file}" "${paths_text}\n")
  execute_process(COMMAND ${git} hash-object --no-filters --stdin-paths WORKING_DIRECTORY "${SRC}"
                  INPUT_FILE "${list_file}" OUTPUT_VARIABLE hashes RESULT_VARIABLE rc)
  file(REMOVE "${list_file}")
  string(REPLACE "\n" ";" hashes "${hashes}")
  list(FILTER hashes INCLUDE REGEX "^[0-9a-f]+$")
  list(LENGTH regular n_regular)
  list(LENGTH hashes n_hashes)
  if(NOT rc EQUAL 0 OR NOT n_regular EQUAL n_hashes)
    fail("cannot hash the working copies of the tracked files")
  endif()
  if(n_regular GREATER 0)
    math(EXPR last "${n_regular} - 1")
    foreach(i RANGE ${last})
      list(GET regular ${i} path)
      list(GET hashes ${i} h)
      if(NOT h STREQUAL "${blob_of_${path}}")
        fail("${path} differs from HEAD (an index bit hides the edit from git status)")
      endif()
    endforeach()
  endif()
  list(LENGTH tree_lines n)
  file(WRITE "${IDENTITY}.tmp"
       "# gate build identity (ci/identity.cmake): the tree is this commit; verified on the\n"
       "# build host against each file's SHA-256 when git gives no commit there\n"
       "commit ${commit}\n${body}")
  file(RENAME "${IDENTITY}.tmp" "${IDENTITY}")
  message("identity: wrote ${IDENTITY} for commit ${commit}")
elseif(MODE STREQUAL "check")
  identity_read("${IDENTITY}")
  if(NOT id_error STREQUAL "")
    fail("${id_error}")
  endif()
  identity_verify("${SRC}" why)
  if(NOT why STREQUAL "")
    fail("${why}")
  endif()
  list(LENGTH id_paths n)
  message("identity: commit ${id_commit}, ${n} tracked files verified")
else()
  message(FATAL_ERROR "identity.cmake: MODE must be write or check, not '${MODE}'")
endif()
