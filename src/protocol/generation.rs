//! The `generation` and `ack` files: a generation number and a newline.
//!
//! `<shared_dir>/generation` is written by the master after the host files, so a job that reads
//! it first never acknowledges a generation newer than the host file it then reads. The `ack`
//! file (default `<shared_dir>/ack`) is written by the job, or by `dtctl ack G`, once it has
//! applied generation G; the master reads it.

/// The generation file's name in the shared directory (not configurable: jobs look for it).
pub const GENERATION_FILE: &str = "generation";
/// The ack file's default name in the shared directory.
pub const ACK_FILE: &str = "ack";

/// A generation number and its newline; anything longer is not one.
pub const MAX_BYTES: u64 = 32;

pub fn render(generation: u64) -> String {
    format!("{generation}\n")
}

/// The number, with any surrounding white space a job may have written; `None` if it is not one.
pub fn parse(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_round_trip() {
        for g in [0, 7, u64::MAX] {
            let text = render(g);
            assert!(text.len() as u64 <= MAX_BYTES);
            assert_eq!(parse(&text), Some(g));
        }
        assert_eq!(render(12), "12\n");
        assert_eq!(parse(" 7\r\n"), Some(7));
    }

    /// Golden bodies under tests/fixtures/protocol/, read by the example job's tests too.
    #[test]
    fn the_golden_generation_and_ack_are_one_format() {
        let generation = include_str!("../../tests/fixtures/protocol/generation");
        let ack = include_str!("../../tests/fixtures/protocol/ack");
        assert_eq!(render(8), generation);
        assert_eq!((parse(generation), parse(ack)), (Some(8), Some(8)));
    }

    #[test]
    fn anything_else_is_rejected() {
        for bad in [
            "",
            "\n",
            "seven",
            "-1",
            "7 8",
            "1e3",
            "18446744073709551616",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
