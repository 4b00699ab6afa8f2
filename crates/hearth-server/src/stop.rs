//! Stop strings over streamed text: text that might be the start of a stop string is held
//! back until it either completes the stop string (and is dropped) or cannot any more.

/// Watches a stream of text pieces for any of a request's stop strings.
#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text received but not yet released: a suffix that may begin a stop string.
    held: String,
}

/// What one piece of text produced.
#[derive(Debug, PartialEq, Eq)]
pub struct StopOutcome {
    /// Text safe to send to the client now.
    pub text: String,
    /// A stop string appeared: `text` ends just before it, and generation must end.
    pub stopped: bool,
}

impl StopMatcher {
    /// A matcher for `stops`; empty strings are ignored (they would match everywhere).
    pub fn new(stops: Vec<String>) -> Self {
        Self {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
        }
    }

    /// Takes the next piece of generated text.
    pub fn push(&mut self, piece: &str) -> StopOutcome {
        self.held.push_str(piece);
        // NOTE: the earliest occurrence wins, whichever stop string it is.
        let first_match = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = first_match {
            let text = self.held[..at].to_string();
            self.held.clear();
            return StopOutcome {
                text,
                stopped: true,
            };
        }
        let keep = self.partial_suffix_len();
        let release = self.held.len() - keep;
        let text = self.held[..release].to_string();
        self.held.drain(..release);
        StopOutcome {
            text,
            stopped: false,
        }
    }

    /// Releases what is held: generation ended for another reason.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Length of the longest suffix of `held` that is a proper prefix of some stop string,
    /// cut at a character boundary.
    fn partial_suffix_len(&self) -> usize {
        let held = self.held.as_str();
        let mut best = 0;
        for stop in &self.stops {
            let max = held.len().min(stop.len().saturating_sub(1));
            for len in (best + 1..=max).rev() {
                let start = held.len() - len;
                if held.is_char_boundary(start) && stop.starts_with(&held[start..]) {
                    best = len;
                    break;
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for p in pieces {
            let o = m.push(p);
            out.push_str(&o.text);
            if o.stopped {
                return (out, true);
            }
        }
        out.push_str(&m.finish());
        (out, false)
    }

    #[test]
    fn no_stops_passes_everything_through_at_once() {
        let mut m = StopMatcher::new(vec![]);
        assert_eq!(m.push("abc").text, "abc");
        assert_eq!(m.finish(), "");
    }

    #[test]
    fn stop_split_across_pieces_is_cut_and_never_sent() {
        assert_eq!(
            run(&["\nUser:"], &["Hello", " there\n", "Us", "er: more"]),
            ("Hello there".to_string(), true)
        );
    }

    #[test]
    fn held_text_is_released_when_it_stops_matching() {
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("abcE").text, "abc");
        assert_eq!(m.push("N").text, "");
        assert_eq!(m.push("x").text, "ENx");
    }

    #[test]
    fn earliest_of_several_stops_wins() {
        assert_eq!(run(&["bb", "a"], &["xxbba"]), ("xx".to_string(), true));
        assert_eq!(run(&["c", "ab"], &["zabc"]), ("z".to_string(), true));
    }

    #[test]
    fn unmatched_tail_is_flushed_at_finish() {
        assert_eq!(run(&["STOP"], &["go ST"]), ("go ST".to_string(), false));
    }

    #[test]
    fn multibyte_text_is_never_split_inside_a_character() {
        assert_eq!(
            run(&["é!"], &["café", "é", "?"]),
            ("caféé?".to_string(), false)
        );
        assert_eq!(
            run(&["日本"], &["こんにち日", "本語"]),
            ("こんにち".to_string(), true)
        );
    }

    #[test]
    fn empty_stop_strings_are_ignored() {
        assert_eq!(run(&[""], &["abc"]), ("abc".to_string(), false));
    }
}
