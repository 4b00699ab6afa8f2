//! Prints a GGUF file's metadata and tensor table, and how long parsing took.
//!
//! `cargo run --release -p hearth-gguf --example gguf_info -- MODEL.gguf [--all]`

use std::io::Write;
use std::time::Instant;

use hearth_gguf::GgufFile;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: gguf_info MODEL.gguf [--all]")?;
    let all = args.next().as_deref() == Some("--all");

    // Open once to warm the page cache, then time a fresh open + parse.
    drop(GgufFile::open(&path)?);
    // NOTE: the best of several runs, each excluding the drop of the previous file.
    let mut per_open = std::time::Duration::MAX;
    let mut file = GgufFile::open(&path)?;
    for _ in 0..10 {
        drop(file);
        let start = Instant::now();
        file = GgufFile::open(&path)?;
        per_open = per_open.min(start.elapsed());
    }

    // NOTE: writeln! rather than println! so a closed pipe (`| head`) ends quietly.
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{path}: GGUF v{}, {} bytes, {} metadata keys, {} tensors ({} bytes of data at offset {}), \
         alignment {}; open + parse took {per_open:?}",
        file.version(),
        file.file_size(),
        file.metadata().len(),
        file.tensors().len(),
        file.tensor_data_size(),
        file.data_offset(),
        file.alignment(),
    )?;
    for (key, value) in file.metadata().iter() {
        writeln!(out, "  {key} = {value}")?;
    }
    let shown = if all { file.tensors().len() } else { 12 };
    for t in file.tensors().iter().take(shown) {
        writeln!(
            out,
            "  {:<32} {:<6} {:?} @{} ({} bytes)",
            t.name, t.ty, t.dims, t.offset, t.n_bytes
        )?;
    }
    if shown < file.tensors().len() {
        let more = file.tensors().len() - shown;
        writeln!(out, "  ... {more} more tensors (--all)")?;
    }
    Ok(())
}
