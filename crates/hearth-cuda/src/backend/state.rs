//! Per-forward state of the CUDA backend: the transient memory, the staged host data, and
//! whether the pass runs op by op, is being recorded into a CUDA graph, or replays one.
//!
//! ```text
//!  begin_forward(None)        eager: every op launches
//!  begin_forward(Some(k)) #1  eager, and k is remembered (the arena grows to what k needs)
//!  begin_forward(Some(k)) #2  record: ops launch into a stream capture; to_host ends it,
//!                             instantiates the graph, copies the staged host data and
//!                             launches the graph
//!  begin_forward(Some(k)) #3+ replay: ops only refresh their host data in pinned memory;
//!                             to_host copies it to the device and launches the graph
//!                             (or the graph went out as soon as the data was staged,
//!                             `staging.rs`, or was queued ahead behind a gate that the
//!                             staged data releases, `step_gate.rs`)
//! ```

use std::cell::Cell;
use std::collections::{HashMap, HashSet};

use cudarc::driver::{CudaEvent, CudaGraph};

use super::chained::Chain;
use super::decode_layers::DecodeLayersState;
use super::memory::{Arena, Kept, Pinned, Staging};
use super::step_gate::GatePass;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    Eager,
    Record(u64),
    Replay(u64),
}

impl Mode {
    /// Whether ops put work on the stream (eagerly or into the recording).
    pub fn launches(self) -> bool {
        !matches!(self, Mode::Replay(_))
    }
}

/// A recorded decode step.
pub(super) struct Graph {
    pub exec: CudaGraph,
    /// Bytes of host data its pass staged: a replay has staged all it reads once it has
    /// staged as many.
    pub staged: usize,
    /// Where its pass's transient memory ended (`Arena::position`): a replay's later
    /// allocations start past it.
    pub arena_end: (usize, usize),
    /// The page-locked memory its pass's last matmul writes (`host_output.rs`), an argument
    /// of the recorded kernel: a pass aimed elsewhere records afresh.
    pub host_target: Option<HostTarget>,
    /// Whether that matmul writes it there itself (its result needs no copy after the
    /// graph), so that the step may be queued ahead of the next pass (`step_gate.rs`).
    pub writes_host: bool,
}

/// Page-locked memory that a pass's last matmul writes straight into: the host address of
/// `len` f32 (see `host_output.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct HostTarget {
    pub ptr: u64,
    pub len: usize,
}

// SAFETY: a graph is only launched or dropped under the backend's state mutex, never from two
// threads at once (the driver's rule for graph objects).
unsafe impl Send for Graph {}

/// Whether a replayed step's graph goes out as soon as the pass has staged the host data it
/// reads, while the host walks the rest of the pass (`staging.rs`): the walk's other work
/// (addresses, checks) reaches the device only as kernel arguments, and those the recording
/// holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum EarlyLaunch {
    /// The graph goes out when the pass ends (recordings, op by op, chained steps).
    Off,
    /// Once this many bytes are staged.
    At(usize),
    /// It has gone out: the pass may stage nothing more.
    Done,
}

/// Which host array a staged copy came from: the same array staged twice in one pass (the
/// positions for every layer's rope, the batch for every layer's attention) is copied once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct StageKey {
    pub ptr: usize,
    pub len: usize,
    pub what: &'static str,
}

pub(super) struct State {
    pub arena: Arena,
    pub staging: Staging,
    /// Staging buffers replaced by a larger one during a pass: kept until every pass that
    /// staged into them has ended.
    pub retired_staging: Vec<Staging>,
    /// Page-locked memory that large read-backs land in first (see `forward.rs`); grown on
    /// demand, kept between passes.
    pub read_back: Option<Pinned>,
    /// One event per chunk of such a read-back, marking when it has arrived.
    pub read_back_events: Vec<CudaEvent>,
    /// The GLU GEMV's group counters (u32 each).
    pub counters: Kept,
    /// A weight's f16 values for cuBLAS, one row chunk at a time (`launch.rs` `gemm`).
    pub dequantized: Kept,
    pub mode: Mode,
    /// Where this pass's last matmul may write on the host (`host_output.rs`).
    pub host_target: Option<HostTarget>,
    pub early_launch: EarlyLaunch,
    pub graphs: HashMap<u64, Graph>,
    /// Keys seen once (recorded at their second pass).
    pub seen: HashSet<u64>,
    /// Keys whose recording failed: they run eagerly from then on.
    pub unrecordable: HashSet<u64>,
    /// Arrays staged in this pass and where their copies live on the device.
    pub staged: Vec<(StageKey, u64)>,
    /// Rows already quantized to 8 bits for the int8-activation kernels, by a fused norm
    /// (kernels/model.cu `rms_norm_quantize`) or for an earlier projection of the same rows;
    /// forgotten when any other kernel is handed the rows or cuBLAS writes them.
    pub quantized: Cell<Option<Quantized>>,
    /// Rows already rounded to f16 for a cuBLAS GEMM (the k and v projections after q, up after
    /// gate); forgotten under the same rules.
    pub halved: Cell<Option<Halved>>,
    /// What the one-kernel decode step keeps between passes.
    pub decode_layers: DecodeLayersState,
    /// The addresses of each recorded step's tensors, in allocation order; a replay hands
    /// them out again (`tensor_at` counts how many it has).
    pub tensor_log: HashMap<u64, Vec<u64>>,
    pub tensor_at: usize,
    /// Chained greedy steps' buffers and the ids not yet taken (`chained.rs`).
    pub chain: Chain,
    /// The pass's dealings with the gate of steps queued ahead (`step_gate.rs`).
    pub gate: GatePass,
    /// How many blocks of a kernel, at a block size and shared memory, a multiprocessor holds
    /// at once (`launch.rs` `resident_per_sm`).
    pub resident: Vec<((&'static str, u32, u32), usize)>,
}

/// A tensor's f16 copy: the tensor's address, the copy's, and the copy's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Halved {
    pub of: u64,
    pub at: u64,
    pub bytes: usize,
}

/// A tensor's 8-bit copy: the tensor's address and the copy's values and group scales.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Quantized {
    pub of: u64,
    pub q: u64,
    pub ds: u64,
}

