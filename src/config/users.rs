//! This machine's users as the config names them: what a user name may be, and the passwd
//! database's answer for one.

/// A user name this machine's passwd database does not give.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoUser {
    #[error("no user named `{0}` on this machine")]
    Unknown(String),
    #[error("looking up user `{name}`: {error}")]
    Lookup {
        name: String,
        error: nix::errno::Errno,
    },
}

/// The user of that name on this machine.
pub(super) fn lookup(name: &str) -> Result<nix::unistd::User, NoUser> {
    match nix::unistd::User::from_name(name) {
        Ok(Some(user)) => Ok(user),
        Ok(None) => Err(NoUser::Unknown(name.into())),
        Err(error) => Err(NoUser::Lookup {
            name: name.into(),
            error,
        }),
    }
}

/// A user name as the config may give it: at most 32 letters, digits, `_`, `-` and `.`, not
/// starting with `-` (never an option, a path or a shell word).
pub(super) fn is_user_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 32
        && !n.starts_with('-')
        && (n.bytes()).all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}
