"""A Ray instance's folder is removed even while its last processes still write there."""

from __future__ import annotations

import shutil

from harness.load.ray_clients import remove_ray_folder


def test_a_folder_written_to_after_shutdown_is_removed_once_the_writer_stops(tmp_path, monkeypatch):
    """rmtree(ignore_errors) leaves a folder in which a process on its way out (a raylet, a
    log monitor) made a file between the listing and the rmdir: twice here, then it stops."""
    folder = tmp_path / "specgate-ray-x"
    (folder / "logs").mkdir(parents=True)
    real, calls = shutil.rmtree, []

    def racing_rmtree(path, ignore_errors=False):
        calls.append(path)
        if len(calls) <= 2:
            (folder / "logs" / f"late-{len(calls)}.log").write_text("x")  # what the race leaves
            return
        real(path, ignore_errors=ignore_errors)

    monkeypatch.setattr("shutil.rmtree", racing_rmtree)
    remove_ray_folder(str(folder), within_s=5)
    assert not folder.exists() and len(calls) == 3


def test_a_folder_that_outlives_the_grace_is_named_not_silently_left(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "specgate-ray-y"
    folder.mkdir()
    monkeypatch.setattr("shutil.rmtree", lambda *a, **k: None)  # a file that cannot be removed
    remove_ray_folder(str(folder), within_s=0.3)
    assert str(folder) in capsys.readouterr().err and folder.exists()
