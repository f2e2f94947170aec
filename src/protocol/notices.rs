//! `<shared_dir>/notices`: why workers left and by when (README, "The job contract"), written by
//! `dtd run` before it signals the job; the torchrun helper (`dt_torch.py`) reads it too.

/// The file's name in the shared directory.
pub const NOTICES_FILE: &str = "notices";
