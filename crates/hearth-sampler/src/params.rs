//! Sampling parameters and their validation.

/// An invalid sampling parameter, naming the field at fault.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SamplerError {
    /// `field` holds `value`, which is outside what the field accepts.
    #[error("invalid sampling parameter `{field}` = {value}: expected {expected}")]
    InvalidParam {
        /// Field name as in [`SamplingParams`] (and the request APIs).
        field: &'static str,
        /// The rejected value, formatted.
        value: String,
        /// What the field accepts.
        expected: &'static str,
    },
}

/// How to pick the next token. Defaults match llama.cpp's.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// Divides the logits before the draw; 0 = greedy (argmax after penalties).
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 = off.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability sums to at least
    /// `top_p`; 1 = off.
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one; 0 = off.
    pub min_p: f32,
    /// Repeated tokens: positive logits divided by it, negative ones multiplied; 1 = off.
    pub repeat_penalty: f32,
    /// How many of the most recent history tokens the penalties look at; 0 = penalties
    /// off, `usize::MAX` = the whole history.
    pub repeat_last_n: usize,
    /// Subtracted from a token's logit once per occurrence in the window.
    pub frequency_penalty: f32,
    /// Subtracted from a token's logit if it occurs in the window at all.
    pub presence_penalty: f32,
    /// RNG seed; `None` = a fresh random seed per [`crate::Sampler`].
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            seed: None,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding: always the most likely token (after penalties).
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    /// Checks every field; the error names the first field at fault.
    pub fn validate(&self) -> Result<(), SamplerError> {
        check(
            "temperature",
            self.temperature,
            "a finite number >= 0 (0 = greedy)",
            |t| t.is_finite() && t >= 0.0,
        )?;
        check("top_p", self.top_p, "a number in (0, 1] (1 = off)", |p| {
            p > 0.0 && p <= 1.0
        })?;
        check("min_p", self.min_p, "a number in [0, 1] (0 = off)", |p| {
            (0.0..=1.0).contains(&p)
        })?;
        check(
            "repeat_penalty",
            self.repeat_penalty,
            "a finite number > 0 (1 = off)",
            |r| r.is_finite() && r > 0.0,
        )?;
        check(
            "frequency_penalty",
            self.frequency_penalty,
            "a finite number",
            f32::is_finite,
        )?;
        check(
            "presence_penalty",
            self.presence_penalty,
            "a finite number",
            f32::is_finite,
        )?;
        Ok(())
    }
}

fn check(
    field: &'static str,
    value: f32,
    expected: &'static str,
    ok: impl Fn(f32) -> bool,
) -> Result<(), SamplerError> {
    // NOTE: written as "ok(value)" so NaN, for which every comparison is false, fails.
    if ok(value) {
        Ok(())
    } else {
        Err(SamplerError::InvalidParam {
            field,
            value: value.to_string(),
            expected,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(p: SamplingParams) -> Option<&'static str> {
        match p.validate() {
            Ok(()) => None,
            Err(SamplerError::InvalidParam { field, .. }) => Some(field),
        }
    }

    #[test]
    fn defaults_are_llama_cpp_like_and_valid() {
        let d = SamplingParams::default();
        assert_eq!(
            (d.temperature, d.top_k, d.top_p, d.min_p),
            (0.8, 40, 0.95, 0.05)
        );
        assert_eq!((d.repeat_penalty, d.repeat_last_n), (1.0, 64));
        assert_eq!(
            (d.frequency_penalty, d.presence_penalty, d.seed),
            (0.0, 0.0, None)
        );
        assert_eq!(d.validate(), Ok(()));
        assert_eq!(SamplingParams::greedy().validate(), Ok(()));
    }

    #[test]
    fn each_bad_field_is_named() {
        let d = SamplingParams::default;
        let cases = [
            (
                SamplingParams {
                    temperature: -0.1,
                    ..d()
                },
                "temperature",
            ),
            (
                SamplingParams {
                    temperature: f32::NAN,
                    ..d()
                },
                "temperature",
            ),
            (
                SamplingParams {
                    temperature: f32::INFINITY,
                    ..d()
                },
                "temperature",
            ),
            (SamplingParams { top_p: 0.0, ..d() }, "top_p"),
            (SamplingParams { top_p: 1.5, ..d() }, "top_p"),
            (
                SamplingParams {
                    top_p: f32::NAN,
                    ..d()
                },
                "top_p",
            ),
            (SamplingParams { min_p: -0.5, ..d() }, "min_p"),
            (SamplingParams { min_p: 1.01, ..d() }, "min_p"),
            (
                SamplingParams {
                    min_p: f32::NAN,
                    ..d()
                },
                "min_p",
            ),
            (
                SamplingParams {
                    repeat_penalty: 0.0,
                    ..d()
                },
                "repeat_penalty",
            ),
            (
                SamplingParams {
                    repeat_penalty: f32::NAN,
                    ..d()
                },
                "repeat_penalty",
            ),
            (
                SamplingParams {
                    frequency_penalty: f32::NAN,
                    ..d()
                },
                "frequency_penalty",
            ),
            (
                SamplingParams {
                    presence_penalty: f32::NEG_INFINITY,
                    ..d()
                },
                "presence_penalty",
            ),
        ];
        for (p, field) in cases {
            assert_eq!(field_of(p), Some(field));
        }
        let ok = SamplingParams {
            top_p: 1.0,
            min_p: 1.0,
            frequency_penalty: -2.0,
            ..d()
        };
        assert_eq!(field_of(ok), None);
    }

    #[test]
    fn error_message_names_field_value_and_range() {
        let err = SamplingParams {
            top_p: 1.5,
            ..SamplingParams::default()
        }
        .validate();
        let msg = err.unwrap_err().to_string();
        assert_eq!(
            msg,
            "invalid sampling parameter `top_p` = 1.5: expected a number in (0, 1] (1 = off)"
        );
    }
}
