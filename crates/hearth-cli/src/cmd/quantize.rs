//! `hearth quantize`: requantize a GGUF model with one of llama.cpp's presets, writing the
//! same tensor types, bytes and metadata as `llama-quantize` (without an importance matrix).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Args;
use hearth_gguf::{GgufFile, GgufWriter, Metadata, TensorInfo, Value};
use hearth_quant::{
    choose_types, convert_tensors, llama_tensor_order, supports_dequantize, supports_quantize,
    GgmlType, ModelShape, Preset, TensorJob, TensorSpec, TypeChoice, QUANTIZATION_VERSION,
};

#[derive(Args)]
pub struct QuantizeArgs {
    /// Input GGUF model (F32, F16, BF16, or already quantized with --allow-requantize)
    input: PathBuf,
    /// Output GGUF file
    output: PathBuf,
    /// Preset: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S Q3_K_M Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K
    #[arg(value_name = "TYPE")]
    preset: String,
    /// Worker threads (default: one per core)
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Requantize tensors that are already quantized (dequantizing first loses precision)
    #[arg(long)]
    allow_requantize: bool,
}

/// Metadata keys llama.cpp drops from a quantized file (it writes one file, not splits).
const SPLIT_KEYS: [&str; 3] = ["split.no", "split.count", "split.tensors.count"];

const MIB: f64 = 1024.0 * 1024.0;

pub fn run(a: QuantizeArgs) -> anyhow::Result<()> {
    let preset = Preset::parse(&a.preset).with_context(|| {
        let names: Vec<&str> = Preset::all().map(Preset::name).collect();
        format!(
            "unknown quantization type '{}'; expected one of {}",
            a.preset,
            names.join(", ")
        )
    })?;
    check_distinct_paths(&a.input, &a.output)?;
    let file = GgufFile::open(&a.input).with_context(|| a.input.display().to_string())?;
    let model = model_shape(file.metadata()).with_context(|| a.input.display().to_string())?;
    let tensors = file.tensors();
    let specs: Vec<TensorSpec<'_>> = tensors
        .iter()
        .map(|t| TensorSpec {
            name: &t.name,
            dims: &t.dims,
            ty: t.ty,
        })
        .collect();
    let choices = choose_types(preset, &model, &specs)
        .with_context(|| format!("{}: {preset}", a.input.display()))?;
    check_conversions(tensors, &choices, a.allow_requantize, preset)?;
    // NOTE: create the output before the (long) conversion, so a path that cannot be written
    // fails at once.
    std::fs::File::create(&a.output)
        .with_context(|| format!("cannot write output file {}", a.output.display()))?;
    let result = quantize_file(&file, &choices, preset, &a);
    if result.is_err() {
        let _ = std::fs::remove_file(&a.output);
    }
    result
}

/// Refuses an output path that names the input file (the input is memory-mapped while the
/// output is written).
fn check_distinct_paths(input: &Path, output: &Path) -> anyhow::Result<()> {
    let input_real = input
        .canonicalize()
        .with_context(|| format!("cannot open input file {}", input.display()))?;
    if output.canonicalize().is_ok_and(|o| o == input_real) {
        bail!(
            "output file {} is the input file; write to a different path",
            output.display()
        );
    }
    Ok(())
}

/// The model facts the preset mixes depend on.
fn model_shape(meta: &Metadata) -> anyhow::Result<ModelShape> {
    let arch = meta.require_str("general.architecture")?.to_string();
    let count = |key: &str| -> anyhow::Result<u32> {
        let key = format!("{arch}.{key}");
        let value = match meta.get(&key) {
            None => return Ok(0),
            // Per-layer head counts are arrays; llama.cpp's n_gqa() reads layer 0.
            Some(Value::Array(items)) => items.first(),
            Some(v) => Some(v),
        };
        let n = value.and_then(Value::as_integer).unwrap_or(0);
        u32::try_from(n).with_context(|| format!("metadata key '{key}': {n} is out of range"))
    };
    Ok(ModelShape {
        n_layer: count("block_count")?,
        n_head: count("attention.head_count")?,
        n_head_kv: count("attention.head_count_kv")?,
        n_expert: count("expert_count")?,
        arch,
    })
}

