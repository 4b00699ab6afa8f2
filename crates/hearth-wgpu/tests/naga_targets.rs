//! Every WGSL module of the backend parses, validates, and translates to Metal Shading
//! Language and to SPIR-V with naga (the translator wgpu uses), subgroup variants included, so
//! a kernel that would break on Metal fails here although no Mac runs these tests.

use hearth_quant::GgmlType;
use hearth_wgpu::kernels::{int8_reader, Module, INT8_TYPES};
use naga::back::{msl, spv};
use naga::valid::{Capabilities, ValidationFlags, Validator};

fn validated(m: Module) -> (naga::Module, naga::valid::ModuleInfo) {
    let src = m.source();
    let module = naga::front::wgsl::parse_str(&src)
        .unwrap_or_else(|e| panic!("{m:?}: {}", e.emit_to_string(&src)));
    // Subgroup kernels need the subgroup capability, f16 kernels shader-f16, and only those
    // kernels may ask for them. `pack2x16float` / `unpack2x16float` need f16 precision in
    // f32 values, which every Vulkan and Metal adapter has (wgpu's downlevel
    // SHADER_F16_IN_F32).
    let mut caps = Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    if m.uses_subgroups() {
        caps |= Capabilities::SUBGROUP;
    }
    if m.uses_f16() {
        caps |= Capabilities::SHADER_FLOAT16;
    }
    let info = Validator::new(ValidationFlags::all(), caps)
        .validate(&module)
        .unwrap_or_else(|e| panic!("{m:?}: {}", e.emit_to_string(&src)));
    (module, info)
}

#[test]
fn every_module_translates_to_msl() {
    let options = msl::Options {
        // Metal 2.4 (macOS 12): simdgroup reductions and everything the kernels use.
        lang_version: (2, 4),
        ..Default::default()
    };
    for m in Module::all() {
        let (module, info) = validated(m);
        let (text, _) =
            msl::write_string(&module, &info, &options, &msl::PipelineOptions::default())
                .unwrap_or_else(|e| panic!("{m:?} to MSL: {e}"));
        assert!(
            text.contains("kernel void"),
            "{m:?}: no compute entry point in the MSL"
        );
        if m.uses_subgroups() {
            assert!(
                text.contains("simd_sum"),
                "{m:?}: subgroupAdd did not become simd_sum"
            );
        }
        if m.uses_f16() {
            assert!(
                text.contains("half2"),
                "{m:?}: vec2<f16> did not become half2"
            );
        }
    }
}

#[test]
fn every_module_translates_to_spirv() {
    for m in Module::all() {
        let (module, info) = validated(m);
        let words = spv::write_vec(&module, &info, &spv::Options::default(), None)
            .unwrap_or_else(|e| panic!("{m:?} to SPIR-V: {e}"));
        assert_eq!(
            words.first(),
            Some(&0x0723_0203),
            "{m:?}: not a SPIR-V module"
        );
    }
}

/// Subgroup kernels really use subgroup operations, and the others do not (they must run on
/// an adapter without them).
#[test]
fn subgroup_use_is_declared() {
    for m in Module::all() {
        let uses = m.source().contains("subgroupAdd");
        assert_eq!(uses, m.uses_subgroups(), "{m:?}");
    }
}

/// Modules typed with `f16` say so (they need an adapter with shader-f16), and each has a
/// twin without `f16` for adapters that lack it.
#[test]
fn f16_use_is_declared() {
    let all = Module::all();
    let f16: Vec<_> = all.iter().filter(|m| m.uses_f16()).collect();
    assert!(!f16.is_empty());
    for m in &all {
        assert_eq!(m.source().contains("enable f16;"), m.uses_f16(), "{m:?}");
    }
    for m in f16 {
        let twin = match *m {
            Module::Attention(f, true) => Module::Attention(f, false),
            Module::AttentionSplit(f, true) => Module::AttentionSplit(f, false),
            other => panic!("{other:?}: no twin without f16"),
        };
        assert!(all.contains(&twin), "{twin:?}");
    }
}

/// SPIR-V opcodes of a module (walking the instruction stream after the 5-word header).
fn opcodes(words: &[u32]) -> Vec<u32> {
    let mut ops = Vec::new();
    let mut i = 5;
    while i < words.len() {
        ops.push(words[i] & 0xffff);
        i += (words[i] >> 16).max(1) as usize;
    }
    ops
}

/// `OpSDot`: a signed integer dot product, here of four packed bytes.
const OP_SDOT: u32 = 4450;

/// The 8-bit matmuls use packed integer dot products: SPIR-V's `OpSDot` where the device
/// offers them (Vulkan 1.3 or VK_KHR_shader_integer_dot_product), and byte extraction where
/// it does not, so they run on both kinds of device.
#[test]
fn int8_matmuls_use_packed_dot_products() {
    let all = Module::all();
    let int8 = all.iter().filter(|m| {
        matches!(
            m,
            Module::MatmulInt8(..) | Module::MatmulInt8Qkv(..) | Module::MatmulInt8Glu(..)
        )
    });
    // Each type with and without the device's fma, for its three entry files; those with
    // Q8_0 activations also q/k/v and gate/up over rows normed and quantized in the kernel.
    let q8_0_acts = INT8_TYPES
        .iter()
        .filter(|&&t| int8_reader(t).is_some_and(|r| r.act == GgmlType::Q8_0))
        .count();
    assert_eq!(int8.clone().count(), 6 * INT8_TYPES.len() + 4 * q8_0_acts);
    for &m in int8 {
        assert!(m.source().contains("dot4I8Packed"), "{m:?}");
        let (module, info) = validated(m);
        let all = spv::write_vec(&module, &info, &spv::Options::default(), None)
            .unwrap_or_else(|e| panic!("{m:?} to SPIR-V: {e}"));
        assert!(opcodes(&all).contains(&OP_SDOT), "{m:?}: no OpSDot");
        let without = spv::Options {
            capabilities: Some([spv::Capability::Shader].into_iter().collect()),
            ..Default::default()
        };
        let words = spv::write_vec(&module, &info, &without, None)
            .unwrap_or_else(|e| panic!("{m:?} to SPIR-V without OpSDot: {e}"));
        assert!(!opcodes(&words).contains(&OP_SDOT), "{m:?}: OpSDot");
    }
}
