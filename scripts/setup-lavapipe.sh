#!/usr/bin/env bash
# Installs Mesa's lavapipe (a software Vulkan driver) and the Vulkan loader, so that the wgpu
# backend's tests run on a machine without a GPU. Idempotent: does nothing when a Vulkan driver
# is already installed. Exits 0 when a Vulkan driver is present afterwards, 1 when it is not
# (no apt-get, e.g. on macOS, or not root): the wgpu tests then say that they were skipped.
set -uo pipefail

have_vulkan() {
    ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1' &&
        compgen -G '/usr/share/vulkan/icd.d/*.json' >/dev/null
}

if have_vulkan; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup-lavapipe: no apt-get here: not installing lavapipe; wgpu tests will be skipped" >&2
    exit 1
fi
if [[ "$(id -u)" != 0 ]]; then
    echo "setup-lavapipe: not root: not installing lavapipe; wgpu tests will be skipped" >&2
    exit 1
fi
echo "setup-lavapipe: installing mesa-vulkan-drivers (lavapipe) and libvulkan1" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q mesa-vulkan-drivers libvulkan1 >/dev/null 2>&1; then
    apt-get update -q >/dev/null 2>&1
    apt-get install -y -q mesa-vulkan-drivers libvulkan1 >/dev/null 2>&1 || {
        echo "setup-lavapipe: apt-get install failed; wgpu tests will be skipped" >&2
        exit 1
    }
fi
have_vulkan