/// Checks every conversion the mix asks for before any work starts.
fn check_conversions(
    tensors: &[TensorInfo],
    choices: &[TypeChoice],
    allow_requantize: bool,
    preset: Preset,
) -> anyhow::Result<()> {
    let mut requantized = 0;
    for (t, c) in tensors.iter().zip(choices) {
        if c.ty == t.ty {
            continue;
        }
        if !supports_quantize(c.ty) {
            bail!(
                "tensor '{}': the {preset} mix gives it {} (llama.cpp's fallback for rows of {} \
                 elements), which hearth cannot write yet",
                t.name,
                c.ty,
                t.row_len()
            );
        }
        if !supports_dequantize(t.ty) {
            bail!("tensor '{}': cannot read its type {}", t.name, t.ty);
        }
        if !matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
            if !allow_requantize {
                bail!(
                    "tensor '{}' is already quantized ({}); requantizing loses precision, \
                     pass --allow-requantize to do it anyway",
                    t.name,
                    t.ty
                );
            }
            requantized += 1;
        }
    }
    if requantized > 0 {
        eprintln!(
            "hearth: warning: requantizing {requantized} already quantized tensors; the result \
             is less accurate than quantizing from F16 or F32"
        );
    }
    Ok(())
}

/// Converts the tensors, prints one line per tensor and a total, and writes the file.
fn quantize_file(
    file: &GgufFile,
    choices: &[TypeChoice],
    preset: Preset,
    a: &QuantizeArgs,
) -> anyhow::Result<()> {
    let tensors = file.tensors();
    let names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
    let order = llama_tensor_order(&names);
    let to_convert: Vec<usize> = order
        .iter()
        .copied()
        .filter(|&i| choices[i].ty != tensors[i].ty)
        .collect();
    let jobs: Vec<TensorJob<'_>> = to_convert
        .iter()
        .map(|&i| TensorJob {
            src_ty: tensors[i].ty,
            src: file.tensor_data(&tensors[i]),
            row_len: tensors[i].row_len() as usize,
            dst_ty: choices[i].ty,
        })
        .collect();
    let mut converted: Vec<Option<Vec<u8>>> = vec![None; tensors.len()];
    for (&i, r) in to_convert.iter().zip(convert_tensors(&jobs, a.threads)) {
        converted[i] = Some(r.with_context(|| format!("tensor '{}'", tensors[i].name))?);
    }
    let mut writer = GgufWriter::new();
    copy_metadata(file.metadata(), &mut writer, preset)?;
    let (mut size_in, mut size_out, mut n_fallback) = (0u64, 0u64, 0);
    for (n, &i) in order.iter().enumerate() {
        let t = &tensors[i];
        let data = converted[i].take();
        let bytes = data.as_deref().unwrap_or_else(|| file.tensor_data(t));
        writer
            .add_tensor(&t.name, &t.dims, choices[i].ty, bytes)
            .with_context(|| format!("tensor '{}'", t.name))?;
        n_fallback += usize::from(choices[i].fallback);
        size_in += t.n_bytes;
        size_out += bytes.len() as u64;
        println!(
            "[{:4}/{:4}] {:40} {:16} {:>6} -> {:7} {:9.3} MiB -> {:9.3} MiB",
            n + 1,
            tensors.len(),
            t.name,
            format!("{:?}", t.dims),
            t.ty.name(),
            format!(
                "{}{}",
                choices[i].ty.name(),
                if choices[i].fallback { "*" } else { "" }
            ),
            t.n_bytes as f64 / MIB,
            bytes.len() as f64 / MIB
        );
    }
    writer
        .write(&a.output)
        .with_context(|| format!("cannot write output file {}", a.output.display()))?;
    println!(
        "{preset}: {} tensors, {} quantized, {n_fallback} with a fallback type (*); \
         {:.2} MiB -> {:.2} MiB; wrote {}",
        tensors.len(),
        to_convert.len(),
        size_in as f64 / MIB,
        size_out as f64 / MIB,
        a.output.display()
    );
    Ok(())
}

/// Copies every metadata entry but the split keys, then appends the quantization version and
/// file type, in the order llama.cpp leaves them (it removes and re-adds both keys).
fn copy_metadata(meta: &Metadata, writer: &mut GgufWriter, preset: Preset) -> anyhow::Result<()> {
    const VERSION_KEY: &str = "general.quantization_version";
    const FILE_TYPE_KEY: &str = "general.file_type";
    for (key, value) in meta.iter() {
        if key == VERSION_KEY || key == FILE_TYPE_KEY || SPLIT_KEYS.contains(&key) {
            continue;
        }
        writer
            .add_kv(key, value.clone())
            .with_context(|| format!("metadata key '{key}'"))?;
    }
    writer.add_kv(VERSION_KEY, Value::U32(QUANTIZATION_VERSION))?;
    writer.add_kv(FILE_TYPE_KEY, Value::U32(preset.file_type()))?;
    Ok(())
}
