//! Free text the controller writes into API fields (event notes, reasons,
//! status messages), bounded so that one long error never makes a write
//! fail.

/// `s` cut to `max` characters, with an ellipsis when cut.
pub fn cap(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}
