//! Greedy decoding of one sequence that keeps the device busy: where the model chains steps
//! (`DecoderModel::forward_argmax_chained`), the step that runs a picked token is queued
//! before that token has come back, and takes it from the device. The host's work between
//! two steps (the wait's return, the next step's walk and launch) then overlaps the GPU's
//! instead of leaving it idle.

use crate::batch_step::SeqStep;
use crate::engine::BLOCK_SIZE;
use crate::scheduler::NOT_YET_KNOWN;
use crate::{Engine, EngineError, Sequence};

impl Engine {
    /// Greedy decoding of `seq` from `first`, the token after its cached ones: each step runs
    /// a token and picks the next (its largest logit, found on the device where there is
    /// one), which goes to `keep`. Decoding stops after `max_steps` steps or once `keep`
    /// returns false; `seq` then holds exactly the tokens run, `first` and each kept token
    /// but the last. Returns how many tokens went to `keep`.
    ///
    /// On a backend that chains steps, one step is queued ahead, running the token the step
    /// before it picks; when `keep` stops early, that step is dropped and its token taken out
    /// of `seq` again. Every other backend runs one step at a time; the tokens are the same.
    pub fn decode_greedy(
        &mut self,
        seq: &mut Sequence,
        first: u32,
        max_steps: usize,
        mut keep: impl FnMut(u32) -> bool,
    ) -> Result<usize, EngineError> {
        if !self.runner.chains_argmax() {
            let (mut token, mut steps) = (first, 0);
            while steps < max_steps {
                token = self.step_argmax(seq, &[token])?;
                steps += 1;
                if !keep(token) {
                    break;
                }
            }
            return Ok(steps);
        }
        let mut queued = 0;
        let result = self.decode_chained(seq, first, max_steps, &mut queued, &mut keep);
        // The steps still queued ran tokens that were not kept (or failed): wait for them,
        // then take their tokens out of the sequence.
        let mut ids = Vec::new();
        for _ in 0..queued {
            let _ = self.runner.take_chained(&mut ids);
        }
        if queued > 0 {
            let n = seq.tokens.len() - queued;
            let kept = seq.table.truncate(&mut self.pool, n);
            seq.tokens.truncate(kept);
        }
        result
    }

    /// [`Engine::decode_greedy`] with chained steps; `queued` counts the steps queued and not
    /// yet taken, which the caller drains.
    fn decode_chained(
        &mut self,
        seq: &mut Sequence,
        first: u32,
        max_steps: usize,
        queued: &mut usize,
        keep: &mut impl FnMut(u32) -> bool,
    ) -> Result<usize, EngineError> {
        if max_steps == 0 {
            return Ok(0);
        }
        self.queue_chained(seq, first, false)?;
        *queued += 1;
        let mut steps = 0;
        let mut ids = Vec::new();
        loop {
            // The step after the one in flight, running the token that one picks.
            if steps + *queued < max_steps {
                self.queue_chained(seq, NOT_YET_KNOWN, true)?;
                *queued += 1;
            }
            self.runner.take_chained(&mut ids)?;
            *queued -= 1;
            steps += 1;
            let &[token] = ids.as_slice() else {
                return Err(EngineError::Invalid(format!(
                    "a chained step of one row returned {} tokens",
                    ids.len()
                )));
            };
            if *queued > 0 {
                // The step queued ahead runs `token`: the sequence learns what it holds.
                let at = seq.tokens.len() - *queued;
                seq.tokens[at] = token;
            }
            if !keep(token) || *queued == 0 {
                return Ok(steps);
            }
        }
    }

    /// Queues a chained greedy step of `seq` running `token`, or with `on_device` the token
    /// the step before picks (`seq` holds [`NOT_YET_KNOWN`] for it until it comes back).
    fn queue_chained(
        &mut self,
        seq: &mut Sequence,
        token: u32,
        on_device: bool,
    ) -> Result<(), EngineError> {
        let tokens = [token];
        let mut work = [SeqStep {
            seq,
            tokens: &tokens,
            logits_rows: vec![0],
        }];
        self.run_step_with(&mut work, |runner, batch, _| {
            runner.forward_chained(batch, BLOCK_SIZE, on_device)
        })
    }
}
