//! The channel's lines as `dtd` reads them, before and after a hello: taken whole from what a
//! connection has received, none longer than [`MAX_LINE`].

use crate::protocol::channel::MAX_LINE;

/// What one read takes from a socket: on the stack while it is copied, never kept.
pub const READ_CHUNK: usize = 4096;

#[derive(Debug, thiserror::Error)]
#[error("a line longer than {MAX_LINE} bytes")]
pub struct TooLong;

/// The next whole line in `unread` (its newline searched from `searched`, where the last look
/// stopped), without the newline; `unread` keeps what came after it, and nothing when nothing
/// did. `None`: no whole line yet.
pub fn take(unread: &mut Vec<u8>, searched: usize) -> Result<Option<Vec<u8>>, TooLong> {
    let Some(i) = unread[searched..].iter().position(|b| *b == b'\n') else {
        return match unread.len() > MAX_LINE {
            true => Err(TooLong),
            false => Ok(None),
        };
    };
    let end = searched + i;
    if end > MAX_LINE {
        return Err(TooLong);
    }
    let rest = unread.split_off(end + 1);
    let mut line = std::mem::replace(unread, rest);
    line.truncate(end);
    Ok(Some(line))
}
