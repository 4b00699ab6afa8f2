//! The quantization presets of `llama-quantize` this crate can write: their names, the
//! `general.file_type` value llama.cpp stores for each, and the default tensor type.

use crate::GgmlType;

/// A whole-model quantization preset, named as `llama-quantize` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum Preset {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2_K,
    Q3_K_S,
    Q3_K_M,
    Q4_K_S,
    Q4_K_M,
    Q5_K_S,
    Q5_K_M,
    Q6_K,
}

/// (preset, name, llama.cpp `llama_ftype` value, default tensor type)
const PRESETS: &[(Preset, &str, u32, GgmlType)] = &[
    (Preset::Q4_0, "Q4_0", 2, GgmlType::Q4_0),
    (Preset::Q4_1, "Q4_1", 3, GgmlType::Q4_1),
    (Preset::Q5_0, "Q5_0", 8, GgmlType::Q5_0),
    (Preset::Q5_1, "Q5_1", 9, GgmlType::Q5_1),
    (Preset::Q8_0, "Q8_0", 7, GgmlType::Q8_0),
    (Preset::Q2_K, "Q2_K", 10, GgmlType::Q2_K),
    (Preset::Q3_K_S, "Q3_K_S", 11, GgmlType::Q3_K),
    (Preset::Q3_K_M, "Q3_K_M", 12, GgmlType::Q3_K),
    (Preset::Q4_K_S, "Q4_K_S", 14, GgmlType::Q4_K),
    (Preset::Q4_K_M, "Q4_K_M", 15, GgmlType::Q4_K),
    (Preset::Q5_K_S, "Q5_K_S", 16, GgmlType::Q5_K),
    (Preset::Q5_K_M, "Q5_K_M", 17, GgmlType::Q5_K),
    (Preset::Q6_K, "Q6_K", 18, GgmlType::Q6_K),
];

impl Preset {
    /// Every preset, in the order `hearth quantize --help` lists them.
    pub fn all() -> impl Iterator<Item = Preset> {
        PRESETS.iter().map(|p| p.0)
    }

    fn entry(self) -> &'static (Preset, &'static str, u32, GgmlType) {
        // NOTE: every variant has a row; the table keeps names, ids and types in one place.
        PRESETS
            .iter()
            .find(|p| p.0 == self)
            .expect("every Preset variant has a table entry")
    }

    /// The preset named `name` (case-insensitive), or `None`.
    pub fn parse(name: &str) -> Option<Preset> {
        PRESETS
            .iter()
            .find(|p| p.1.eq_ignore_ascii_case(name))
            .map(|p| p.0)
    }

    /// The name `llama-quantize` uses (`Q4_K_M`, ...).
    pub fn name(self) -> &'static str {
        self.entry().1
    }

    /// The `general.file_type` value llama.cpp writes for this preset (its `llama_ftype`).
    pub fn file_type(self) -> u32 {
        self.entry().2
    }

    /// The type most weight matrices get.
    pub fn default_type(self) -> GgmlType {
        self.entry().3
    }
}

impl std::fmt::Display for Preset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The value llama.cpp writes to `general.quantization_version` (`GGML_QNT_VERSION`).
pub const QUANTIZATION_VERSION: u32 = 2;
