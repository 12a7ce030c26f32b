"""Atomic writes under real SIGKILL: the target is old or new, never torn, and the
temporary file a killed writer leaves is removed by the next write (and only ours)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from anygpu.io import checkpoint, nanosign

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGKILL and /proc")

# Saves a checkpoint, killing itself with SIGKILL inside the named os call.
WRITER = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    from anygpu.io import checkpoint
    point = sys.argv[2]
    real = getattr(os, point)
    def killer(*args, **kwargs):
        if point != "fsync" or not os.path.isdir(os.readlink(f"/proc/self/fd/{args[0]}")):
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    setattr(os, point, killer)
    checkpoint.save({"w": np.full(1 << 16, 7.0, np.float32)}, sys.argv[1])
    """
)


def temporaries(folder):
    return sorted(name for name in os.listdir(folder) if name.endswith(".tmp"))


@pytest.mark.parametrize("point", ["fsync", "replace"])
def test_killed_save_leaves_old_file_and_next_save_cleans_up(tmp_path, point):
    path = tmp_path / "model.safetensors"
    checkpoint.save({"w": np.zeros(4, np.float32)}, path)
    before = path.read_bytes()
    killed = subprocess.run([sys.executable, "-c", WRITER, str(path), point], capture_output=True)
    assert killed.returncode == -signal.SIGKILL
    assert path.read_bytes() == before  # the old checkpoint, whole
    left = temporaries(tmp_path)
    assert len(left) == 1 and left[0].startswith(".model.safetensors.anygpu-")
    assert os.path.getsize(tmp_path / left[0]) > 1 << 16  # a checkpoint-sized leak

    untouched = [".model.safetensors.deadbeef.tmp", ".other.safetensors.anygpu-h-1-0123456789ab.tmp"]
    for name in untouched:  # not ours / another target's: left alone
        (tmp_path / name).write_bytes(b"x")
    checkpoint.save({"w": np.ones(4, np.float32)}, path)
    assert temporaries(tmp_path) == sorted(untouched)
    np.testing.assert_array_equal(checkpoint.load(path)["w"], 1.0)


def test_live_writers_temporary_is_kept(tmp_path):
    """A temporary of a process that still runs may be mid-write: never removed."""
    path = tmp_path / "model.safetensors"
    live = tmp_path / f".model.safetensors.anygpu-{nanosign._host_tag()}-{os.getppid()}-0123456789ab.tmp"
    live.write_bytes(b"in progress")
    nanosign.atomic_write_bytes(path, b"data")
    assert live.exists()


def test_old_pattern_temporaries_go_only_when_old(tmp_path):
    fresh = tmp_path / ".model.safetensors.0123456789ab.tmp"
    old = tmp_path / ".model.safetensors.ba9876543210.tmp"
    fresh.write_bytes(b"x")
    old.write_bytes(b"x")
    os.utime(old, (1, 1))
    nanosign.atomic_write_bytes(tmp_path / "model.safetensors", b"data")
    assert fresh.exists() and not old.exists()


def test_symlinked_temporary_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"keep me")
    trap = tmp_path / ".model.safetensors.anygpu-h-1-0123456789ab.tmp"
    trap.symlink_to(victim)
    os.utime(trap, (1, 1), follow_symlinks=False)
    nanosign.remove_stale_temporaries(tmp_path)
    assert victim.read_bytes() == b"keep me"


@pytest.mark.parametrize("through_link", [False, True])
def test_writes_never_replace_a_fifo_or_device(tmp_path, through_link):
    """Run as root, replacing a symlink's target /dev/zero would swap the device for a file;
    a FIFO stands in for it here (never a real device in a test)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    path = tmp_path / "model.safetensors"
    if through_link:
        path.symlink_to(fifo)
    else:
        path = fifo
    with pytest.raises(ValueError, match="FIFO; expected a regular file"):
        checkpoint.save({"w": np.zeros(2, np.float32)}, path)
    with pytest.raises(ValueError, match="FIFO"):
        nanosign.sign(path)
    assert os.path.exists(fifo) and __import__("stat").S_ISFIFO(os.stat(fifo).st_mode)
    assert temporaries(tmp_path) == []
