# Sourced by the device scripts that run hearth's GPU backends from binaries carried in
# .device-bin/ (`$bin`), with scratch space in `$work`: the Vulkan loader (its Debian packages
# carried in .gl/, see the device notes) and NVIDIA's ICD, NVRTC on the library path, a cache
# directory, and the `gguf` Python package from the carried wheels.
# NOTE: NVIDIA's Vulkan driver (libGLX_nvidia) needs glvnd's libGLdispatch beside the loader.
if ! ldconfig -p | grep -q libvulkan || ! ldconfig -p | grep -q libGLdispatch; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd" ] && export VK_DRIVER_FILES=$icd
if ! ldconfig -p | grep -q 'libnvrtc\.so'; then
  lib=$(find /usr/local /usr/lib /opt -name 'libnvrtc.so.1[0-9]*' 2>/dev/null | sort | head -1)
  [ -n "$lib" ] && export LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export XDG_CACHE_HOME=$work/cache
export PYTHONPATH=$work/py
python3 -c 'import gguf' 2>/dev/null ||
  python3 -m pip install -q --no-index --find-links "$bin/wheels" --no-deps --target "$work/py" \
    gguf $(python3 -c 'import yaml' 2>/dev/null || echo pyyaml) >/dev/null

# Writes $3, a synthetic model of preset $1 (synth_gguf.py: real shapes, random weights)
# quantized by hearth to $2, unless it is there already; returns non-zero if it could not.
# The F16 file is named after $3, so that several can be made at once in the background.
synth_model() {
  [ -s "$3" ] && return 0
  local f16=$3.f16.gguf
  python3 "$bin/synth_gguf.py" "$1" "$f16" >/dev/null 2>&1 &&
    "$bin/hearth" quantize "$f16" "$3" "$2" >/dev/null 2>&1
  local rc=$?
  rm -f "$f16"
  return $rc
}
