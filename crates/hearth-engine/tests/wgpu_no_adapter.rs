//! `--device wgpu` on a machine where wgpu finds no adapter: a clear one-line error naming
//! wgpu, never a panic or a hang. The Vulkan loader is pointed at a driver list that does not
//! exist, which is what a machine without a Vulkan driver looks like (on macOS wgpu uses Metal,
//! which these variables do not affect, so the test checks nothing there).

mod common;

use hearth_engine::{Device, Engine, EngineOptions};

#[test]
fn wgpu_without_an_adapter_is_a_clear_error() {
    if cfg!(target_os = "macos") {
        eprintln!("SKIPPED: Metal cannot be hidden from wgpu");
        return;
    }
    // NOTE: this file is its own test binary, so the variables reach no other test.
    std::env::set_var("VK_ICD_FILENAMES", "/nonexistent/hearth-no-driver.json");
    std::env::set_var("VK_DRIVER_FILES", "/nonexistent/hearth-no-driver.json");
    let path = common::model_path("tiny-qwen3-f16.gguf");
    let opts = EngineOptions {
        n_ctx: 64,
        n_threads: 1,
        device: Device::Wgpu,
        ..EngineOptions::default()
    };
    let err = match Engine::load(&path, &opts) {
        Ok(_) => panic!("wgpu found an adapter although no Vulkan driver is listed"),
        Err(e) => e.to_string(),
    };
    eprintln!("{err}");
    assert!(
        err.contains("wgpu") && err.contains("adapter") && !err.contains('\n'),
        "{err}"
    );
    // The same machine with --device cpu still runs the model.
    let cpu = EngineOptions {
        device: Device::Cpu,
        ..opts
    };
    assert!(Engine::load(&path, &cpu).is_ok());
}