impl State {
    pub fn new(staging: Staging) -> Self {
        Self {
            arena: Arena::new(),
            staging,
            retired_staging: Vec::new(),
            read_back: None,
            read_back_events: Vec::new(),
            counters: Kept::new("counter allocation"),
            dequantized: Kept::new("dequantized weight allocation"),
            mode: Mode::Eager,
            host_target: None,
            early_launch: EarlyLaunch::Off,
            graphs: HashMap::new(),
            seen: HashSet::new(),
            unrecordable: HashSet::new(),
            staged: Vec::new(),
            quantized: Cell::new(None),
            halved: Cell::new(None),
            decode_layers: DecodeLayersState::default(),
            tensor_log: HashMap::new(),
            tensor_at: 0,
            chain: Chain::new(),
            gate: GatePass::default(),
            resident: Vec::new(),
        }
    }

    /// Called at the start of every pass, once its mode is set.
    pub fn start_tensor_log(&mut self) {
        self.tensor_at = 0;
        if let Mode::Record(k) = self.mode {
            self.tensor_log.insert(k, Vec::new());
        }
    }

    /// While recording: remembers a tensor's address.
    pub fn log_tensor(&mut self, ptr: u64) {
        if let Mode::Record(k) = self.mode {
            if let Some(log) = self.tensor_log.get_mut(&k) {
                log.push(ptr);
            }
        }
    }

    /// While replaying: the address the recording gave the next tensor (None past its end,
    /// which a pass making the recording's calls never reaches).
    pub fn replayed_tensor(&mut self) -> Option<u64> {
        let Mode::Replay(k) = self.mode else {
            return None;
        };
        let ptr = *self.tensor_log.get(&k)?.get(self.tensor_at)?;
        self.tensor_at += 1;
        Some(ptr)
    }

    /// Forget the kept copies of the rows at `ptr`: something may be about to change them.
    /// The f16 copy's memory goes back to the arena (the work that read it is queued).
    pub fn forget_copies_of(&self, ptr: u64) {
        if self.quantized.get().is_some_and(|k| k.of == ptr) {
            self.quantized.set(None);
        }
        if let Some(h) = self.halved.get().filter(|h| h.of == ptr) {
            self.halved.set(None);
            self.arena.give_back(h.at, h.bytes);
        }
    }

    /// Forget every kept copy (a new pass reuses the transient memory they live in).
    pub fn forget_copies(&self) {
        self.quantized.set(None);
        self.halved.set(None);
    }

    /// The mode a pass with `key` runs in; remembers first sightings.
    pub fn mode_for(&mut self, key: Option<u64>) -> Mode {
        match key {
            None => Mode::Eager,
            Some(k) if self.graphs.contains_key(&k) => Mode::Replay(k),
            Some(k) if self.unrecordable.contains(&k) => Mode::Eager,
            Some(k) if !self.seen.insert(k) => Mode::Record(k),
            Some(_) => Mode::Eager,
        }
    }

    /// Where an array staged earlier in this pass lives on the device.
    pub fn staged_at(&self, key: StageKey) -> Option<u64> {
        self.staged
            .iter()
            .find(|(k, _)| *k == key)
            .map(|&(_, dev)| dev)
    }

    /// Forget recording `key`: its next pass runs op by op, the one after records again.
    pub fn drop_graph(&mut self, key: u64) {
        self.graphs.remove(&key);
        self.seen.remove(&key);
        self.tensor_log.remove(&key);
    }

    /// Forget every recording (their kernels read staged data from a buffer being replaced).
    pub fn drop_graphs(&mut self) {
        self.graphs.clear();
        self.seen.clear();
        self.tensor_log.clear();
    }
}
