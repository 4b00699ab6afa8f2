# shellcheck shell=bash
# llama.cpp's CUDA binaries carried from one device call to the next, so that a side-by-side
# call does not spend five minutes building them again. Sourced by bench_cuda.sh.
#
# A call that builds llama.cpp with SAVE_LLAMA_BIN=DIR packs the binaries it built and their
# shared libraries into DIR as llama-cuda-bin.tar.xz.part00, .part01, ... (15 MiB each, the
# most a call brings back per file), with the source commit inside. Carried back in
# .device-bin/ (or the folder LLAMA_PREBUILT names), later calls unpack them instead of
# building, as long as the source is of the same commit and llama-bench runs. A call brings
# back only a few files, so the saving call points SAVE_LLAMA_BIN at its $OUT and the bench's
# own OUT elsewhere: `SAVE_LLAMA_BIN=$OUT OUT=/tmp/bench bash scripts/device/bench_cuda.sh`
# (in that order: the shell expands each assignment after the ones before it).

llama_prebuilt_name=llama-cuda-bin.tar.xz

# Unpacks the prebuilt binaries of `commit` from `dir` into `dest`. Fails, printing why, when
# there are none, they are of another commit, or llama-bench does not start.
llama_prebuilt_unpack() {
  local dir=$1 commit=$2 dest=$3 parts
  parts=$(compgen -G "$dir/$llama_prebuilt_name.part*" | sort)
  if [ -z "$parts" ]; then
    echo "no prebuilt llama.cpp in $dir"
    return 1
  fi
  mkdir -p "$dest"
  # shellcheck disable=SC2086  # the part names hold no spaces
  if ! cat $parts | tar -C "$dest" -xJf -; then
    echo "prebuilt llama.cpp in $dir: the parts do not unpack"
    return 1
  fi
  local built
  built=$(cat "$dest/LLAMA-COMMIT" 2>/dev/null)
  if [ "$built" != "$commit" ]; then
    echo "prebuilt llama.cpp is of commit ${built:-unknown}, the source of $commit"
    return 1
  fi
  if ! LD_LIBRARY_PATH="$dest${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$dest/llama-bench" --help \
    >/dev/null 2>&1; then
    echo "prebuilt llama-bench does not run here"
    return 1
  fi
  echo "prebuilt llama.cpp $commit unpacked from $dir"
}

# Packs the binaries `names` of `src` (a build's bin folder) and every shared library there,
# with `commit`, into parts in `dest`.
llama_prebuilt_save() {
  local src=$1 commit=$2 dest=$3
  shift 3
  mkdir -p "$dest"
  rm -f "$dest/$llama_prebuilt_name".part*
  echo "$commit" >"$src/LLAMA-COMMIT"
  local libs
  libs=$(cd "$src" && compgen -G '*.so*')
  # shellcheck disable=SC2086  # library names hold no spaces
  (cd "$src" && tar -cf - LLAMA-COMMIT "$@" $libs) | xz -T0 -6 |
    split -b 15M -d - "$dest/$llama_prebuilt_name.part" || return 1
  ls -l "$dest/$llama_prebuilt_name".part*
}
