//! SentencePiece-style BPE exactly as llama.cpp runs it for `tokenizer.ggml.model = "llama"`.
//!
//! NOTE: this is not HF `tokenizers`' BPE model. SentencePiece GGUF files carry no merge list,
//! only per-token scores: any two adjacent symbols whose concatenation is a vocab token may
//! merge, the highest-scoring candidate first (ties: leftmost). Expressing that as ranked merges
//! would need every token split every possible way, so the algorithm is implemented directly:
//! a doubly linked list of symbols and a priority queue of candidate pairs, O(n log n).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A run of the input: `start..start + len` bytes, linked to its neighbours.
#[derive(Debug, Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge of symbols `left` and `right` (adjacent when it was queued).
#[derive(Debug)]
struct Candidate {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    /// Max-heap order: higher score first, then the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// The vocabulary view the SentencePiece algorithm needs.
pub struct SpmVocab<'a> {
    /// Token string -> id.
    pub token_to_id: &'a crate::TokenMap,
    /// Score by id.
    pub scores: &'a [f32],
    /// Byte value -> `<0xXX>` token id, when the vocab has it.
    pub byte_tokens: &'a [Option<u32>; 256],
}

/// Tokenizes `text` (spaces already replaced by U+2581) and appends ids to `out`.
pub fn encode(vocab: &SpmVocab<'_>, text: &str, out: &mut Vec<u32>) {
    let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
    for (start, c) in text.char_indices() {
        let index = symbols.len();
        symbols.push(Symbol {
            start,
            len: c.len_utf8(),
            prev: index.checked_sub(1),
            next: None,
        });
        if index > 0 {
            symbols[index - 1].next = Some(index);
        }
    }
    let mut queue = BinaryHeap::new();
    for right in 1..symbols.len() {
        push_candidate(vocab, text, &symbols, right - 1, right, &mut queue);
    }
    while let Some(candidate) = queue.pop() {
        let (left, right) = (symbols[candidate.left], symbols[candidate.right]);
        // Stale: one side was merged away or grew since this pair was queued.
        if left.len == 0 || right.len == 0 || left.len + right.len != candidate.len {
            continue;
        }
        symbols[candidate.left].len += right.len;
        symbols[candidate.right].len = 0;
        symbols[candidate.left].next = right.next;
        if let Some(next) = right.next {
            symbols[next].prev = Some(candidate.left);
        }
        if let Some(prev) = left.prev {
            push_candidate(vocab, text, &symbols, prev, candidate.left, &mut queue);
        }
        if let Some(next) = right.next {
            push_candidate(vocab, text, &symbols, candidate.left, next, &mut queue);
        }
    }
    let mut index = if symbols.is_empty() { None } else { Some(0) };
    while let Some(i) = index {
        let symbol = symbols[i];
        let piece = &text[symbol.start..symbol.start + symbol.len];
        match vocab.token_to_id.get(piece) {
            Some(&id) => out.push(id),
            // NOTE: merged symbols are always vocab tokens, so only single characters get here;
            // llama.cpp emits their bytes as `<0xXX>` tokens and silently skips missing ones.
            None => out.extend(piece.bytes().filter_map(|b| vocab.byte_tokens[b as usize])),
        }
        index = symbol.next;
    }
}

fn push_candidate(
    vocab: &SpmVocab<'_>,
    text: &str,
    symbols: &[Symbol],
    left: usize,
    right: usize,
    queue: &mut BinaryHeap<Candidate>,
) {
    let start = symbols[left].start;
    let len = symbols[left].len + symbols[right].len;
    if let Some(&id) = vocab.token_to_id.get(&text[start..start + len]) {
        queue.push(Candidate {
            score: vocab.scores.get(id as usize).copied().unwrap_or(0.0),
            left,
            right,
            len,
        });
    }
}
