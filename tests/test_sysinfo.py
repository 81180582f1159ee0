

def test_the_named_commit_wins_over_the_trees_git(monkeypatch):
    """The GPU machine's copy may hold a stale .git: TR2_GIT_COMMIT, when set, is what gets recorded."""
    from tr2 import sysinfo
    monkeypatch.setenv("TR2_GIT_COMMIT", "5d5ad50bfb78ffb5a833deeb7052c1ebd4196f64")
    monkeypatch.setenv("TR2_GIT_DIRTY", "false")
    assert sysinfo.git_commit() == {"commit": "5d5ad50bfb78ffb5a833deeb7052c1ebd4196f64", "dirty": False}
    monkeypatch.delenv("TR2_GIT_COMMIT")
    here = sysinfo.git_commit()
    assert here["commit"] is None or len(here["commit"]) == 40
