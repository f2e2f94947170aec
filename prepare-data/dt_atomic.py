"""Writing a file atomically, the one copy the Python side of dynamic-training shares: the
prepare-data step's markers (dtprepare.py), the job's ack, progress and pid files
(templates/job/dt_torch.py, examples/elastic_job.py). Standard library only.

Each imports it as `import dt_atomic` from its own directory, so it ships beside each of them:
next to dtprepare.py and the prepare-data program (a directory only root writes), and in the
release next to dt_torch.py (the stack installs both to /usr/local/lib/dt/). It lives here, in
prepare-data/, because the prepare-data step runs as root and must import only from its own
directory; the examples and dt_torch's tests add this directory to the path in a checkout.
"""
import contextlib
import os
import tempfile

__all__ = ["atomic_write", "fsync_dir"]


def atomic_write(path, data, durable=True):
    """Replaces `path` with `data` (bytes) through a temp file in the same directory and a rename,
    so a reader sees the old content or the new, never part of it. The file is 0644: mkstemp's
    0600 would hide it from a daemon's user. `durable` fsyncs the file and then its directory, so
    the new content survives a crash of the machine; without the directory's fsync a crash right
    after the rename can lose a file a reader was already told about."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), 0o644)
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(directory)


def fsync_dir(directory):
    """Makes a rename or a newly created file in `directory` survive a crash of the machine."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
