"""Issue 70, row 4: another local user must not steer root's CLI or server through the data dir.
The other user is `nobody` (uid 65534): its files are made by root and handed over with chown, its
listener runs as that user (test_local_trust.attacker). Each test failed on the code before the fix:
(a) root chmodded a symlinked data dir's target 0700, and everything in it; (b) serve.lock was
opened through a link and truncated; (c) root's CLI trusted a data dir's owner, whoever that was, and
without a server wrote its store into another user's folder."""
from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path

import pytest
from test_local_trust import NOBODY, PAGE, attacker, cli

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="handing files to a second user needs root")


@pytest.fixture
def shared(tmp_path):
    """A folder every user may write in (as /tmp is), where the other user plants its names."""
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(folder, 0o1777)
    return folder


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_a_data_dir_symlinked_by_another_user_is_refused_and_its_target_left_alone(shared, tmp_path):
    from engine.core.private import UntrustedDataDir, make_private

    target = tmp_path / "etc-like"          # root's own folder, readable by all, as /etc is
    target.mkdir()
    (target / "config").write_text("kept\n")
    os.chmod(target, 0o755)
    os.chmod(target / "config", 0o644)
    link = shared / "data"
    link.symlink_to(target)
    os.lchown(link, NOBODY, NOBODY)          # the other user made the link
    with pytest.raises(UntrustedDataDir, match=f"belongs to uid {NOBODY}"):
        make_private(link)
    assert _mode(target) == 0o755 and _mode(target / "config") == 0o644

    # a link of root's own to another user's folder is refused too
    theirs = shared / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    mine = tmp_path / "mine"
    mine.symlink_to(theirs)
    with pytest.raises(UntrustedDataDir, match="links to"):
        make_private(mine)
    # and a link of root's own to root's folder is used: the folder it names is made private
    own = tmp_path / "own-link"
    own.symlink_to(target)
    make_private(own)
    assert _mode(target) == 0o700 and _mode(target / "config") == 0o600


def test_b_serve_lock_is_never_opened_through_a_link(tmp_path):
    from engine.core.private import UntrustedDataDir
    from server import owner

    precious = tmp_path / "precious"
    precious.write_text("do not truncate\n")
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / owner.LOCK_FILE).symlink_to(precious)
    with pytest.raises(OSError):
        owner.lock(data)
    assert precious.read_text() == "do not truncate\n"
    # a lock file the other user owns is not taken either
    (data / owner.LOCK_FILE).unlink()
    (data / owner.LOCK_FILE).write_text("")
    os.chown(data / owner.LOCK_FILE, NOBODY, NOBODY)
    with pytest.raises(UntrustedDataDir):
        owner.lock(data)


def test_c_roots_cli_sends_nothing_to_a_data_dir_another_user_made(shared):
    """The other user made the data dir first, with its own server.json and socket: root's CLI
    refuses it (before, root trusted the data dir's owner and sent it a new key)."""
    data = shared / "data"
    data.mkdir()
    squat = str(Path(tempfile.gettempdir()) / f"rf-squat4-{os.getpid()}.sock")
    with attacker(squat, seconds=15) as (victim, first, finish):
        assert first == "listening", first
        (data / "server.json").write_text(json.dumps({"pid": victim.pid, "socket": squat, "http": None,
                                                      "data_dir": str(data), "started": ""}))
        os.chmod(data / "server.json", 0o600)
        for p in (data / "server.json", data):
            os.chown(p, NOBODY, NOBODY)
        os.chmod(data, 0o700)
        for verb in (["keys", "create", "--workspace", "*"], ["ingest", "-", "--no-progress"]):
            r = cli(data, *verb, stdin=json.dumps(PAGE) + "\n")
            assert r.returncode == 2 and "rf_attacker" not in r.stdout, (verb, r.stdout, r.stderr)
            assert f"belongs to uid {NOBODY}" in r.stderr and "Traceback" not in r.stderr, r.stderr
        lines = finish()
    assert "received 0" in lines, lines


def test_c_with_no_server_nothing_is_written_into_another_users_data_dir(shared):
    from engine.app import Engine
    from engine.core.private import UntrustedDataDir
    from engine.core.settings import load_settings

    data = shared / "data"
    data.mkdir()
    os.chown(data, NOBODY, NOBODY)
    with pytest.raises(UntrustedDataDir, match=f"belongs to uid {NOBODY}"):
        Engine(load_settings(data_dir=str(data), models={"device": "cpu"}))
    assert list(data.iterdir()) == []
    # root's own data dir holding a file the other user put there (a link, say) is refused as well
    mine = shared / "mine"
    mine.mkdir(mode=0o700)
    (mine / "refindery.duckdb").symlink_to("/etc/passwd")
    os.lchown(mine / "refindery.duckdb", NOBODY, NOBODY)
    with pytest.raises(UntrustedDataDir, match="entry"):
        Engine(load_settings(data_dir=str(mine), models={"device": "cpu"}))
